"""The language's IR: sampling parameters and the expression nodes a program appends to a state.

Nodes are plain values; `lang/interpreter.py` gives them meaning. `a + b` of two nodes (or a
node and a str) is a `Seq`, so `"Q: " + rt.gen("a")` is one expression.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

_ALIASES = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}


@dataclass(slots=True)
class SamplingParams:
    """Sampling parameters of one `gen`, or a program's defaults; None means "not set here".

    Names follow the runtime's `/generate` sampling parameters; `max_tokens` and `min_tokens`
    are accepted as aliases. `gen(...)` values override the program's, which override none.
    """

    max_new_tokens: int | None = None
    min_new_tokens: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    ignore_eos: bool | None = None
    return_logprob: bool | None = None
    top_logprobs_num: int | None = None
    regex: str | None = None
    json_schema: str | dict[str, Any] | None = None
    # Where the regex could end, tokens it refuses count toward ending: typed gens set it.
    end_on_exit: bool | None = None
    # The text the output is expected to repeat for the most part (a file being edited):
    # drafted from for speculative decoding, the output the same with or without it.
    prediction: str | None = None
    # OpenAI's logit_bias: token id -> a value in [-100, 100] added to its logit.
    logit_bias: dict[int, float] | None = None
    # vLLM's allowed_token_ids: only these ids are sampled.
    allowed_token_ids: list[int] | None = None

    @classmethod
    def names(cls) -> frozenset[str]:
        """Every accepted keyword, aliases included."""
        return frozenset(f.name for f in dataclasses.fields(cls)) | frozenset(_ALIASES)

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> SamplingParams:
        """Build from keyword arguments; an unknown name raises TypeError naming it."""
        fields: dict[str, Any] = {}
        for key, value in kwargs.items():
            name = _ALIASES.get(key, key)
            if name not in cls.names():
                raise TypeError(f"unknown sampling parameter {key!r}")
            fields[name] = value
        return cls(**fields)

    def merged(self, defaults: SamplingParams) -> SamplingParams:
        """These parameters, with `defaults` filling the fields not set here."""
        return SamplingParams(
            **{
                f.name: v if (v := getattr(self, f.name)) is not None else getattr(defaults, f.name)
                for f in dataclasses.fields(self)
            }
        )

    def replace(self, **changes: Any) -> SamplingParams:
        return dataclasses.replace(self, **changes)

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def to_dict(self) -> dict[str, Any]:
        """The set fields as a `/generate` sampling_params dict (stop as a list)."""
        d = {
            f.name: v for f in dataclasses.fields(self) if (v := getattr(self, f.name)) is not None
        }
        if "stop" in d:
            d["stop"] = self.stop_list()
        return d


DEFAULT_PARAMS = SamplingParams(max_new_tokens=128)


class Expr:
    """Base of every node; `+` concatenates."""

    def __add__(self, other: object) -> Seq:
        return Seq([self, to_expr(other)])

    def __radd__(self, other: object) -> Seq:
        return Seq([to_expr(other), self])


@dataclass(slots=True)
class Text(Expr):
    text: str


@dataclass(slots=True)
class Gen(Expr):
    """Generate text; stored in variable `name` (when given) as `dtype` (str when None)."""

    name: str | None
    params: SamplingParams
    dtype: type | None = None
    tools: list[dict[str, Any]] | None = None  # a forced call of one (lang/tools.py specs)


@dataclass(slots=True)
class Select(Expr):
    """Append the best of `choices`, scored by `method` (a ChoiceMethod from lang/choices.py)."""

    name: str | None
    choices: list[str]
    method: Any


@dataclass(slots=True)
class RoleBegin(Expr):
    role: str


@dataclass(slots=True)
class RoleEnd(Expr):
    role: str


@dataclass(slots=True)
class VarScopeBegin(Expr):
    name: str


@dataclass(slots=True)
class VarScopeEnd(Expr):
    name: str


@dataclass(slots=True)
class Seq(Expr):
    items: list[Expr] = field(default_factory=list)

    def __add__(self, other: object) -> Seq:
        return Seq([*self.items, to_expr(other)])

    def __radd__(self, other: object) -> Seq:
        return Seq([to_expr(other), *self.items])


def to_expr(x: object) -> Expr:
    """A node as is; a str (or a number) as Text; anything else raises TypeError."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, str):
        return Text(x)
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return Text(str(x))
    raise TypeError(f"cannot append a {type(x).__name__} to a program state")


def flatten(expr: Expr) -> list[Expr]:
    """The leaves of an expression in order (Seq nodes expanded, empty texts dropped)."""
    if isinstance(expr, Seq):
        return [leaf for item in expr.items for leaf in flatten(item)]
    if isinstance(expr, Text) and not expr.text:
        return []
    return [expr]


def describe(node: Expr) -> str:
    """How an error message names a primitive: gen('answer'), select('label'), ..."""
    if isinstance(node, Gen):
        return f"gen({node.name!r})"
    if isinstance(node, Select):
        return f"select({node.name!r})"
    if isinstance(node, (RoleBegin, RoleEnd)):
        return f"{node.role}()"
    return type(node).__name__
