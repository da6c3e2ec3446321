"""The interpreter: runs the nodes appended to one program state, in order, on a worker thread.

`s += expr` only queues the nodes, so a program (or each branch of a fork) runs ahead until
it reads a result (`s["x"]`, `s.text()`); branches and batch items thus overlap on the
backend. Every field below is guarded by `cond`; the worker holds it only between backend
calls, never during one.
"""

from __future__ import annotations

import collections
import functools
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

from radixrt_lang import ir, typed
from radixrt_lang.backends.base import BaseBackend
from radixrt_lang.errors import NotSupportedError, OutputParseError, ProgramError
from radixrt_lang.exec_types import Call, OpenRole, Snapshot, Span, sets_of
from radixrt_lang.scoring import score_choices
from radixrt_lang.tools import call_schema, parse_call


class StateExecutor:
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

    # ---- primitives ----------------------------------------------------------------------

    def _gen(self, node: ir.Gen) -> None:
        params = node.params.merged(self.defaults)
        if node.tools is not None:
            self._gen_tool_call(node, params)
            return
        if node.dtype is bool and self.backend.can_score and params.regex is None:
            self._select(ir.Select(node.name, typed.BOOL_CHOICES, _default_method()), bool)
            return
        if (
            params.regex is not None or params.json_schema is not None
        ) and not self.backend.supports_regex:
            which = "regex" if params.regex is not None else "json_schema"
            raise NotSupportedError(
                f"{which} is not supported by this backend "
                f"({self.backend!r}) yet: it does not enforce regexes"
            )
        if node.dtype is not None and node.dtype is not str:
            self._gen_typed(node, params)
        elif node.dtype is str:
            self._gen_string(node, params)
        else:
            text, meta = self._call_gen(node.name, params)
            _check_structured(params, text, meta)
            self._finish_gen(node.name, text, text, meta)

    def _gen_tool_call(self, node: ir.Gen, params: ir.SamplingParams) -> None:
        assert node.tools is not None
        if not self.backend.supports_regex:
            raise NotSupportedError(
                f"tool_call is not supported by this backend ({self.backend!r}) yet: it does "
                "not enforce json_schema"
            )
        schema = json.dumps(call_schema(node.tools))  # name first, then the arguments
        raw, meta = self._call_gen(node.name, params.replace(json_schema=schema), stream=False)
        value = parse_call(raw, {t["name"] for t in node.tools})
        self._finish_gen(node.name, raw, value, meta)

    def _gen_typed(self, node: ir.Gen, params: ir.SamplingParams) -> None:
        assert node.dtype is not None
        if self.backend.supports_regex:  # the value ends where the model's text would
            params = params.replace(regex=typed.regex_for(node.dtype), end_on_exit=True)
        else:  # unconstrained: stop at the end of the line and recover the value
            params = params.replace(stop=[*params.stop_list(), "\n"])
        raw, meta = self._call_gen(node.name, params, stream=False)
        value, text = typed.parse(node.dtype, raw)
        meta = {**meta, "raw_text": raw}
        self._finish_gen(node.name, text, value, meta)

    def _gen_string(self, node: ir.Gen, params: ir.SamplingParams) -> None:
        if self.backend.supports_regex:
            raw, meta = self._call_gen(node.name, params.replace(regex=typed.STR_REGEX), False)
            if not re.fullmatch(typed.STR_REGEX, raw):
                raise OutputParseError(f"expected a quoted string, the model wrote {raw!r}")
            self._finish_gen(node.name, raw, raw[1:-1], meta)
            return
        self._append('"')  # unconstrained: open the quote, stop at the closing one
        raw, meta = self._call_gen(node.name, params.replace(stop=[*params.stop_list(), '"']))
        self._finish_gen(node.name, raw, raw, meta)
        self._append('"')

    def _call_gen(
        self, name: str | None, params: ir.SamplingParams, stream: bool | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Run one generation from the current text; returns (text, meta_info)."""
        d = params.to_dict()
        role = self.roles[-1] if self.roles else None
        if role is not None and self.backend.chat_template() is None:
            if role.role != "assistant" or len(self.text) != role.content_start:
                raise NotSupportedError(
                    f"{self.backend!r} takes chat messages: a gen in a role "
                    "must be the whole content of an assistant message"
                )
            out = self.backend.chat(list(self.messages), d)
            return out["text"], out["meta_info"]
        if self.stream if stream is None else stream:
            out: dict[str, Any] = {"text": "", "meta_info": {}}
            for out in self.backend.generate_stream(self.text, d):
                with self.cond:
                    if name is not None:
                        self.partial[name] = out["text"]
                    self.streaming = out["text"]
                    self.cond.notify_all()
            return out["text"], out["meta_info"]
        out = self.backend.generate([self.text], d)[0]
        return out["text"], out["meta_info"]

    def _finish_gen(self, name: str | None, text: str, value: Any, meta: dict[str, Any]) -> None:
        with self.cond:
            self.streaming = ""
            start = len(self.text)
            self._append_locked(text)
            self.spans.append(Span(start, len(self.text), name, "gen", meta))
            if name is not None:
                self.meta[name] = meta
                self.partial.pop(name, None)
                self._set_var(name, value)

    def _select(self, node: ir.Select, dtype: type = str) -> None:
        result, meta = score_choices(self.backend, self.text, node.choices, node.method)
        with self.cond:
            start = len(self.text)
            self._append_locked(result.decision)
            self.spans.append(Span(start, len(self.text), node.name, "select", meta))
            if node.name is not None:
                self.meta[node.name] = meta
                value = result.decision == "True" if dtype is bool else result.decision
                self._set_var(node.name, value)

    def _role_begin(self, role: str) -> None:
        template = self.backend.chat_template()
        prefix, suffix = template.role_parts(self.messages, role) if template else ("", "")
        with self.cond:
            self._append_locked(prefix)
            self.roles.append(OpenRole(role, len(self.text), suffix))

    def _role_end(self, role: str) -> None:
        with self.cond:
            if not self.roles or self.roles[-1].role != role:
                open_role = self.roles[-1].role if self.roles else None
                raise ValueError(f"{role}() ends, but the open role is {open_role!r}")
            r = self.roles.pop()
            self.messages.append({"role": role, "content": self.text[r.content_start :]})
            self.turns.append((role, r.content_start, len(self.text)))
            self._append_locked(r.suffix)

    # ---- helpers (callers hold cond unless noted) -----------------------------------------

    def _append(self, text: str) -> None:
        with self.cond:
            self._append_locked(text)

    def _append_locked(self, text: str) -> None:
        self.text += text
        self.cond.notify_all()

    def _set_var(self, name: str, value: Any) -> None:
        if name not in self.new_vars:
            self.new_vars.append(name)
        self.variables[name] = value
        self.cond.notify_all()

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


def _check_structured(params: ir.SamplingParams, text: str, meta: dict[str, Any]) -> None:
    """Outputs of regex / json_schema gens are checked even when the backend enforced them;
    one the token budget cut short says so (the backend could not finish it in time)."""
    if params.regex is None and params.json_schema is None:
        return
    reason = (meta.get("finish_reason") or {}).get("type")
    if reason == "length":
        which = "regex" if params.regex is not None else "json_schema"
        budget = params.max_new_tokens
        limit = f"max_tokens={budget}" if budget is not None else "the token limit"
        raise OutputParseError(
            f"the {which} output ran out of tokens ({limit}) before it was complete: "
            f"{text!r}; give the gen a larger max_tokens"
        )
    if params.regex is not None and not re.fullmatch(params.regex, text):
        raise OutputParseError(f"the output {text!r} does not match the regex {params.regex!r}")
    if params.json_schema is not None:
        try:
            json.loads(text)
        except ValueError as e:
            raise OutputParseError(f"the output is not JSON: {e}") from None


def _default_method() -> Any:
    from radixrt_lang.choices import token_length_normalized

    return token_length_normalized
