"""Gemini's API: `/v1beta/models/{model}:generateContent`, `:streamGenerateContent` (SSE
with `alt=sse`, else one JSON array), the served model under `/v1beta/models`, the
cachedContents routes (caches.py), and Gemini's error shape on every /v1beta/ path; in
the shapes the official `google-genai` SDK parses."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.core import FinishKind
from radixrt.server.cache_handles import CacheHandle, CacheRegistry
from radixrt.server.gemini.caches import add_cached_contents_routes, cached_content
from radixrt.server.gemini.protocol import (
    CountTokensRequest,
    GenerateContentRequest,
    count_request,
    model_resource,
    prepare_content,
    prompt_ids,
)
from radixrt.server.http_common import ClientGoneError, RequestFailedError, updates, wait_finished
from radixrt.server.http_errors import add_error_dialect
from radixrt.server.protocol import Limits, decode_body
from radixrt.server.tenancy import Tenancy, work_of
from radixrt.server.tokenizer_manager import ReqState, SchedulerDeadError
from radixrt.web.middleware import SESSION_HEADER, caller_of
from radixrt.web.responses import json_response, sse_response

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


def add_gemini_routes(
    app: FastAPI, tm: Any, limits: Limits, tenancy: Tenancy, registry: CacheRegistry, model: str
) -> None:
    add_error_dialect(app, "/v1beta/", error_response)
    add_cached_contents_routes(app, tm, limits, tenancy, registry)
    GeminiServing(tm, limits, tenancy, registry, model).add_routes(app)


class GeminiServing:
    """Handlers for the /v1beta/ routes; `tm`: the TokenizerManager or --dp dispatcher."""

    def __init__(
        self, tm: Any, limits: Limits, tenancy: Tenancy, registry: CacheRegistry, model: str
    ) -> None:
        self.tm = tm
        self.limits = limits
        self.tenancy = tenancy
        self.registry = registry
        self.model_name = model

    def add_routes(self, app: FastAPI) -> None:
        app.get("/v1beta/models")(self.list_models)
        app.get("/v1beta/models/{model}")(self.get_model)
        app.post("/v1beta/models/{model}")(self.model_action)  # "{model}:generateContent"

    # ---- models ------------------------------------------------------------------------

    async def list_models(self) -> Response:
        return json_response({"models": [self._model(self.model_name)]})

    async def get_model(self, model: str) -> Response:
        return json_response(self._model(model))

    def _model(self, model: str) -> dict[str, Any]:
        """Whatever model a client names is served by this one."""
        return {
            "name": model_resource(model),
            "baseModelId": self.model_name,
            "version": self.model_name,
            "displayName": self.model_name,
            "inputTokenLimit": self.limits.context_length,
            "outputTokenLimit": self.limits.context_length,
            "supportedGenerationMethods": [*ACTIONS, "createCachedContent"],
        }

    async def model_action(self, request: Request, model: str) -> Response:
        model, _, action = model.partition(":")
        if action not in ACTIONS:
            served = ", ".join(ACTIONS)
            return error_response(f"no method {action!r} on models; radixrt serves {served}", 404)
        raw = await request.body()
        if action == "countTokens":
            return await self._count_tokens(request, raw, model)
        body = await self.tm.run_tokenizer(decode_body, raw, GenerateContentRequest)
        handle = self._handle(request, body, model)
        # The tenant's own namespace: the one its caches were made in (Gemini has no salt).
        namespace = self.tenancy.namespace(request, None, None)
        prep = await self.tm.run_tokenizer(
            prepare_content, body, handle, self.tm.tokenizer, self.limits
        )
        self.tenancy.admit(self.tm, request, *work_of([prep.input_ids], [prep.params]))
        states = self.tm.submit(
            [prep.input_ids],
            [prep.params],
            None,
            namespace,
            session=request.headers.get(SESSION_HEADER),
            caller=caller_of(request),
            endpoint=request.url.path,
            pins=[handle.pin_spec()] if handle is not None and prep.starts_with_handle else None,
        )
        rid = uuid.uuid4().hex
        if action == "streamGenerateContent":
            is_sse = request.query_params.get("alt") == "sse"
            response = sse_response(self._framed(states, self._chunks(rid, states[0]), is_sse))
            if not is_sse:
                response.headers["content-type"] = "application/json"
            return response
        try:
            await wait_finished(request, self.tm, states)
        except ClientGoneError:
            return Response(status_code=499)
        return json_response(self._response(rid, states[0], states[0].result()["text"]))

    async def _count_tokens(self, request: Request, raw: bytes, model: str) -> Response:
        """The prompt's tokens as generateContent would build them (chat template included);
        `cachedContentTokenCount`: those of them a named cache holds."""
        count = await self.tm.run_tokenizer(decode_body, raw, CountTokensRequest)
        body = count_request(count)
        handle = self._handle(request, body, model)
        ids, starts = await self.tm.run_tokenizer(
            prompt_ids, body, handle, self.tm.tokenizer, self.limits
        )
        out: dict[str, Any] = {
            "totalTokens": len(ids),
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": len(ids)}],
        }
        if handle is not None:
            out["cachedContentTokenCount"] = handle.tokens if starts else 0
        return json_response(out)

    def _handle(
        self, request: Request, body: GenerateContentRequest, model: str
    ) -> CacheHandle | None:
        """The cache `body` names (the caller's own; else the 4xx cached_content raises)."""
        if body.cached_content is None:
            return None
        return cached_content(self.registry, request, body.cached_content, model)

    async def _chunks(self, rid: str, state: ReqState) -> AsyncIterator[dict[str, Any]]:
        sent = ""
        async for _ in updates([state]):
            text = state.result()["text"]
            if text != sent or state.out.is_finished:
                yield self._response(rid, state, text[len(sent) :])
                sent = text

    async def _framed(
        self, states: list[ReqState], chunks: AsyncIterator[dict[str, Any]], is_sse: bool
    ) -> AsyncIterator[bytes]:
        """`chunks` as SSE events or the elements of one JSON array; a failure ends it with
        an error object; however it ends, the unfinished requests are aborted."""
        num_sent = 0

        def frame(obj: dict[str, Any]) -> bytes:
            nonlocal num_sent
            num_sent += 1
            if is_sse:
                return b"data: " + _encoder.encode(obj) + b"\n\n"
            return (b"[" if num_sent == 1 else b",\r\n") + _encoder.encode(obj)

        try:
            async for chunk in chunks:
                yield frame(chunk)
        except SchedulerDeadError as e:
            yield frame(error_body(str(e), 503))
        except RequestFailedError as e:
            yield frame(error_body(str(e), e.status_code))
        finally:
            self.tm.abort(states)  # a no-op for the finished ones
        if not is_sse:
            yield b"]" if num_sent else b"[]"

    def _response(self, rid: str, state: ReqState, text: str) -> dict[str, Any]:
        """A GenerateContentResponse with `text` (all of it, or a stream's next piece)."""
        out = state.out
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}}
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
            "modelVersion": self.model_name,
            "responseId": rid,
        }
