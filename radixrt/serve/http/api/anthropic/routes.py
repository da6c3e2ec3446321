"""Anthropic's Messages API: POST /v1/messages (JSON, or SSE with named events) and
POST /v1/messages/count_tokens, in the shapes the official `anthropic` client parses.

Prompt caching: each cache_control breakpoint asks the scheduler to pin its prefix once the
request finishes (radixrt/cache/pins.py) for Anthropic's TTL (5m or 1h, times
--cache-ttl-scale), sliding, so every later request that reads it pushes its expiry back.
Errors on these paths have Anthropic's shape.
"""

from __future__ import annotations

import uuid

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.serve.http.api.anthropic.diagnostics import prompt_record
from radixrt.serve.http.api.anthropic.prompt import RenderedPrompt, prepare_messages
from radixrt.serve.http.api.anthropic.protocol import MessagesRequest, pin_specs
from radixrt.serve.http.api.anthropic.render import MessagesRender, render_error
from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.cache_handles import owner_of
from radixrt.serve.http.diagnostics import PromptRecord
from radixrt.serve.http.http_errors import add_error_dialect
from radixrt.serve.http.protocol import decode_body
from radixrt.serve.http.serving import ServeRequest
from radixrt.serve.web.middleware import caller_of, identity_of
from radixrt.serve.web.responses import json_response

PATH = "/v1/messages"
BODIES = {PATH: MessagesRequest, PATH + "/count_tokens": MessagesRequest}  # for the OpenAPI doc


def add_routes(app: FastAPI, ctx: ApiContext) -> None:
    tm, config = ctx.tm, ctx.args.server
    add_error_dialect(app, PATH, render_error)

    @app.post(PATH + "/count_tokens")
    async def count_tokens(request: Request) -> Response:
        raw = await request.body()
        _, prompt = await tm.run_tokenizer(
            _parse, raw, ctx, False, owner_of(request), caller=caller_of(request)
        )
        return json_response({"input_tokens": len(prompt.input_ids)})

    @app.post(PATH)
    async def messages(request: Request) -> Response:
        raw = await request.body()
        msg_id = "msg_" + uuid.uuid4().hex
        body, prompt, record = await tm.run_tokenizer(
            _parse_call, raw, ctx, msg_id, owner_of(request), caller=caller_of(request)
        )
        assert prompt.params is not None
        planned = pin_specs(
            prompt.breakpoints,
            config.cache_min_tokens,
            config.cache_ttl_scale,
            identity_of(request).tenant,
        )
        user_id = (body.metadata or {}).get("user_id")
        req = ServeRequest(
            [prompt.input_ids],
            [prompt.params],
            stream=body.stream,
            pins=[spec for _, spec in planned],
            session=user_id if isinstance(user_id, str) else None,
            record=record,
            prompt_text=prompt.text,
        )
        render = MessagesRender(msg_id, ctx.model_name, planned, prompt.plan)
        return await ctx.pipeline.serve(request, req, render)


def _parse(
    raw: bytes, ctx: ApiContext, generate: bool, owner: str
) -> tuple[MessagesRequest, RenderedPrompt]:
    """Decode, render and tokenize a body (on the tokenizer thread); a start that replays an
    answered turn of `owner`'s takes that turn's ids (the pipeline's continuations)."""
    body = decode_body(raw, MessagesRequest)

    def head(text: str) -> tuple[int, list[int]]:
        return ctx.pipeline.continuations.head(owner, text)

    prompt = prepare_messages(body, ctx.tokenizer, ctx.limits, generate, ctx.tool_format, head,
                              ctx.args.server.reasoning_parser)  # fmt: skip
    return body, prompt


def _parse_call(
    raw: bytes, ctx: ApiContext, msg_id: str, owner: str
) -> tuple[MessagesRequest, RenderedPrompt, PromptRecord]:
    """A /v1/messages body parsed, and its prompt's fingerprint under `msg_id`."""
    body, prompt = _parse(raw, ctx, True, owner)
    return body, prompt, prompt_record(msg_id, body, prompt.input_ids)
