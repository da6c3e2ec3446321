"""Gemini's answers: a GenerateContentResponse (whole), its chunks as SSE events (`alt=sse`)
or as the elements of one JSON array, the model resource, and errors in Gemini's shape
(`{"error": {"code", "message", "status"}}`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
from starlette.responses import Response

from radixrt.core import FinishKind
from radixrt.serve.http.api.gemini.protocol import model_resource
from radixrt.serve.http.api.gemini.tools import call_part
from radixrt.serve.http.render import BaseRender, Finished
from radixrt.serve.http.req_state import ReqState
from radixrt.serve.http.tools import TextPiece, ToolPlan
from radixrt.serve.http.tools.plan import PlainText
from radixrt.serve.results.delta import OutputDelta
from radixrt.serve.web.responses import json_response

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "FAILED_PRECONDITION",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
ACTIONS = ("generateContent", "streamGenerateContent", "countTokens")  # POST .../{model}:{action}
_FINISH = {FinishKind.STOP: "STOP", FinishKind.LENGTH: "MAX_TOKENS"}  # else OTHER
_encoder = msgspec.json.Encoder()


def error_body(message: str, status: int) -> dict[str, Any]:
    """Gemini's error object: `{"error": {"code", "message", "status"}}`."""
    name = _STATUS.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    return {"error": {"code": status, "message": message, "status": name}}


def error_response(message: str, status: int) -> Response:
    return json_response(error_body(message, status), status)


# The header google-genai sends with every request: what tells its calls apart on paths
# another dialect serves too (GET /v1/models, /v1/models/{model}).
CLIENT_HEADER = "x-goog-api-client"


def model_of(model: str, served: str, context_length: int) -> dict[str, Any]:
    """The resource of `model`: whatever model a client names is served by this one."""
    return {
        "name": model_resource(model),
        "baseModelId": served,
        "version": served,
        "displayName": served,
        "inputTokenLimit": context_length,
        "outputTokenLimit": context_length,
        "supportedGenerationMethods": [*ACTIONS, "createCachedContent"],
    }


class ContentRender(BaseRender):
    """One generateContent call; streamed as SSE events (`is_sse`) or one JSON array."""

    def __init__(self, rid: str, model: str, is_sse: bool, plan: ToolPlan | None = None) -> None:
        self.rid = rid
        self.model = model
        self.is_sse = is_sse
        self.media_type = "text/event-stream" if is_sse else "application/json"
        self._num_sent = 0
        # With tools: the parser of the output, and how many of its calls were sent (a call
        # goes out whole, in the chunk where it completes, as Gemini streams them).
        self._parser = plan.new_parser() if plan is not None else PlainText()
        self._num_calls = 0

    def response(self, done: Finished) -> dict[str, Any]:
        return self._response(done.states[0], self._parts(done.outputs[0].text, True))

    def delta(self, index: int, state: ReqState, delta: OutputDelta) -> Iterator[bytes]:
        yield self._frame(self._response(state, self._parts(delta.text, delta.is_last)))

    def _parts(self, text: str, is_last: bool) -> list[dict[str, Any]]:
        """The parts of what is new: its text, then the calls completed in it."""
        events = self._parser.feed(text)
        if is_last:
            events += self._parser.finish()
        new_text = "".join(e.text for e in events if isinstance(e, TextPiece))
        calls = self._parser.calls[self._num_calls :]
        self._num_calls += len(calls)
        parts = [{"text": new_text}] if new_text or not calls else []
        return parts + [call_part(c) for c in calls]

    def error(self, message: str, status: int) -> bytes:
        return self._frame(error_body(message, status))

    def close(self) -> tuple[bytes, ...]:
        if self.is_sse:
            return ()
        return (b"]" if self._num_sent else b"[]",)

    def _frame(self, obj: dict[str, Any]) -> bytes:
        self._num_sent += 1
        if self.is_sse:
            return b"data: " + _encoder.encode(obj) + b"\n\n"
        return (b"[" if self._num_sent == 1 else b",\r\n") + _encoder.encode(obj)

    def _response(self, state: ReqState, parts: list[dict[str, Any]]) -> dict[str, Any]:
        """A GenerateContentResponse with `parts` (all of them, or a stream's next ones)."""
        out = state.out
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
        if out.finish_reason is not None:
            candidate["finishReason"] = _FINISH.get(out.finish_reason.kind, "OTHER")
        candidate["index"] = 0
        num_out = len(out.output_ids)
        usage = {
            "promptTokenCount": out.prompt_len,  # the cached tokens included
            "cachedContentTokenCount": out.cached_tokens,  # as the radix tree served them
            "candidatesTokenCount": num_out,
            "totalTokenCount": out.prompt_len + num_out,
        }
        return {
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": self.model,
            "responseId": self.rid,
        }
