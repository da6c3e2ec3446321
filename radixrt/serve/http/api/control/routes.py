"""The server's own endpoints: /health, the caller's usage, model and server info, metrics,
cache flush and request abort."""

from __future__ import annotations

import asyncio
import time
from pathlib import PurePath

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.api.control.protocol import AbortRequest, flush_request, flush_wait_s
from radixrt.serve.http.api.control.render import (
    handles_usage,
    info_dict,
    model_info,
    pool_sizing,
    server_info,
)
from radixrt.serve.http.cache_handles import owner_of
from radixrt.serve.http.metrics import CONTENT_TYPE, handle_figures
from radixrt.serve.http.protocol import decode_body
from radixrt.serve.web.middleware import caller_of, identity_of, require_admin
from radixrt.serve.web.responses import error_response, json_response

BODIES = {"/abort_request": AbortRequest}  # for the OpenAPI document


def add_routes(app: FastAPI, ctx: ApiContext) -> None:
    tm, registry = ctx.tm, ctx.registry
    kv_sizing = pool_sizing(tm.ready, ctx.args.model.tp_size)

    @app.get("/health")
    async def health() -> Response:
        """200 while the scheduler lives and its loop beats; 503 with the reason otherwise."""
        reason = tm.dead_reason or tm.stall_reason
        if reason is not None:
            return error_response(reason, 503)
        return json_response({"status": "ok"})

    @app.get("/v1/usage")
    async def usage(request: Request) -> Response:
        """The caller's own figures (any key; the server-wide ones are admin-only)."""
        figures = ctx.tenancy.usage_of(tm, request)
        figures["caches"] = handles_usage(registry.list(owner_of(request)))
        return json_response(figures)

    @app.get("/get_model_info")
    async def get_model_info(request: Request) -> Response:
        """The model; its folder's absolute path for admins (and keyless servers) only,
        others see the folder's name."""
        info = model_info(tm.ready, ctx.model_name, tm.tokenizer, ctx.limits)
        if not identity_of(request).is_admin:
            info["model_path"] = PurePath(info["model_path"]).name
        return json_response(info)

    @app.get("/get_server_info")
    async def get_server_info(request: Request) -> Response:
        require_admin(request, "/get_server_info")
        info = {**info_dict(await tm.get_info()), **handle_figures(registry),
                "num_inflight_reqs": len(tm.states)}  # fmt: skip
        return json_response(server_info(info, tm.ready, ctx.args, kv_sizing))

    @app.post("/flush_cache")
    async def flush_cache(request: Request) -> Response:
        require_admin(request, "/flush_cache")
        body = flush_request(request, await request.body())
        deadline = time.monotonic() + flush_wait_s(request)
        while tm.states and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        cleared = None if tm.states else await tm.flush_cache(body.disk)
        if cleared is None:
            return error_response("requests are running; flush the cache when idle", 409)
        return json_response({"success": True, "cleared": cleared})

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        """Abort the caller's own request `rid`; the same answer whether or not one runs."""
        body = decode_body(await request.body(), AbortRequest)
        tm.abort_rid(body.rid, caller_of(request))
        return json_response({"success": True})

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        require_admin(request, "/metrics")
        if not tm.metrics.enabled:
            return error_response("metrics are off; start the server with --enable-metrics", 404)
        info, summary = await asyncio.gather(tm.get_info(), tm.cache_summary())
        return Response(tm.metrics.render(info, registry, summary), media_type=CONTENT_TYPE)
