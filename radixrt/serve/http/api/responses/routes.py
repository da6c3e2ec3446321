"""OpenAI's Responses API: POST /v1/responses (JSON, or typed SSE events) and GET / DELETE
/v1/responses/{id}, in the shapes the official `openai` client parses; errors in OpenAI's
shape.

A stored response (`store`, true unless false) keeps its conversation, and its prompt is
pinned in the radix tree (TTL: prompt_cache_options.ttl, default 30m, sliding, times
--cache-ttl-scale) while it is stored; a turn with previous_response_id continues it, its
prompt starting with the earlier turn's prompt and output token for token (prompt.py).
"""

from __future__ import annotations

import uuid

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.api.responses.diagnostics import prompt_record
from radixrt.serve.http.api.responses.listing import input_items, page
from radixrt.serve.http.api.responses.prompt import Conversation, build_prompt, plan_pins
from radixrt.serve.http.api.responses.protocol import ResponsesRequest, check_request
from radixrt.serve.http.api.responses.render import (
    ResponsesRender,
    echo_of,
    error_body,
    render_error,
)
from radixrt.serve.http.api.responses.store import ResponseNotFoundError, ResponseStore
from radixrt.serve.http.cache_handles import owner_of
from radixrt.serve.http.http_errors import add_error_dialect
from radixrt.serve.http.protocol import decode_body
from radixrt.serve.http.serving import ServeRequest
from radixrt.serve.web.middleware import caller_of, identity_of
from radixrt.serve.web.responses import json_response

PATH = "/v1/responses"
BODIES = {PATH: ResponsesRequest}  # for the OpenAPI document


def add_routes(app: FastAPI, ctx: ApiContext) -> None:
    tm, config = ctx.tm, ctx.args.server
    store = ResponseStore(tm, config.max_stored_responses, config.max_stored_response_bytes)
    app.state.response_store = store
    add_error_dialect(app, PATH, render_error)

    @app.exception_handler(ResponseNotFoundError)
    async def not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ResponseNotFoundError)
        return json_response(error_body(str(exc), 404, exc.param, exc.code), 404)

    @app.post(PATH)
    async def create(request: Request) -> Response:
        body = await tm.run_tokenizer(_decode, await request.body(), caller=caller_of(request))
        owner = owner_of(request)
        previous: Conversation | None = None
        if body.previous_response_id is not None:
            earlier = store.get(owner, body.previous_response_id, "previous_response_id")
            previous = earlier.conversation
        prompt = await tm.run_tokenizer(
            build_prompt,
            body,
            previous,
            tm.tokenizer,
            ctx.limits,
            ctx.tool_format,
            config.reasoning_parser,
            caller=caller_of(request),
        )
        resp_id = "resp_" + uuid.uuid4().hex
        record = await tm.run_tokenizer(
            prompt_record, resp_id, body, prompt, caller=caller_of(request)
        )
        pin_id = "response-" + resp_id if body.is_stored else None
        tenant = identity_of(request).tenant
        planned = plan_pins(body, prompt, pin_id, config.cache_ttl_scale, tenant)
        req = ServeRequest(
            [prompt.ids],
            [prompt.params],
            stream=body.stream,
            cache_salt=body.cache_salt,
            pins=[spec for spec, _ in planned],
            session=body.prompt_cache_key or body.user,
            messages=prompt.chat,
            record=record,
        )
        kept = store if body.is_stored else None
        echo = echo_of(body, ctx.model_name)
        render = ResponsesRender(resp_id, echo, prompt, planned, kept, owner, pin_id)
        return await ctx.pipeline.serve(request, req, render)

    @app.get(PATH + "/{response_id}")
    async def retrieve(request: Request, response_id: str) -> Response:
        return json_response(store.get(owner_of(request), response_id, "response_id").body)

    @app.get(PATH + "/{response_id}/input_items")
    async def list_input_items(request: Request, response_id: str) -> Response:
        stored = store.get(owner_of(request), response_id, "response_id")
        items = input_items(response_id, stored.conversation.inputs)
        return json_response(page(items, dict(request.query_params)))

    @app.delete(PATH + "/{response_id}")
    async def delete(request: Request, response_id: str) -> Response:
        await store.delete(owner_of(request), response_id)
        return json_response({"id": response_id, "object": "response", "deleted": True})


def _decode(raw: bytes) -> ResponsesRequest:
    """Decode and check a body (on the tokenizer thread)."""
    return check_request(decode_body(raw, ResponsesRequest))
