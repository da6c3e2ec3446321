"""Gemini's API: `/v1beta/models/{model}:generateContent`, `:streamGenerateContent` (SSE
with `alt=sse`, else one JSON array), `:countTokens`, the served model under
`/v1beta/models`, the cachedContents routes (caches.py), and Gemini's error shape on every
Gemini path; in the shapes the official `google-genai` SDK parses. Each route is served under
`/v1` too (the SDK's default api_version); `GET /v1/models` is OpenAI's, except for a Gemini
client (GeminiClientRoute)."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import Scope

from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.api.gemini.caches import add_cached_contents_routes, cached_content
from radixrt.serve.http.api.gemini.protocol import (
    CountTokensRequest,
    Encode,
    GenerateContentRequest,
    count_request,
    prepare_content,
    prompt_ids,
)
from radixrt.serve.http.api.gemini.render import (
    ACTIONS,
    CLIENT_HEADER,
    ContentRender,
    error_response,
    model_of,
)
from radixrt.serve.http.cache_handles import CacheHandle, owner_of
from radixrt.serve.http.http_errors import add_error_dialect
from radixrt.serve.http.protocol import decode_body
from radixrt.serve.http.serving import ServeRequest
from radixrt.serve.web.middleware import caller_of
from radixrt.serve.web.responses import json_response

BODIES: dict[str, type] = {}  # the OpenAPI document describes no Gemini body
PREFIXES = ("/v1beta", "/v1")  # the SDK's api_version "v1beta" and its default, "v1"
# Where errors take Gemini's shape: every /v1beta/ path, and the /v1/ paths only Gemini has.
ERROR_PREFIXES = ("/v1beta/", "/v1/models/", "/v1/cachedContents")
# The header google-genai sends on every request (a key header alone names no dialect: any
# client may authenticate with x-goog-api-key).
_CLIENT_HEADER = CLIENT_HEADER.encode()


class GeminiClientRoute(APIRoute):
    """A route on a path another dialect serves too (`GET /v1/models` and `/v1/models/{model}`,
    OpenAI's): it matches only a request that carries a Gemini client's header, and goes
    first."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if all(name != _CLIENT_HEADER for name, _ in scope.get("headers", ())):
            return Match.NONE, {}
        return super().matches(scope)


def add_routes(app: FastAPI, ctx: ApiContext) -> None:
    for path_prefix in ERROR_PREFIXES:
        add_error_dialect(app, path_prefix, error_response)
    for prefix in PREFIXES:
        add_cached_contents_routes(app, ctx, prefix)
        _add_model_routes(app, ctx, prefix)


def _add_model_routes(app: FastAPI, ctx: ApiContext, prefix: str) -> None:
    tm, limits = ctx.tm, ctx.limits

    async def list_models() -> Response:
        return json_response({"models": [model_of(ctx.model_name, ctx.model_name,
                                                  limits.context_length)]})  # fmt: skip

    if prefix == "/v1beta":
        app.add_api_route(prefix + "/models", list_models, methods=["GET"])
    else:  # ahead of OpenAI's GET /v1/models, for Gemini clients only
        route = GeminiClientRoute(prefix + "/models", list_models, methods=["GET"])
        app.router.routes.insert(0, route)

    async def get_model(model: str) -> Response:
        return json_response(model_of(model, ctx.model_name, limits.context_length))

    if prefix == "/v1beta":
        app.add_api_route(prefix + "/models/{model}", get_model, methods=["GET"])
    else:  # ahead of OpenAI's and Anthropic's GET /v1/models/{model}, as the list
        route = GeminiClientRoute(prefix + "/models/{model}", get_model, methods=["GET"])
        app.router.routes.insert(0, route)

    @app.post(prefix + "/models/{model}")  # "{model}:generateContent"
    async def model_action(request: Request, model: str) -> Response:
        model, _, action = model.partition(":")
        if action not in ACTIONS:
            served = ", ".join(ACTIONS)
            return error_response(f"no method {action!r} on models; radixrt serves {served}", 404)
        raw = await request.body()
        if action == "countTokens":
            return await count_tokens(request, raw, model)
        body = await tm.run_tokenizer(
            decode_body, raw, GenerateContentRequest, caller=caller_of(request)
        )
        handle = named_handle(request, body, model)
        prep = await tm.run_tokenizer(
            prepare_content,
            body,
            handle,
            tm.tokenizer,
            limits,
            ctx.tool_format,
            encoder(request),
            ctx.args.server.reasoning_parser,
            caller=caller_of(request),
        )
        is_stream = action == "streamGenerateContent"
        req = ServeRequest(
            [prep.input_ids],
            [prep.params],
            stream=is_stream,
            # The tenant's own namespace (Gemini has no salt): the one its caches were made in.
            handle=handle if prep.starts_with_handle else None,
            prompt_text=prep.text,
        )
        is_sse = request.query_params.get("alt") == "sse"
        render = ContentRender(uuid.uuid4().hex, ctx.model_name, is_sse, prep.plan)
        return await ctx.pipeline.serve(request, req, render)

    async def count_tokens(request: Request, raw: bytes, model: str) -> Response:
        """The prompt's tokens as generateContent would build them (chat template included);
        `cachedContentTokenCount`: those of them a named cache holds."""
        body = count_request(
            await tm.run_tokenizer(decode_body, raw, CountTokensRequest, caller=caller_of(request))
        )
        handle = named_handle(request, body, model)
        ids, starts = await tm.run_tokenizer(
            prompt_ids,
            body,
            handle,
            tm.tokenizer,
            limits,
            ctx.tool_format,
            encoder(request),
            caller=caller_of(request),
        )
        out: dict[str, Any] = {
            "totalTokens": len(ids),
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": len(ids)}],
        }
        if handle is not None:
            out["cachedContentTokenCount"] = handle.tokens if starts else 0
        return json_response(out)

    def encoder(request: Request) -> Encode:
        """A prompt text's ids: an answered turn of the caller's it replays takes that turn's
        ids (the pipeline's continuations)."""
        owner = owner_of(request)

        def encode(text: str, known: tuple[str, list[int]] | None) -> list[int]:
            return ctx.pipeline.continuations.encode(owner, text, tm.tokenizer, known)

        return encode

    def named_handle(
        request: Request, body: GenerateContentRequest, model: str
    ) -> CacheHandle | None:
        """The cache `body` names (the caller's own; else the 4xx cached_content raises)."""
        if body.cached_content is None:
            return None
        return cached_content(ctx.registry, request, body.cached_content, model)
