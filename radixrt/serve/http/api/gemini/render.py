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
from radixrt.serve.http.tools import (
    OutputParser,
    ReasoningPiece,
    TextPiece,
    ToolPlan,
    count_reasoning_tokens,
)
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
    """One generateContent call; streamed as SSE events (`is_sse`) or one JSON array. With
    candidateCount k, the k samples of the one prompt are candidates 0..k-1 (a stream's
    chunk holds the candidate it advances)."""

    def __init__(self, rid: str, model: str, is_sse: bool, plan: ToolPlan | None = None) -> None:
        self.rid = rid
        self.model = model
        self.is_sse = is_sse
        self.media_type = "text/event-stream" if is_sse else "application/json"
        self._num_sent = 0
        # Per candidate, with tools: the parser of its output, and how many of its calls were
        # sent (a call goes out whole, in the chunk where it completes, as Gemini streams).
        self._plan = plan
        self._parsers: dict[int, OutputParser] = {}
        self._num_calls: dict[int, int] = {}

    def response(self, done: Finished) -> dict[str, Any]:
        candidates = [self._candidate(i, state, self._parts(i, out.text, True))
                      for i, (state, out) in enumerate(zip(done.states, done.outputs))]  # fmt: skip
        return self._response(done.states, candidates)

    def delta(self, index: int, state: ReqState, delta: OutputDelta) -> Iterator[bytes]:
        parts = self._parts(index, delta.text, delta.is_last)
        yield self._frame(self._response([state], [self._candidate(index, state, parts)]))

    def _parts(self, index: int, text: str, is_last: bool) -> list[dict[str, Any]]:
        """The parts of what is new in candidate `index`: its thoughts (asked for), its text,
        then the calls completed in it."""
        if index not in self._parsers:
            plan = self._plan
            self._parsers[index] = plan.new_parser() if plan is not None else PlainText()
            self._num_calls[index] = 0
        parser = self._parsers[index]
        events = parser.feed(text)
        if is_last:
            events += parser.finish()
        thought = "".join(e.text for e in events if isinstance(e, ReasoningPiece))
        new_text = "".join(e.text for e in events if isinstance(e, TextPiece))
        calls = parser.calls[self._num_calls[index] :]
        self._num_calls[index] += len(calls)
        parts = [{"text": thought, "thought": True}] if thought else []
        parts += [{"text": new_text}] if new_text or not (calls or thought) else []
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

    def _candidate(
        self, index: int, state: ReqState, parts: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Candidate `index` with `parts` (all of them, or a stream's next ones)."""
        out = state.out
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
        if out.finish_reason is not None:
            candidate["finishReason"] = _FINISH.get(out.finish_reason.kind, "OTHER")
        candidate["index"] = index
        return candidate

    def _response(self, states: list[ReqState], candidates: list[dict[str, Any]]) -> dict[str, Any]:
        """A GenerateContentResponse of `candidates`; usage counts the prompt once (the first
        state's) and the output tokens of `states`."""
        out = states[0].out
        num_out = sum(len(s.out.output_ids) for s in states)
        usage = {
            "promptTokenCount": out.prompt_len,  # the cached tokens included
            "cachedContentTokenCount": out.cached_tokens,  # as the radix tree served them
            "candidatesTokenCount": num_out,
            "totalTokenCount": out.prompt_len + num_out,
        }
        thought = sum(count_reasoning_tokens(s.out.sampling_params, s.out.output_ids) or 0
                      for s in states)  # fmt: skip
        if thought:  # (Gemini's thoughts are in candidatesTokenCount too here)
            usage["thoughtsTokenCount"] = thought
        return {
            "candidates": candidates,
            "usageMetadata": usage,
            "modelVersion": self.model,
            "responseId": self.rid,
        }
