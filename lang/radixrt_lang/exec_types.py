"""Value types the interpreter keeps per program state: generated spans, open roles, the
snapshot a fork copies, and the internal node that runs a callback in program order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from radixrt_lang import ir
from radixrt_lang.chat_template import Message

if TYPE_CHECKING:
    from radixrt_lang.interpreter import StateExecutor


@dataclass(slots=True)
class Span:
    """A generated or selected piece of the text, for display: text[start:end]."""

    start: int
    end: int
    name: str | None
    kind: str  # "gen" or "select"
    meta: dict[str, Any]


@dataclass(slots=True)
class Call(ir.Expr):
    """An internal node: run `fn(executor)` in order with the program's other nodes."""

    fn: Callable[[StateExecutor], None]
    label: str = "call"
    sets: tuple[str, ...] = ()  # the variables it sets (reads of them wait for it)


@dataclass(slots=True)
class OpenRole:
    role: str
    content_start: int
    suffix: str


@dataclass
class Snapshot:
    """What a fork copies from its parent."""

    text: str = ""
    messages: list[Message] = field(default_factory=list)
    variables: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    spans: list[Span] = field(default_factory=list)
    roles: list[OpenRole] = field(default_factory=list)
    scopes: dict[str, int] = field(default_factory=dict)
    turns: list[tuple[str, int, int]] = field(default_factory=list)


def sets_of(node: ir.Expr) -> tuple[str, ...]:
    """The variables a node sets."""
    if isinstance(node, (ir.Gen, ir.Select)):
        return () if node.name is None else (node.name,)
    if isinstance(node, ir.VarScopeEnd):
        return (node.name,)
    if isinstance(node, Call):
        return node.sets
    return ()
