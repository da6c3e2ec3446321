"""The interpreter: runs the nodes appended to one program state, in order, on a worker thread
(what each node does to the state: primitives.py).

`s += expr` only queues the nodes, so a program (or each branch of a fork) runs ahead until
it reads a result (`s["x"]`, `s.text()`); branches and batch items thus overlap on the
backend. Every field below is guarded by `cond`; the worker holds it only between backend
calls, never during one.
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Iterator
from typing import Any

from radixrt_lang import ir
from radixrt_lang.backends.base import BaseBackend
from radixrt_lang.errors import ProgramError
from radixrt_lang.exec_types import Call, OpenRole, Snapshot, sets_of
from radixrt_lang.primitives import Primitives


class StateExecutor(Primitives):
    """Owns one state's text, messages, variables and meta info, and the queue of nodes."""

    def __init__(
        self,
        backend: BaseBackend,
        defaults: ir.SamplingParams,
        stream: bool = False,
        snapshot: Snapshot | None = None,
    ) -> None:
        snap = snapshot or Snapshot()
        self.backend = backend
        self.defaults = defaults
        self.stream = stream
        self.text = snap.text
        self.messages = snap.messages
        self.variables = snap.variables
        self.meta = snap.meta
        self.spans = snap.spans
        self.roles = snap.roles
        self.scopes = snap.scopes
        self.turns = snap.turns  # (role, content start, content end) of each finished message
        self.fork_start = len(snap.text)  # where this branch's own text begins
        self.new_vars: list[str] = []  # variables set here (not inherited), in order
        self.partial: dict[str, str] = {}  # text of variables being streamed
        self.streaming = ""  # text generated so far by the running streamed gen
        self.error: BaseException | None = None
        self.closed = False  # the program function has returned: no more nodes will come
        self.cond = threading.Condition()
        self._queue: collections.deque[ir.Expr] = collections.deque()
        self._running = False
        # Queued nodes that will set each variable: a read waits until none is left, so it
        # never returns the value of an earlier gen of the same name.
        self._pending_vars: collections.Counter[str] = collections.Counter()

    # ---- the program side ----------------------------------------------------------------

    def submit(self, expr: ir.Expr) -> None:
        """Queue the expression's nodes; they run after everything queued before them."""
        nodes = ir.flatten(expr)
        with self.cond:
            self._queue.extend(nodes)
            for node in nodes:
                self._pending_vars.update(sets_of(node))
            if self._running or not self._queue:
                return
            self._running = True
        threading.Thread(target=self._work, name="radixrt-lang-state", daemon=True).start()

    def sync(self) -> None:
        """Wait until every queued node has run (or been skipped after an error)."""
        with self.cond:
            self.cond.wait_for(lambda: not self._running)

    def get_var(self, name: str) -> Any:
        """Wait for variable `name`; raise the program's error, or KeyError once idle without it."""
        with self.cond:
            self.cond.wait_for(
                lambda: (
                    (name in self.variables and not self._pending_vars[name])
                    or self.error is not None
                    or not self._running
                )
            )
            if name in self.variables and not self._pending_vars[name]:
                return self.variables[name]
            if self.error is not None:
                raise self.error
            raise KeyError(f"no variable {name!r} (known: {sorted(self.variables)})")

    def set_var(self, name: str, value: Any) -> None:
        with self.cond:
            self._set_var(name, value)

    def close(self, error: BaseException | None = None) -> None:
        """The program function has returned (with `error` if it raised)."""
        with self.cond:
            if error is not None and self.error is None:
                self.error = error
            self.closed = True
            self.cond.notify_all()

    def fork(self, n: int) -> list[StateExecutor]:
        """n branches sharing everything so far; the shared prefix is cached first."""
        self.sync()
        if self.error is not None:
            raise self.error
        if self.text:
            self.backend.cache_prefix(self.text)
        with self.cond:
            branches = [
                StateExecutor(
                    self.backend,
                    self.defaults,
                    self.stream,
                    Snapshot(
                        self.text,
                        [dict(m) for m in self.messages],
                        dict(self.variables),
                        dict(self.meta),
                        list(self.spans),
                        [OpenRole(r.role, r.content_start, r.suffix) for r in self.roles],
                        dict(self.scopes),
                        list(self.turns),
                    ),
                )
                for _ in range(n)
            ]
        for b in branches:
            b.closed = True  # a branch's text_iter ends whenever the branch is idle
        return branches

    def text_iter(self, var: str | None = None) -> Iterator[str]:
        """Text as it is generated (of `var` only, when given) until the program ends."""
        pos = 0
        while True:
            with self.cond:
                self.cond.wait_for(functools.partial(self._has_news, var, pos))
                current, final = self._current(var)
                done = self._is_done(var) and len(current) == pos
                error = self.error
            if len(current) > pos:
                yield current[pos:]
                pos = len(current)
            elif done or final:
                if error is not None:
                    raise error
                return

    # ---- the worker thread ---------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self.cond:
                if not self._queue:
                    self._running = False
                    self.cond.notify_all()
                    return
                node = self._queue.popleft()
                skip = self.error is not None
            try:
                if not skip:
                    self._execute(node)
            except BaseException as e:  # noqa: BLE001 - surfaced by run() / state.error()
                label = node.label if isinstance(node, Call) else ir.describe(node)
                with self.cond:
                    self.error = e if isinstance(e, ProgramError) else ProgramError(label, e)
            finally:
                with self.cond:
                    self._pending_vars.subtract(sets_of(node))
                    self.cond.notify_all()

    def _execute(self, node: ir.Expr) -> None:
        if isinstance(node, ir.Text):
            self._append(node.text)
        elif isinstance(node, ir.Gen):
            self._gen(node)
        elif isinstance(node, ir.Select):
            self._select(node)
        elif isinstance(node, ir.RoleBegin):
            self._role_begin(node.role)
        elif isinstance(node, ir.RoleEnd):
            self._role_end(node.role)
        elif isinstance(node, ir.VarScopeBegin):
            with self.cond:
                self.scopes[node.name] = len(self.text)
        elif isinstance(node, ir.VarScopeEnd):
            with self.cond:
                self._set_var(node.name, self.text[self.scopes.pop(node.name) :])
        elif isinstance(node, Call):
            node.fn(self)
        else:
            raise TypeError(f"unknown node {node!r}")

    def _current(self, var: str | None) -> tuple[str, bool]:
        """(the text followed by text_iter, whether it is final)."""
        if var is None:
            return self.text + self.streaming, False
        if var in self.partial:
            return self.partial[var], False
        value = self.variables.get(var)
        return ("" if value is None else str(value)), var in self.variables

    def _has_news(self, var: str | None, pos: int) -> bool:
        return len(self._current(var)[0]) != pos or self._is_done(var)

    def _is_done(self, var: str | None) -> bool:
        idle = not self._running and (self.closed or self.error is not None)
        return idle or (var is not None and var in self.variables)
