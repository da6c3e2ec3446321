"""The native endpoints beside /generate: model and server info, the caller's usage, metrics,
cache flush and request abort."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import msgspec
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.messages import ReadyMsg
from radixrt.server.args import ServerArgs
from radixrt.server.cache_handles import CacheRegistry
from radixrt.server.caches_api import owner_of
from radixrt.server.metrics import CONTENT_TYPE, handle_figures
from radixrt.server.protocol import BadRequestError, Limits, decode_body
from radixrt.server.tenancy import Tenancy
from radixrt.server.tokenizer_manager import TokenizerManager
from radixrt.web.middleware import caller_of, require_admin
from radixrt.web.responses import error_response, json_response


class AbortRequest(msgspec.Struct, forbid_unknown_fields=True):
    rid: str


class FlushCacheRequest(msgspec.Struct, forbid_unknown_fields=True):
    disk: bool = False  # also delete this model's block files in the disk tier (--cache-dir)


def add_control_routes(
    app: FastAPI,
    tm: TokenizerManager,
    args: ServerArgs,
    tenancy: Tenancy,
    limits: Limits,
    registry: CacheRegistry,
    model_name: str,
) -> None:
    """/v1/usage, /get_model_info, /get_server_info, /flush_cache, /abort_request, /metrics."""

    @app.get("/v1/usage")
    async def usage(request: Request) -> Response:
        """The caller's own figures (any key; the server-wide ones are admin-only)."""
        figures = tenancy.usage_of(tm, request)
        mine = registry.list(owner_of(request))
        figures["caches"] = {
            "handles": len(mine),
            "tokens": sum(h.tokens for h in mine),
            "token_hours": round(sum(h.token_hours() for h in mine), 6),
        }
        return json_response(figures)

    @app.get("/get_model_info")
    async def get_model_info() -> Response:
        return json_response(
            {
                "model_path": tm.ready.model_path,
                "served_model_name": model_name,
                "chat_template": getattr(tm.tokenizer, "chat_template", None),
                "context_length": limits.context_length,
                "vocab_size": limits.vocab_size,
            }
        )

    kv_sizing = pool_sizing(tm.ready, args.model.tp_size)

    @app.get("/get_server_info")
    async def get_server_info(request: Request) -> Response:
        require_admin(request, "/get_server_info")
        info = msgspec.structs.asdict(await tm.get_info())
        info.pop("reply_id")
        server = dataclasses.asdict(args.server)
        server["api_key"] = None if server["api_key"] is None else "***"
        return json_response(
            {
                **info,
                **handle_figures(registry),
                "num_inflight_reqs": len(tm.states),
                "kv_pool_bytes": tm.ready.kv_pool_bytes,
                "kv_sizing": kv_sizing,
                "device": tm.ready.device,
                "dtype": tm.ready.dtype,
                "model_config": dataclasses.asdict(args.model),
                "cache_config": dataclasses.asdict(args.cache),
                "scheduler_config": dataclasses.asdict(args.scheduler),
                # what a None in scheduler_config resolved to on this device
                "effective_chunked_prefill_size": args.scheduler.prefill_chunk(
                    tm.ready.device.split(":")[0]
                ),
                "server_config": server,
            }
        )

    @app.post("/flush_cache")
    async def flush_cache(request: Request) -> Response:
        require_admin(request, "/flush_cache")
        body = _flush_request(request, await request.body())
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


def pool_sizing(ready: ReadyMsg, tp_size: int) -> dict[str, Any]:
    """The pool's figures by `radixrt kv-size`'s arithmetic (radixrt/economics), next to the
    measured ones, its window pool included; {"error": ...} when the model folder cannot be
    read for it."""
    from pathlib import Path

    from radixrt.economics.model_facts import facts_from_folder
    from radixrt.economics.pool_figures import pool_figures

    try:
        facts = facts_from_folder(Path(ready.model_path), exact_params=False)
        return pool_figures(facts, ready.dtype, ready.max_total_tokens, ready.kv_pool_bytes,
                            ready.context_length, tp_size, ready.window_pool_tokens,
                            ready.num_window_layers)  # fmt: skip
    except (OSError, ValueError, KeyError) as e:
        return {"error": f"{type(e).__name__}: {e}"}


def _flush_request(request: Request, body: bytes) -> FlushCacheRequest:
    """`{"disk": true}` as a JSON body or `?disk=true` (an empty body is no flag)."""
    req = decode_body(body, FlushCacheRequest) if body.strip() else FlushCacheRequest()
    flag = request.query_params.get("disk")
    if flag is not None:
        if flag.lower() not in ("true", "1", "false", "0"):
            raise BadRequestError(f"disk takes true or false, got {flag[:20]!r}")
        req = FlushCacheRequest(req.disk or flag.lower() in ("true", "1"))
    return req
