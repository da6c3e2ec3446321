"""What each node does to a program state: a gen (plain, typed, a quoted string, a tool call),
a select, a role's beginning and end, and the checks of structured outputs. `StateExecutor`
(interpreter.py) runs them on its worker thread, holding `cond` only between backend calls.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from radixrt_lang import ir, typed
from radixrt_lang.backends.base import BaseBackend
from radixrt_lang.errors import NotSupportedError, OutputParseError
from radixrt_lang.exec_types import Message, OpenRole, Span
from radixrt_lang.scoring import score_choices
from radixrt_lang.tools import call_schema, parse_call


class Primitives:
    """The node primitives over one state's fields, which `StateExecutor` owns and guards with
    `cond` (documented there)."""

    backend: BaseBackend
    defaults: ir.SamplingParams
    stream: bool
    text: str
    messages: list[Message]
    variables: dict[str, Any]
    meta: dict[str, Any]
    spans: list[Span]
    roles: list[OpenRole]
    turns: list[tuple[str, int, int]]
    new_vars: list[str]
    partial: dict[str, str]
    streaming: str
    cond: threading.Condition

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
