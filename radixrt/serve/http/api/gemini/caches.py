"""Gemini's cachedContents under `/v1beta` and `/v1` (create, get, list, patch, delete) over
the cache handles (cache_handles.py), and the lookup of a handle a generateContent request
names. A cached content's handle holds its model, messages and rendered text in `meta`; it is
made by a request through the serving pipeline that computes and pins its prefix."""

from __future__ import annotations

import base64
import binascii
import time
from typing import Any

import msgspec
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.api.gemini.protocol import (
    CreateCachedContentRequest,
    UpdateCachedContentRequest,
    cache_prefix,
    format_time,
    model_resource,
    parse_duration,
    parse_time,
)
from radixrt.serve.http.cache_handles import (
    CacheHandle,
    CacheRegistry,
    HandleRender,
    expire_time_for,
    owner_of,
)
from radixrt.serve.http.protocol import BadRequestError, check_id, decode_body
from radixrt.serve.web.middleware import caller_of
from radixrt.serve.web.responses import json_response

DEFAULT_TTL_S = 3600.0
DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE = 100, 1000
CACHE_PREFIX = "cachedContents/"
_UPDATABLE = {"ttl", "expireTime"}


def add_cached_contents_routes(app: FastAPI, ctx: ApiContext, prefix: str) -> None:
    """The routes under `prefix` ("/v1beta" or "/v1"): one registry serves both."""
    tm, registry = ctx.tm, ctx.registry
    path = prefix + "/cachedContents"

    @app.post(path)
    async def create(request: Request) -> Response:
        body = await tm.run_tokenizer(
            decode_body, await request.body(), CreateCachedContentRequest, caller=caller_of(request)
        )
        check_id(body.display_name, "displayName")
        expire = _expire_time(registry, body.ttl, body.expire_time, DEFAULT_TTL_S)
        ids, meta = await tm.run_tokenizer(
            cache_prefix, body, tm.tokenizer, ctx.limits, ctx.tool_format, caller=caller_of(request)
        )
        namespace = ctx.tenancy.namespace(request, None, None)
        handle = registry.new_handle(
            owner_of(request), namespace, ids, expire, name=body.display_name, meta=meta
        )
        render = HandleRender(registry, handle, render_handle)
        return await ctx.pipeline.make_handle(request, render)

    @app.get(path)
    async def list_caches(request: Request) -> Response:
        """Oldest first; `pageToken` names the last cache of the page before."""
        size = _page_size(request.query_params.get("pageSize"))
        handles = registry.list(owner_of(request))
        token = request.query_params.get("pageToken")
        if token:
            after = _decode_page_token(token)
            handles = [h for h in handles if (h.create_time, h.id) > after]
        page: dict[str, Any] = {"cachedContents": [render_handle(h) for h in handles[:size]]}
        if len(handles) > size:
            page["nextPageToken"] = _page_token(handles[size - 1])
        return json_response(page)

    @app.get(path + "/{cache_id}")
    async def get(request: Request, cache_id: str) -> Response:
        return json_response(render_handle(registry.get(owner_of(request), cache_id)))

    @app.patch(path + "/{cache_id}")
    async def update(request: Request, cache_id: str) -> Response:
        """Only the expiry may change (`updateMask`, when given, must name only it)."""
        raw = (await request.body()) or b"{}"
        other = sorted(set(decode_body(raw, dict[str, Any])) - _UPDATABLE)
        if other:
            raise BadRequestError(f"only ttl or expireTime can be updated, not {', '.join(other)}")
        mask = request.query_params.get("updateMask")
        if mask is not None and not set(mask.split(",")) <= _UPDATABLE | {"expire_time"}:
            raise BadRequestError(f"updateMask {mask!r}: only ttl or expireTime can be updated")
        body = decode_body(raw, UpdateCachedContentRequest)
        if body.ttl is None and body.expire_time is None:
            raise BadRequestError("give ttl or expireTime")
        expire = _expire_time(registry, body.ttl, body.expire_time, None)
        return json_response(
            render_handle(await registry.update(owner_of(request), cache_id, expire))
        )

    @app.delete(path + "/{cache_id}")
    async def delete(request: Request, cache_id: str) -> Response:
        await registry.delete(owner_of(request), cache_id)
        return json_response({})


def cached_content(registry: CacheRegistry, request: Request, name: str, model: str) -> CacheHandle:
    """The handle `cachedContents/{id}` of the request's tenant, made for `model`."""
    handle = registry.get(owner_of(request), name.removeprefix(CACHE_PREFIX))
    if "messages" not in handle.meta:
        raise BadRequestError(f"{name} was made by /v1/caches; only a cachedContents cache "
                              "can be continued by generateContent")  # fmt: skip
    made_for = handle.meta["model"]
    if made_for != model_resource(model):
        raise BadRequestError(
            f"the request's model ({model_resource(model)}) is not the cached content's "
            f"({made_for})"
        )
    return handle


def render_handle(handle: CacheHandle) -> dict[str, Any]:
    """A CachedContent, plus `tokenHours` (its storage so far; the SDK drops unknown fields)."""
    resource = {
        "name": CACHE_PREFIX + handle.id,
        "model": handle.meta.get("model"),
        "createTime": format_time(handle.create_time),
        "updateTime": format_time(handle.update_time),
        "expireTime": format_time(handle.expire_time),
        "usageMetadata": {"totalTokenCount": handle.tokens},
        "tokenHours": round(handle.token_hours(), 9),
    }
    if handle.name is not None:
        resource["displayName"] = handle.name
    return resource


def _expire_time(
    registry: CacheRegistry, ttl: str | None, expire_time: str | None, default_s: float | None
) -> float:
    """The wall-clock expiry a body asks for (TTLs scaled by --cache-ttl-scale)."""
    if ttl is not None and expire_time is not None:
        raise BadRequestError("give ttl or expireTime, not both")
    if expire_time is not None:
        left = parse_time(expire_time) - time.time()
        return expire_time_for(left, registry, "expireTime - now")
    ttl_s = parse_duration(ttl) if ttl is not None else default_s
    assert ttl_s is not None
    return expire_time_for(ttl_s, registry)


def _page_size(value: str | None) -> int:
    if not value:
        return DEFAULT_PAGE_SIZE
    try:
        size = int(value)
    except ValueError:
        raise BadRequestError(f"pageSize must be an integer, got {value!r}") from None
    if size < 0:
        raise BadRequestError("pageSize must not be negative")
    return min(size, MAX_PAGE_SIZE) or DEFAULT_PAGE_SIZE


def _page_token(handle: CacheHandle) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode([handle.create_time, handle.id])).decode()


def _decode_page_token(token: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(token)
        return msgspec.json.decode(raw, type=tuple[float, str])  # type: ignore[no-any-return]
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise BadRequestError("invalid pageToken") from None
