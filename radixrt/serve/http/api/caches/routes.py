"""The native cache handles: `POST /v1/caches` computes and pins a prefix for `ttl` seconds and
names it (through the serving pipeline); `GET /v1/caches`, `GET/PATCH/DELETE
/v1/caches/{id}`; `/generate` with `cache_id` puts the handle's tokens in front of its prompt
(server/cache_handles.py holds the handles, radixrt/cache/pins.py the pins). And
`POST /v1/cache/explain`: why a prompt would miss the prefix cache (server/explain.py)."""

from __future__ import annotations

import time

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.serve.http.api.caches.protocol import (
    CreateCacheRequest,
    ExplainRequest,
    UpdateCacheRequest,
    explain_ids,
    prefix_ids,
)
from radixrt.serve.http.api.caches.render import render_handle
from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.cache_handles import HandleRender, expire_time_for, owner_of
from radixrt.serve.http.protocol import BadRequestError, check_id, decode_body
from radixrt.serve.web.middleware import caller_of
from radixrt.serve.web.responses import json_response

BODIES = {  # for the OpenAPI document
    "/v1/cache/explain": ExplainRequest,
    "/v1/caches": CreateCacheRequest,
    "PATCH /v1/caches/{handle_id}": UpdateCacheRequest,
}


def add_routes(app: FastAPI, ctx: ApiContext) -> None:
    tm, registry = ctx.tm, ctx.registry

    @app.post("/v1/caches")
    async def create(request: Request) -> Response:
        body = decode_body(await request.body(), CreateCacheRequest)
        ids = await tm.run_tokenizer(
            prefix_ids, body, tm.tokenizer, ctx.limits, caller=caller_of(request)
        )
        check_id(body.name, "name")
        expire = expire_time_for(body.ttl, registry)
        namespace = ctx.tenancy.namespace(request, body.cache_salt, None)
        handle = registry.new_handle(owner_of(request), namespace, ids, expire, body.name)
        render = HandleRender(registry, handle, render_handle)
        return await ctx.pipeline.make_handle(request, render, body.cache_salt)

    @app.get("/v1/caches")
    async def list_caches(request: Request) -> Response:
        data = [render_handle(h) for h in registry.list(owner_of(request))]
        return json_response({"object": "list", "data": data})

    @app.get("/v1/caches/{handle_id}")
    async def get(request: Request, handle_id: str) -> Response:
        return json_response(render_handle(registry.get(owner_of(request), handle_id)))

    @app.patch("/v1/caches/{handle_id}")
    async def update(request: Request, handle_id: str) -> Response:
        body = decode_body(await request.body(), UpdateCacheRequest)
        if (body.ttl is None) == (body.expire_time is None):
            raise BadRequestError("give exactly one of ttl and expire_time")
        if body.ttl is not None:
            expire = expire_time_for(body.ttl, registry)
        else:
            assert body.expire_time is not None
            expire = expire_time_for(body.expire_time - time.time(), registry, "expire_time - now")
        handle = await registry.update(owner_of(request), handle_id, expire)
        return json_response(render_handle(handle))

    @app.delete("/v1/caches/{handle_id}")
    async def delete(request: Request, handle_id: str) -> Response:
        await registry.delete(owner_of(request), handle_id)
        return json_response({"id": handle_id, "object": "cache.deleted", "deleted": True})

    @app.post("/v1/cache/explain")
    async def explain(request: Request) -> Response:
        body = decode_body(await request.body(), ExplainRequest)
        ids = await tm.run_tokenizer(
            explain_ids, body, tm.tokenizer, ctx.limits, caller=caller_of(request)
        )
        return json_response(await ctx.pipeline.explain(request, ids, body.cache_salt))
