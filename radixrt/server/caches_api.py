"""The native cache handles: `POST /v1/caches` computes and pins a prefix (text, input_ids or
chat messages) for `ttl` seconds and names it; `GET /v1/caches`, `GET/PATCH/DELETE
/v1/caches/{id}`; `/generate` with `cache_id` puts the handle's tokens in front of its prompt
(cache_handles.py holds the handles, radixrt/cache/pins.py the pins)."""

from __future__ import annotations

import time
from typing import Any

import msgspec
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.core import SamplingParams
from radixrt.server.cache_handles import CacheHandle, CacheRegistry, expire_time_for
from radixrt.server.openai_protocol import ChatMessage, chat_messages_of
from radixrt.server.protocol import (
    BadRequestError,
    Limits,
    check_id,
    check_token_ids,
    decode_body,
    fit_to_context,
    render_chat,
)
from radixrt.server.tenancy import Tenancy
from radixrt.web.middleware import identity_of
from radixrt.web.responses import json_response

DEFAULT_TTL_S = 3600.0


class CreateCacheRequest(msgspec.Struct, forbid_unknown_fields=True):
    """One prefix, as /generate (`text`, `input_ids`) or a chat (`messages`, rendered with the
    server's chat template and no generation prompt, so a later turn continues it)."""

    text: str | None = None
    input_ids: list[Any] | None = None
    messages: list[ChatMessage] | None = None
    ttl: float = DEFAULT_TTL_S  # seconds
    name: str | None = None
    cache_salt: str | None = None


class UpdateCacheRequest(msgspec.Struct, forbid_unknown_fields=True):
    ttl: float | None = None  # seconds from now
    expire_time: float | None = None  # unix seconds


def owner_of(request: Request) -> str:
    """Whose handles a request sees: its tenant's ("" without tenants)."""
    return identity_of(request).tenant or ""


def add_caches_routes(
    app: FastAPI, tm: Any, limits: Limits, tenancy: Tenancy, registry: CacheRegistry
) -> None:
    @app.post("/v1/caches")
    async def create(request: Request) -> Response:
        body = decode_body(await request.body(), CreateCacheRequest)
        ids = await tm.run_tokenizer(_prefix_ids, body, tm.tokenizer, limits)
        check_id(body.name, "name")
        expire = expire_time_for(body.ttl, registry)
        namespace = tenancy.namespace(request, body.cache_salt, None)
        handle = await registry.create(request, owner_of(request), namespace, ids, expire,
                                       body.name)  # fmt: skip
        return json_response(render(handle))

    @app.get("/v1/caches")
    async def list_caches(request: Request) -> Response:
        data = [render(h) for h in registry.list(owner_of(request))]
        return json_response({"object": "list", "data": data})

    @app.get("/v1/caches/{handle_id}")
    async def get(request: Request, handle_id: str) -> Response:
        return json_response(render(registry.get(owner_of(request), handle_id)))

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
        return json_response(render(await registry.update(owner_of(request), handle_id, expire)))

    @app.delete("/v1/caches/{handle_id}")
    async def delete(request: Request, handle_id: str) -> Response:
        await registry.delete(owner_of(request), handle_id)
        return json_response({"id": handle_id, "object": "cache.deleted", "deleted": True})


def render(handle: CacheHandle) -> dict[str, Any]:
    return {
        "id": handle.id,
        "object": "cache",
        "name": handle.name,
        "tokens": handle.tokens,
        "create_time": handle.create_time,
        "update_time": handle.update_time,
        "expire_time": handle.expire_time,
        "token_hours": round(handle.token_hours(), 6),
    }


def _prefix_ids(body: CreateCacheRequest, tokenizer: Any, limits: Limits) -> list[int]:
    given = [x is not None for x in (body.text, body.input_ids, body.messages)]
    if sum(given) != 1:
        raise BadRequestError("give exactly one of text, input_ids and messages")
    if body.text is not None:
        limits.check_text(body.text)
        ids = tokenizer.encode(body.text)
    elif body.input_ids is not None:
        ids = check_token_ids(body.input_ids, "input_ids")
    else:
        assert body.messages is not None
        ids = render_chat_prefix(chat_messages_of(body.messages), tokenizer, limits)
    fit_to_context(ids, SamplingParams(max_new_tokens=0), limits, True)
    return ids


def render_chat_prefix(messages: list[dict[str, Any]], tokenizer: Any, limits: Limits) -> list[int]:
    """A conversation's tokens with no generation prompt (a later turn extends them)."""
    text = render_chat(messages, tokenizer, limits, add_generation_prompt=False)
    return list(tokenizer.encode(text, add_special_tokens=False))
