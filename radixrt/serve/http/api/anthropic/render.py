"""Anthropic's answers: a message (whole) or its named server-sent events, and errors in
Anthropic's shape. The usage block reports what the radix tree served and what the pins hold
besides (protocol.usage)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from starlette.responses import Response

from radixrt.core import FinishKind, PinSpec
from radixrt.serve.http.api.anthropic.diagnostics import render_diagnostics
from radixrt.serve.http.api.anthropic.protocol import Breakpoint, usage
from radixrt.serve.http.api.anthropic.tool_blocks import (
    ToolBlocks,
    named_event,
    new_tool_use_id,
    thinking_block,
    tool_use_block,
)
from radixrt.serve.http.render import BaseRender, Finished
from radixrt.serve.http.req_state import ReqState
from radixrt.serve.http.tools import ToolPlan, read_output
from radixrt.serve.results.delta import OutputDelta
from radixrt.serve.web.responses import json_response

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}

Planned = list[tuple[Breakpoint, PinSpec]]  # the breakpoints that asked for a pin, and how


def error_body(message: str, status: int) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def render_error(message: str, status: int) -> Response:
    return json_response(error_body(message, status), status)


class MessagesRender(BaseRender):
    """One call of /v1/messages (one request, no n).

    A stream: message_start (with the first output, so the cache read is known),
    content_block_start, ping, a text_delta per new text, content_block_stop, message_delta
    (stop reason and the final usage, pins included), message_stop; or an `error` event."""

    def __init__(
        self, msg_id: str, model: str, planned: Planned, plan: ToolPlan | None = None
    ) -> None:
        self.msg_id = msg_id
        self.model = model
        self.planned = planned
        self._started = False
        self.plan = plan if plan is not None and plan.parses_output else None
        self._blocks: ToolBlocks | None = None  # a stream with tools: its content blocks

    def response(self, done: Finished) -> dict[str, Any]:
        state = done.states[0]
        reason, sequence = _stop_reason(state)
        text = done.outputs[0].text
        content: list[dict[str, Any]] = []
        if self.plan is not None and _has_block(state):
            thought, text, calls = read_output(self.plan, text, new_tool_use_id)
            content = [thinking_block(thought)] if thought else []
            content += [{"type": "text", "text": text}] if text else []
            content += [tool_use_block(c.id, c.name, c.arguments_value()) for c in calls]
            reason = "tool_use" if calls and reason == "end_turn" else reason
        elif _has_block(state):
            content = [{"type": "text", "text": text}]
        return {
            **self._message(state, final=True),
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
        }

    def delta(self, index: int, state: ReqState, delta: OutputDelta) -> Iterator[bytes]:
        if self.plan is not None:
            yield from self._tool_delta(state, delta)
            return
        block = _has_block(state)
        if not self._started:
            self._started = True
            start = self._message(state, final=False)
            start["usage"]["output_tokens"] = 0
            yield named_event("message_start", {"type": "message_start", "message": start})
            if block:
                content_block = {"type": "text", "text": ""}
                yield named_event("content_block_start", {"type": "content_block_start",
                                  "index": 0, "content_block": content_block})  # fmt: skip
            yield named_event("ping", {"type": "ping"})
        if block and delta.text:
            text = {"type": "text_delta", "text": delta.text}
            yield named_event(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": text}
            )

    def tail(self, states: list[ReqState]) -> Iterator[bytes]:
        state = states[0]
        reason, sequence = _stop_reason(state)
        if self._blocks is not None:
            yield from self._blocks.close()
            if self._blocks.parser.calls and reason == "end_turn":
                reason = "tool_use"
        elif _has_block(state):
            yield named_event("content_block_stop", {"type": "content_block_stop", "index": 0})
        final = self._message(state, final=True)["usage"]
        stop = {"stop_reason": reason, "stop_sequence": sequence}
        yield named_event("message_delta", {"type": "message_delta", "delta": stop, "usage": final})
        yield named_event("message_stop", {"type": "message_stop"})

    def error(self, message: str, status: int) -> bytes:
        return named_event("error", error_body(message, status))

    def _tool_delta(self, state: ReqState, delta: OutputDelta) -> Iterator[bytes]:
        """With tools: blocks open as the parser finds text and calls."""
        assert self.plan is not None
        if not self._started:
            self._started = True
            start = self._message(state, final=False)
            start["usage"]["output_tokens"] = 0
            yield named_event("message_start", {"type": "message_start", "message": start})
            yield named_event("ping", {"type": "ping"})
            self._blocks = ToolBlocks(self.plan.new_parser(new_tool_use_id))
        assert self._blocks is not None
        if _has_block(state):
            yield from self._blocks.feed(delta.text, delta.is_last)

    def _message(self, state: ReqState, final: bool) -> dict[str, Any]:
        """The message object without its content; usage as known now (`final`: finished,
        with the pins' outcomes, else as if every pin asked for will be made)."""
        req = state.out
        if final:
            outcomes = zip(self.planned, req.pins, strict=False)  # no outcomes: it failed
            pinned = [(o.tokens, b.ttl) for (b, _), o in outcomes if o.pinned]
        else:
            pinned = [(b.offset, b.ttl) for b, _ in self.planned]
        message = {
            "id": self.msg_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(req.prompt_len, req.cached_tokens, len(req.output_ids), pinned),
        }
        if self.diagnosis is not None:  # asked: the message_start of a stream has it too
            message["diagnostics"] = render_diagnostics(self.diagnosis)
        return message


def _has_block(state: ReqState) -> bool:
    """A text block, even if empty, unless max_tokens is 0 (a cache pre-warm: no content)."""
    return state.out.sampling_params.max_new_tokens > 0


def _stop_reason(state: ReqState) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence): a stop string is a stop_sequence, EOS or a stop token an
    end_turn, the length bound max_tokens."""
    reason = state.out.finish_reason
    if reason is None or reason.kind == FinishKind.LENGTH:
        return "max_tokens", None
    if isinstance(reason.matched, str):
        return "stop_sequence", reason.matched
    return "end_turn", None
