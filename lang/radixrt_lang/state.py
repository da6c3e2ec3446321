"""ProgramState (the `s` a program appends to) and ProgramStateGroup (what `s.fork(n)` returns)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from radixrt_lang import ir
from radixrt_lang.chat_template import Message
from radixrt_lang.exec_types import Call
from radixrt_lang.interpreter import StateExecutor


class ProgramState:
    """The state of one running program: its text, messages, variables and meta info.

    `s += expr` queues and returns at once; reads (`s["x"]`, `s.text()`) wait for the
    results they need. Errors of a primitive surface on the next read and from `run`.
    """

    def __init__(self, executor: StateExecutor) -> None:
        self._ex = executor

    # ---- appending -----------------------------------------------------------------------

    def __iadd__(self, other: object) -> ProgramState:
        self._ex.submit(ir.to_expr(other))
        return self

    def system(self, expr: object = None) -> contextlib.AbstractContextManager[None]:
        """`with s.system(): ...`: everything appended inside is one system message."""
        return self._role("system", expr)

    def user(self, expr: object = None) -> contextlib.AbstractContextManager[None]:
        return self._role("user", expr)

    def assistant(self, expr: object = None) -> contextlib.AbstractContextManager[None]:
        return self._role("assistant", expr)

    @contextlib.contextmanager
    def var_scope(self, name: str) -> Iterator[None]:
        """Everything appended inside the block becomes variable `name` (as text)."""
        self._ex.submit(ir.VarScopeBegin(name))
        try:
            yield
        finally:
            self._ex.submit(ir.VarScopeEnd(name))

    def set_var(self, name: str, value: Any) -> None:
        """Set variable `name`, in order with what was appended before."""
        self._ex.submit(Call(lambda ex: ex.set_var(name, value), f"set_var({name!r})", (name,)))

    def fork(self, n: int) -> ProgramStateGroup:
        """n states sharing everything so far; the shared prefix is sent once to be cached."""
        if n < 1:
            raise ValueError(f"fork needs n >= 1, got {n}")
        return ProgramStateGroup(self, [ProgramState(ex) for ex in self._ex.fork(n)])

    # ---- reading -------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        """Variable `name`, waiting until it exists."""
        return self._ex.get_var(name)

    def get_var(self, name: str) -> Any:
        return self._ex.get_var(name)

    def __contains__(self, name: str) -> bool:
        self.sync()
        return name in self._ex.variables

    def text(self) -> str:
        """The whole text so far (prompt, template markers and generated parts)."""
        self.sync()
        return self._ex.text

    def messages(self) -> list[Message]:
        """The conversation as [{"role", "content"}], one entry per finished role block."""
        self.sync()
        return [dict(m) for m in self._ex.messages]

    def variables(self) -> dict[str, Any]:
        self.sync()
        return dict(self._ex.variables)

    def get_meta_info(self, name: str) -> dict[str, Any]:
        """The backend's meta info for variable `name`: prompt/completion/cached tokens, finish
        reason, logprobs; for a select also the choices' logprobs."""
        self._ex.get_var(name)
        return self._ex.meta[name]

    def error(self) -> BaseException | None:
        """The error that stopped the program, or None (waits for the program to finish)."""
        self.sync()
        return self._ex.error

    def sync(self) -> None:
        """Wait until everything appended so far has run."""
        self._ex.sync()

    def text_iter(self, var: str | None = None) -> Iterator[str]:
        """Yield text as it is generated (only variable `var`'s, when given); needs run(stream=True)
        to see tokens as they come, otherwise whole pieces arrive."""
        return self._ex.text_iter(var)

    # ---- asyncio -------------------------------------------------------------------------

    async def aget(self, name: str) -> Any:
        """`await s.aget("x")`: variable `x` without blocking the event loop."""
        return await asyncio.to_thread(self._ex.get_var, name)

    async def atext(self) -> str:
        await asyncio.to_thread(self._ex.sync)
        return self._ex.text

    async def async_text_iter(self, var: str | None = None) -> Any:
        """Async version of text_iter."""
        it = self._ex.text_iter(var)
        done = object()
        while (chunk := await asyncio.to_thread(next, it, done)) is not done:
            yield chunk

    # ---- display -------------------------------------------------------------------------

    def _repr_html_(self) -> str:
        from radixrt_lang.display import state_html

        self.sync()
        return state_html(self._ex)

    def __repr__(self) -> str:
        self.sync()
        return f"ProgramState({self._ex.text!r})"

    def _role(self, role: str, expr: object) -> contextlib.AbstractContextManager[None]:
        if expr is not None:
            self._ex.submit(ir.Seq([ir.RoleBegin(role), ir.to_expr(expr), ir.RoleEnd(role)]))
            return contextlib.nullcontext()
        return _RoleBlock(self._ex, role)


class _RoleBlock(contextlib.AbstractContextManager[None]):
    def __init__(self, ex: StateExecutor, role: str) -> None:
        self.ex, self.role = ex, role

    def __enter__(self) -> None:
        self.ex.submit(ir.RoleBegin(self.role))

    def __exit__(self, *exc: object) -> None:
        self.ex.submit(ir.RoleEnd(self.role))


class ProgramStateGroup:
    """The branches of a fork. `forks += expr` appends to every branch (a callable is called
    with the branch index, a list gives one expression per branch); `join` merges back."""

    def __init__(self, parent: ProgramState, states: list[ProgramState]) -> None:
        self.parent = parent
        self.states = states

    def __len__(self) -> int:
        return len(self.states)

    def __getitem__(self, i: int) -> ProgramState:
        return self.states[i]

    def __iter__(self) -> Iterator[ProgramState]:
        return iter(self.states)

    def __iadd__(self, other: object) -> ProgramStateGroup:
        if isinstance(other, (list, tuple)):
            if len(other) != len(self.states):
                raise ValueError(f"{len(other)} expressions for {len(self.states)} branches")
            exprs: list[object] = list(other)
        elif callable(other) and not isinstance(other, ir.Expr):
            fn: Callable[[int], object] = other
            exprs = [fn(i) for i in range(len(self.states))]
        else:
            exprs = [other] * len(self.states)
        for state, expr in zip(self.states, exprs, strict=True):
            state += expr
        return self

    def join(self, mode: str = "gather") -> None:
        """Merge the branches into the parent, in order with what the parent runs.

        "gather": every variable a branch set becomes a list (one value per branch) in the
        parent, meta info likewise. "concat": also appends each branch's own text, in
        branch order, to the parent's text."""
        if mode not in ("gather", "concat"):
            raise ValueError(f"join mode must be 'gather' or 'concat', got {mode!r}")
        branches = [s._ex for s in self.states]
        for b in branches:
            b.sync()
        failed = next((b.error for b in branches if b.error is not None), None)
        names = list(dict.fromkeys(n for b in branches for n in b.new_vars))

        def merge(ex: StateExecutor) -> None:
            if failed is not None:
                raise failed
            if mode == "concat":
                with ex.cond:
                    for b in branches:
                        ex.text += b.text[b.fork_start :]
            with ex.cond:
                for name in names:
                    ex.meta[name] = [b.meta.get(name) for b in branches]
                    ex._set_var(name, [b.variables.get(name) for b in branches])

        self.parent._ex.submit(Call(merge, f"join({mode!r})", tuple(names)))
