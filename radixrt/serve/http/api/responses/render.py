"""OpenAI Responses answers: the response object (whole), or its typed server-sent events in
OpenAI's order with a sequence_number each; errors in OpenAI's shape. A finished response
with `store` is kept in the store (store.py) with the conversation its next turn continues."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import msgspec
from starlette.responses import Response

from radixrt.core import FinishKind, PinSpec
from radixrt.serve.http.api.openai.diagnostics import render_cache_diagnostics
from radixrt.serve.http.api.responses.output import OutputItems
from radixrt.serve.http.api.responses.prompt import Prompt
from radixrt.serve.http.api.responses.protocol import DEFAULT_TTL, ResponsesRequest
from radixrt.serve.http.api.responses.store import ResponseStore, StoredResponse
from radixrt.serve.http.api.responses.tools import tools_echo
from radixrt.serve.http.render import BaseRender, Finished
from radixrt.serve.http.req_state import ReqState
from radixrt.serve.http.tools import count_reasoning_tokens
from radixrt.serve.results.delta import OutputDelta
from radixrt.serve.web.responses import json_response

_encoder = msgspec.json.Encoder()
Planned = list[tuple[PinSpec, str | None]]  # each pin asked for, and its ttl ("30m", "12h")


def error_body(message: str, status: int, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:  # fmt: skip
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def render_error(message: str, status: int) -> Response:
    return json_response(error_body(message, status), status)


def echo_of(req: ResponsesRequest, model: str) -> dict[str, Any]:
    """The response object's fields that restate the request."""
    fmt: dict[str, Any] = {"type": "text"}
    if req.text is not None and req.text.format is not None:
        fmt = {k: v for k, v in msgspec.to_builtins(req.text.format).items() if v is not None}
    echo: dict[str, Any] = {
        "background": False,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "max_tool_calls": req.max_tool_calls,
        "metadata": req.metadata or {},
        "model": model,
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "previous_response_id": req.previous_response_id,
        "prompt_cache_key": req.prompt_cache_key,
        "prompt_cache_retention": req.prompt_cache_retention,
        "reasoning": {
            "effort": None if req.reasoning is None else req.reasoning.effort,
            "summary": None if req.reasoning is None else req.reasoning.summary,
        },
        "safety_identifier": req.safety_identifier,
        "service_tier": "default",
        "store": req.is_stored,
        "temperature": 1.0 if req.temperature is None else req.temperature,
        "text": {"format": fmt, "verbosity": "medium"},
        "tool_choice": req.tool_choice or "auto",
        "tools": tools_echo(req),
        "top_logprobs": 0,
        "top_p": 1.0 if req.top_p is None else req.top_p,
        "truncation": "disabled",
        "user": req.user,
    }
    if (options := req.prompt_cache_options) is not None:
        echo["prompt_cache_options"] = {"mode": "implicit", "ttl": options.ttl or DEFAULT_TTL,
                                        "prewarm": options.prewarm,
                                        "comparison_response_id": options.comparison_response_id,
                                        }  # fmt: skip
    return echo


def usage_of(state: ReqState, planned: Planned) -> dict[str, Any]:
    """cached_tokens: what the tree served; cache_write_tokens: what this request's TTL pins
    hold beyond that (under the longest TTL that holds it)."""
    req = state.out
    writes = {"30m": 0, "12h": 0}
    for (_, ttl), outcome in zip(planned, req.pins, strict=False):  # no outcomes: unfinished
        if ttl is not None and outcome.pinned:
            writes[ttl] = max(writes[ttl], outcome.tokens - req.cached_tokens)
    if writes["12h"] >= writes["30m"]:
        writes["30m"] = 0
    out = len(req.output_ids)
    thought = count_reasoning_tokens(req.sampling_params, req.output_ids) or 0
    details = {
        "cached_tokens": req.cached_tokens,
        "cache_write_tokens": sum(writes.values()),
        "cache_write_tokens_details": {"ttl_30m_tokens": writes["30m"],
                                       "ttl_12h_tokens": writes["12h"]},
    }  # fmt: skip
    return {"input_tokens": req.prompt_len, "input_tokens_details": details,
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": thought},
            "total_tokens": req.prompt_len + out}  # fmt: skip


class ResponsesRender(BaseRender):
    """One call of POST /v1/responses (one request). A stream: response.created,
    response.in_progress, then each output item's events (output.py: a message's
    output_item.added, content_part.added, output_text.delta..., output_text.done,
    content_part.done, output_item.done; a function call's output_item.added,
    function_call_arguments.delta..., function_call_arguments.done, output_item.done), then
    response.completed (or response.incomplete at max_output_tokens); a prewarm has no item.
    A failure: `error`."""

    def __init__(self, resp_id: str, echo: dict[str, Any], prompt: Prompt, planned: Planned,
                 store: ResponseStore | None, owner: str, pin_id: str | None) -> None:  # fmt: skip
        self.id = resp_id
        self.echo = echo
        self.prompt = prompt
        self.planned = planned
        self.store = store  # None: not stored
        self.owner = owner
        self.pin_id = pin_id
        self.created_at = int(time.time())
        self.has_item = prompt.params.max_new_tokens > 0  # a prewarm answers no output
        self._seq = 0
        self._items = self._new_items()  # the stream's

    def response(self, done: Finished) -> dict[str, Any]:
        items = self._new_items()
        items.feed(done.outputs[0].text)
        items.finish(_is_cut(done.states[0]))
        return self._final(done.states[0], items)

    def head(self, states: list[ReqState]) -> Iterator[bytes]:
        start = self._object("in_progress", [], None)
        yield self._event({"type": "response.created", "response": start})
        yield self._event({"type": "response.in_progress", "response": start})

    def delta(self, index: int, state: ReqState, delta: OutputDelta) -> Iterator[bytes]:
        if self.has_item:
            for event in self._items.feed(delta.text):
                yield self._event(event)

    def tail(self, states: list[ReqState]) -> Iterator[bytes]:
        for event in self._items.finish(_is_cut(states[0])):
            yield self._event(event)
        body = self._final(states[0], self._items)
        kind = "incomplete" if body["status"] == "incomplete" else "completed"
        yield self._event({"type": "response." + kind, "response": body})

    def error(self, message: str, status: int) -> bytes:
        code = "server_error" if status >= 500 else "invalid_request_error"
        return self._event({"type": "error", "code": code, "message": message, "param": None})

    def _new_items(self) -> OutputItems:
        return OutputItems(self.prompt.plan.new_parser(), self.has_item)

    def _final(self, state: ReqState, items: OutputItems) -> dict[str, Any]:
        """The finished response object (`items` finished); kept in the store when asked."""
        cut = self.has_item and _is_cut(state)
        status = "incomplete" if cut else "completed"
        body = self._object(status, items.items, usage_of(state, self.planned))
        if cut:
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        else:
            body["completed_at"] = int(time.time())
        if self.store is not None:
            answer = items.text if self.has_item else None
            calls = items.parser.calls
            conversation = self.prompt.conversation(state.out.output_ids, answer, calls)
            self.store.add(StoredResponse(self.id, self.owner, body, conversation, self.pin_id))
        return body

    def _object(self, status: str, output: list[Any], usage: Any) -> dict[str, Any]:
        return {"id": self.id, "object": "response", "created_at": self.created_at,
                "status": status, "error": None, "incomplete_details": None, **self.echo,
                "output": output, "usage": usage,
                "prompt_cache_diagnostics": self._diagnostics()}  # fmt: skip

    def _diagnostics(self) -> dict[str, Any] | None:
        """Asked with prompt_cache_options.comparison_response_id (diagnostics.py)."""
        return None if self.diagnosis is None else render_cache_diagnostics(self.diagnosis)

    def _event(self, obj: dict[str, Any]) -> bytes:
        """A named server-sent event with the next sequence_number."""
        obj["sequence_number"] = self._seq
        self._seq += 1
        return b"event: " + obj["type"].encode() + b"\ndata: " + _encoder.encode(obj) + b"\n\n"


def _is_cut(state: ReqState) -> bool:
    """Ended at max_output_tokens (or not ended)."""
    reason = state.out.finish_reason
    return reason is None or reason.kind == FinishKind.LENGTH
