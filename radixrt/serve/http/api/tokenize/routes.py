"""POST /tokenize, POST /detokenize and GET /tokenizer_info (vLLM's paths and shapes, which
evaluation harnesses probe for a server-side tokenizer); work on the tokenizer thread."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.api.openai.tools import tool_plan
from radixrt.serve.http.api.tokenize.protocol import (
    DetokenizeRequest,
    TokenizeRequest,
    detokenize,
    tokenize,
    tokenizer_info,
)
from radixrt.serve.http.protocol import decode_body
from radixrt.serve.web.middleware import caller_of
from radixrt.serve.web.responses import json_response

BODIES = {"/tokenize": TokenizeRequest, "/detokenize": DetokenizeRequest}


def add_routes(app: FastAPI, ctx: ApiContext) -> None:
    tm = ctx.tm
    no_tools = tool_plan(ctx.tool_format, None, None, None)

    @app.post("/tokenize")
    async def tokenize_route(request: Request) -> Response:
        raw = await request.body()
        answer = await tm.run_tokenizer(
            lambda: tokenize(decode_body(raw, TokenizeRequest), tm.tokenizer, ctx.limits, no_tools),
            caller=caller_of(request),
        )
        return json_response(answer)

    @app.post("/detokenize")
    async def detokenize_route(request: Request) -> Response:
        raw = await request.body()
        answer = await tm.run_tokenizer(
            lambda: detokenize(decode_body(raw, DetokenizeRequest), tm.tokenizer, ctx.limits),
            caller=caller_of(request),
        )
        return json_response(answer)

    @app.get("/tokenizer_info")
    async def info() -> Response:
        return json_response(tokenizer_info(tm.tokenizer, ctx.limits))
