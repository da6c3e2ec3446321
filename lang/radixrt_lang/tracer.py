"""Tracing a program to find its constant prefix: the text every run starts with.

The program runs against a TracingState with placeholders for its unbound arguments; the
trace stops at the first thing that depends on an argument or on the model (a placeholder
used in any way, a gen, a select, a read). `run_batch` sends that prefix once so that every
item of the batch hits the cache. Code before the first gen runs once more for the trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from radixrt_lang import ir
from radixrt_lang.backends.base import BaseBackend
from radixrt_lang.chat_template import Message


class StopTrace(Exception):
    """Raised where the program's text stops being constant."""


class Placeholder(ir.Expr):
    """Stands for an unbound argument. Concatenated with text it is a node (so the trace keeps
    `rt.user("Q: " + q)`'s role prefix and "Q: "); any other use ends the trace."""

    def _stop(self, *args: Any, **kwargs: Any) -> Any:
        raise StopTrace

    __str__ = __repr__ = __format__ = __mod__ = __mul__ = _stop
    __iter__ = __len__ = __bool__ = __getitem__ = __int__ = __float__ = __call__ = _stop
    __eq__ = __lt__ = __gt__ = __contains__ = _stop  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        raise StopTrace


class TracingState:
    """Records constant text and role markers; everything else raises StopTrace."""

    def __init__(self, backend: BaseBackend) -> None:
        self.backend = backend
        self.text = ""
        self.messages: list[Message] = []
        self._roles: list[tuple[str, int, str]] = []

    def __iadd__(self, other: object) -> TracingState:
        if isinstance(other, Placeholder):
            raise StopTrace
        for node in ir.flatten(ir.to_expr(other)):
            self._apply(node)
        return self

    def system(self, expr: object = None) -> contextlib.AbstractContextManager[None]:
        return self._role("system", expr)

    def user(self, expr: object = None) -> contextlib.AbstractContextManager[None]:
        return self._role("user", expr)

    def assistant(self, expr: object = None) -> contextlib.AbstractContextManager[None]:
        return self._role("assistant", expr)

    def __getattr__(self, name: str) -> Any:
        raise StopTrace  # reads, forks, ...: the rest depends on the model

    def __getitem__(self, name: str) -> Any:
        raise StopTrace

    def _role(self, role: str, expr: object) -> contextlib.AbstractContextManager[None]:
        if expr is not None:
            self += ir.Seq([ir.RoleBegin(role), ir.to_expr(expr), ir.RoleEnd(role)])
            return contextlib.nullcontext()
        return self._role_block(role)

    @contextlib.contextmanager
    def _role_block(self, role: str) -> Iterator[None]:
        self._apply(ir.RoleBegin(role))
        yield  # an exception inside (the trace stopping) skips the role's end
        self._apply(ir.RoleEnd(role))

    def _apply(self, node: ir.Expr) -> None:
        if isinstance(node, ir.Text):
            self.text += node.text
        elif isinstance(node, ir.RoleBegin):
            template = self.backend.chat_template()
            if template is None:
                raise StopTrace
            prefix, suffix = template.role_parts(self.messages, node.role)
            self.text += prefix
            self._roles.append((node.role, len(self.text), suffix))
        elif isinstance(node, ir.RoleEnd) and self._roles and self._roles[-1][0] == node.role:
            role, start, suffix = self._roles.pop()
            self.messages.append({"role": role, "content": self.text[start:]})
            self.text += suffix
        else:
            raise StopTrace


def constant_prefix(func: Callable[..., Any], bound: dict[str, Any], backend: BaseBackend) -> str:
    """The text every run of `func` starts with, whatever its unbound arguments."""
    state = TracingState(backend)
    params = list(inspect.signature(func).parameters.values())[1:]
    kwargs = {
        p.name: bound.get(p.name, Placeholder())
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    try:
        result = func(state, **kwargs)
        if inspect.isawaitable(result):
            asyncio.run(_await(result))
    except Exception:  # noqa: BLE001 - StopTrace, or the program failing on placeholders
        pass
    return state.text


async def _await(awaitable: Any) -> Any:
    return await awaitable
