"""POST /generate: parse a body (text or token ids, a cache handle's prefix in front) into a
ServeRequest and serve it through the pipeline with GenerateRender."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.api.native.protocol import GenerateRequest, prepare_generate
from radixrt.serve.http.api.native.render import GenerateRender
from radixrt.serve.http.api.openai.render import TokenStrings
from radixrt.serve.http.cache_handles import owner_of
from radixrt.serve.http.protocol import decode_body
from radixrt.serve.http.serving import ServeRequest
from radixrt.serve.web.middleware import caller_of

BODIES = {"/generate": GenerateRequest}  # for the OpenAPI document


def add_routes(app: FastAPI, ctx: ApiContext) -> None:
    tm = ctx.tm
    strings = TokenStrings(ctx.tokenizer)  # return_text_in_logprobs

    @app.post("/generate")
    async def generate(request: Request) -> Response:
        body = await tm.run_tokenizer(
            decode_body, await request.body(), GenerateRequest, caller=caller_of(request)
        )
        handle = None
        if body.cache_id is not None:
            handle = ctx.registry.get(owner_of(request), body.cache_id)
        prefix = handle.input_ids if handle is not None else None
        prepared = await tm.run_tokenizer(
            prepare_generate, body, tm.tokenizer, ctx.limits, prefix, caller=caller_of(request)
        )
        req = ServeRequest(
            prepared.prompts,
            prepared.params,
            stream=body.stream,
            rids=prepared.rids,
            cache_salt=body.cache_salt,
            extra_key=body.extra_key,
            handle=handle,
            explain=body.explain_cache,
        )
        token_text = strings.get if body.return_text_in_logprobs else None
        render = GenerateRender(prepared.is_single, token_text)
        return await ctx.pipeline.serve(request, req, render)
