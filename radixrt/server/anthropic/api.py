"""Anthropic's Messages API: POST /v1/messages (JSON, or SSE with named events) and
POST /v1/messages/count_tokens, in the shapes the official `anthropic` client parses.

Prompt caching: each cache_control breakpoint asks the scheduler to pin its prefix once the
request finishes (radixrt/cache/pins.py) for Anthropic's TTL (5m or 1h, times
--cache-ttl-scale), sliding, so every later request that reads it pushes its expiry back; the
usage block reports what the radix tree served and what the pins hold besides
(protocol.usage). Errors on these paths have Anthropic's shape.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.config import ServerConfig
from radixrt.core import FinishKind, PinSpec
from radixrt.server.anthropic.protocol import Breakpoint, MessagesRequest, pin_specs, usage
from radixrt.server.anthropic.render import RenderedPrompt, prepare_messages
from radixrt.server.http_common import (
    ClientGoneError,
    RequestFailedError,
    updates,
    wait_finished,
)
from radixrt.server.http_errors import add_error_dialect
from radixrt.server.protocol import Limits, decode_body
from radixrt.server.tenancy import Tenancy, work_of
from radixrt.server.tokenizer_manager import ReqState, SchedulerDeadError, TokenizerManager
from radixrt.web.middleware import SESSION_HEADER, caller_of, identity_of
from radixrt.web.responses import json_response, sse_response

PATH = "/v1/messages"
BODIES = {PATH: MessagesRequest, PATH + "/count_tokens": MessagesRequest}  # for the OpenAPI doc
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
_encoder = msgspec.json.Encoder()

Planned = list[tuple[Breakpoint, PinSpec]]  # the breakpoints that asked for a pin, and how


def error_body(message: str, status: int) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def render_error(message: str, status: int) -> Response:
    return json_response(error_body(message, status), status)


def named_event(name: str, obj: Any) -> bytes:
    """One SSE event with a name (the anthropic client ignores events without one)."""
    return b"event: " + name.encode() + b"\ndata: " + _encoder.encode(obj) + b"\n\n"


class AnthropicServing:
    """Handlers for the Messages routes; one request (no n) per HTTP call."""

    def __init__(
        self,
        tm: TokenizerManager,
        limits: Limits,
        model_name: str,
        tenancy: Tenancy,
        config: ServerConfig,
    ) -> None:
        self.tm = tm
        self.limits = limits
        self.model_name = model_name
        self.tenancy = tenancy
        self.config = config

    def add_routes(self, app: FastAPI) -> None:
        add_error_dialect(app, PATH, render_error)
        app.post(PATH)(self.messages)
        app.post(PATH + "/count_tokens")(self.count_tokens)

    async def count_tokens(self, request: Request) -> Response:
        _, prompt = await self.tm.run_tokenizer(self._parse, await request.body(), False)
        return json_response({"input_tokens": len(prompt.input_ids)})

    async def messages(self, request: Request) -> Response:
        body, prompt = await self.tm.run_tokenizer(self._parse, await request.body(), True)
        assert prompt.params is not None
        namespace = self.tenancy.namespace(request, None, None)
        self.tenancy.admit(self.tm, request, *work_of([prompt.input_ids], [prompt.params]))
        planned = pin_specs(
            prompt.breakpoints,
            self.config.cache_min_tokens,
            self.config.cache_ttl_scale,
            identity_of(request).tenant,
        )
        user_id = (body.metadata or {}).get("user_id")
        states = self.tm.submit(
            [prompt.input_ids],
            [prompt.params],
            None,
            namespace,
            session=request.headers.get(SESSION_HEADER)
            or (user_id if isinstance(user_id, str) else None),
            caller=caller_of(request),
            endpoint=request.url.path,
            pins=[spec for _, spec in planned],
        )
        msg_id = "msg_" + uuid.uuid4().hex
        if body.stream:
            return sse_response(self._stream(msg_id, states[0], planned))
        try:
            await wait_finished(request, self.tm, states)
        except ClientGoneError:
            return Response(status_code=499)
        state = states[0]
        text = state.result()["text"]
        reason, sequence = _stop_reason(state)
        return json_response(
            {
                **self._message(msg_id, state, planned, final=True),
                "content": [{"type": "text", "text": text}] if _has_block(state) else [],
                "stop_reason": reason,
                "stop_sequence": sequence,
            }
        )

    def _parse(self, raw: bytes, generate: bool) -> tuple[MessagesRequest, RenderedPrompt]:
        """Decode, render and tokenize a body (on the tokenizer thread)."""
        body = decode_body(raw, MessagesRequest)
        return body, prepare_messages(body, self.tm.tokenizer, self.limits, generate)

    def _message(
        self, msg_id: str, state: ReqState, planned: Planned, final: bool
    ) -> dict[str, Any]:
        """The message object without its content; usage as known now (`final`: finished,
        with the pins' outcomes, else as if every pin asked for will be made)."""
        req = state.out
        if final:
            outcomes = zip(planned, req.pins, strict=False)  # no outcomes: it failed
            pinned = [(o.tokens, b.ttl) for (b, _), o in outcomes if o.pinned]
        else:
            pinned = [(b.offset, b.ttl) for b, _ in planned]
        return {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": self.model_name,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(req.prompt_len, req.cached_tokens, len(req.output_ids), pinned),
        }

    async def _stream(self, msg_id: str, state: ReqState, planned: Planned) -> AsyncIterator[bytes]:
        """message_start (once the prompt is computed, so the cache read is known),
        content_block_start, ping, a text_delta per new text, content_block_stop, message_delta
        (stop reason and the final usage, pins included), message_stop; a failure ends it with
        an `error` event. However it ends, the request is aborted if still running."""
        try:
            async for event in self._events(msg_id, state, planned):
                yield event
        except SchedulerDeadError as e:
            yield named_event("error", error_body(str(e), 503))
        except RequestFailedError as e:
            yield named_event("error", error_body(str(e), e.status_code))
        finally:
            self.tm.abort([state])  # a no-op once finished

    async def _events(self, msg_id: str, state: ReqState, planned: Planned) -> AsyncIterator[bytes]:
        sent: str | None = None  # None: message_start not sent yet
        block = _has_block(state)
        async for _ in updates([state]):
            if sent is None:
                start = self._message(msg_id, state, planned, final=False)
                start["usage"]["output_tokens"] = 0
                yield named_event("message_start", {"type": "message_start", "message": start})
                if block:
                    yield named_event(
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": 0,
                            "content_block": {"type": "text", "text": ""},
                        },
                    )
                yield named_event("ping", {"type": "ping"})
                sent = ""
            text = state.result()["text"]
            if block and len(text) > len(sent):
                delta = {"type": "text_delta", "text": text[len(sent) :]}
                yield named_event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                )
                sent = text
        if block:
            yield named_event("content_block_stop", {"type": "content_block_stop", "index": 0})
        reason, sequence = _stop_reason(state)
        final = self._message(msg_id, state, planned, final=True)["usage"]
        yield named_event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": sequence},
                "usage": final,
            },
        )
        yield named_event("message_stop", {"type": "message_stop"})


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
