"""Gemini's API: `/v1beta/models/{model}:generateContent`, `:streamGenerateContent` (SSE
with `alt=sse`, else one JSON array), `:countTokens`, the served model under
`/v1beta/models`, the cachedContents routes (caches.py), and Gemini's error shape on every
/v1beta/ path; in the shapes the official `google-genai` SDK parses."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.server.api.context import ApiContext
from radixrt.server.api.gemini.caches import add_cached_contents_routes, cached_content
from radixrt.server.api.gemini.protocol import (
    CountTokensRequest,
    GenerateContentRequest,
    count_request,
    prepare_content,
    prompt_ids,
)
from radixrt.server.api.gemini.render import (
    ACTIONS,
    ContentRender,
    error_response,
    model_of,
)
from radixrt.server.cache_handles import CacheHandle
from radixrt.server.http_errors import add_error_dialect
from radixrt.server.protocol import decode_body
from radixrt.server.serving import ServeRequest
from radixrt.web.responses import json_response

BODIES: dict[str, type] = {}  # the OpenAPI document describes no /v1beta/ body


def add_routes(app: FastAPI, ctx: ApiContext) -> None:
    tm, limits = ctx.tm, ctx.limits
    add_error_dialect(app, "/v1beta/", error_response)
    add_cached_contents_routes(app, ctx)

    @app.get("/v1beta/models")
    async def list_models() -> Response:
        return json_response({"models": [model_of(ctx.model_name, ctx.model_name,
                                                  limits.context_length)]})  # fmt: skip

    @app.get("/v1beta/models/{model}")
    async def get_model(model: str) -> Response:
        return json_response(model_of(model, ctx.model_name, limits.context_length))

    @app.post("/v1beta/models/{model}")  # "{model}:generateContent"
    async def model_action(request: Request, model: str) -> Response:
        model, _, action = model.partition(":")
        if action not in ACTIONS:
            served = ", ".join(ACTIONS)
            return error_response(f"no method {action!r} on models; radixrt serves {served}", 404)
        raw = await request.body()
        if action == "countTokens":
            return await count_tokens(request, raw, model)
        body = await tm.run_tokenizer(decode_body, raw, GenerateContentRequest)
        handle = named_handle(request, body, model)
        prep = await tm.run_tokenizer(
            prepare_content, body, handle, tm.tokenizer, limits, ctx.tool_format
        )
        is_stream = action == "streamGenerateContent"
        req = ServeRequest(
            [prep.input_ids],
            [prep.params],
            stream=is_stream,
            # The tenant's own namespace (Gemini has no salt): the one its caches were made in.
            handle=handle if prep.starts_with_handle else None,
        )
        is_sse = request.query_params.get("alt") == "sse"
        render = ContentRender(uuid.uuid4().hex, ctx.model_name, is_sse, prep.plan)
        return await ctx.pipeline.serve(request, req, render)

    async def count_tokens(request: Request, raw: bytes, model: str) -> Response:
        """The prompt's tokens as generateContent would build them (chat template included);
        `cachedContentTokenCount`: those of them a named cache holds."""
        body = count_request(await tm.run_tokenizer(decode_body, raw, CountTokensRequest))
        handle = named_handle(request, body, model)
        ids, starts = await tm.run_tokenizer(
            prompt_ids, body, handle, tm.tokenizer, limits, ctx.tool_format
        )
        out: dict[str, Any] = {
            "totalTokens": len(ids),
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": len(ids)}],
        }
        if handle is not None:
            out["cachedContentTokenCount"] = handle.tokens if starts else 0
        return json_response(out)

    def named_handle(
        request: Request, body: GenerateContentRequest, model: str
    ) -> CacheHandle | None:
        """The cache `body` names (the caller's own; else the 4xx cached_content raises)."""
        if body.cached_content is None:
            return None
        return cached_content(ctx.registry, request, body.cached_content, model)
