"""The FastAPI app: native endpoints (/generate, cache and info, metrics) plus the OpenAI ones.

One asyncio task per HTTP request; each handler parses, tokenizes and validates its body on
the tokenizer thread (the event loop stays free), checks its grammar, submits through the
TokenizerManager and waits on its requests' shared event.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.server.anthropic.api import BODIES as ANTHROPIC_BODIES
from radixrt.server.anthropic.api import AnthropicServing
from radixrt.server.args import ServerArgs, served_model_name
from radixrt.server.cache_api import ExplainRequest, add_cache_routes, explain_prompts
from radixrt.server.cache_handles import CacheRegistry
from radixrt.server.caches_api import (
    CreateCacheRequest,
    UpdateCacheRequest,
    add_caches_routes,
    owner_of,
)
from radixrt.server.dashboard import DashboardRecorder, add_dashboard_routes
from radixrt.server.gemini.api import add_gemini_routes
from radixrt.server.grammar_check import GrammarChecker
from radixrt.server.http_common import (
    ClientGoneError,
    request_events,
    updates,
    wait_finished,
)
from radixrt.server.http_errors import add_error_handlers
from radixrt.server.metrics import CONTENT_TYPE, handle_figures
from radixrt.server.openai_api import OpenAIServing
from radixrt.server.openai_protocol import ChatCompletionRequest, CompletionRequest
from radixrt.server.openapi import install_openapi
from radixrt.server.protocol import (
    BadRequestError,
    GenerateRequest,
    Limits,
    decode_body,
    prepare_generate,
)
from radixrt.server.tenancy import Tenancy, work_of
from radixrt.server.tokenizer_manager import (
    ReqState,
    TokenizerManager,
)
from radixrt.web.middleware import (
    SESSION_HEADER,
    BodyLimitMiddleware,
    caller_of,
    require_admin,
)
from radixrt.web.responses import (
    error_response,
    json_response,
    sse_event,
    sse_response,
)

logger = logging.getLogger("radixrt")


class AbortRequest(msgspec.Struct, forbid_unknown_fields=True):
    rid: str


class FlushCacheRequest(msgspec.Struct, forbid_unknown_fields=True):
    disk: bool = False  # also delete this model's block files in the disk tier (--cache-dir)


def _flush_request(request: Request, body: bytes) -> FlushCacheRequest:
    """`{"disk": true}` as a JSON body or `?disk=true` (an empty body is no flag)."""
    req = decode_body(body, FlushCacheRequest) if body.strip() else FlushCacheRequest()
    flag = request.query_params.get("disk")
    if flag is not None:
        if flag.lower() not in ("true", "1", "false", "0"):
            raise BadRequestError(f"disk takes true or false, got {flag[:20]!r}")
        req = FlushCacheRequest(req.disk or flag.lower() in ("true", "1"))
    return req


def create_app(
    tm: TokenizerManager,
    args: ServerArgs,
    tenancy: Tenancy,
    on_shutdown: Any = None,
    recorder: DashboardRecorder | None = None,
) -> FastAPI:
    """Build the app; `tenancy` holds the keys (Tenancy.from_config(args.server), read once at
    start-up); `on_shutdown` (async, optional) runs after uvicorn drains connections;
    `recorder`: the dashboard's history, fed by `tm` (none given: an empty one)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        grammar.start()  # warms a grammar-check worker in the background
        tenancy.watch_sighup()
        yield
        grammar.close()
        if on_shutdown is not None:
            await on_shutdown()

    app = FastAPI(title="radixrt", lifespan=lifespan, docs_url=None, redoc_url=None)
    limits = Limits.from_server(tm.ready, args.server, tm.tokenizer)
    grammar = GrammarChecker(
        args.scheduler,
        tm.tokenizer,
        tm.ready,
        max_pending=args.server.max_pending_grammars,
        max_grammar_bytes=args.server.max_grammar_bytes,
    )
    name = served_model_name(args)
    openai = OpenAIServing(tm, limits, name, grammar, tenancy)
    app.state.model_name = openai.model_name
    app.state.max_request_bytes = args.server.max_request_bytes
    registry = CacheRegistry(tm, args.server.cache_ttl_scale)  # named, pinned prefixes
    app.state.cache_registry = registry
    add_error_handlers(app)

    @app.get("/health")
    async def health() -> Response:
        if tm.dead_reason is not None:
            return error_response(tm.dead_reason, 503)
        return json_response({"status": "ok"})

    @app.post("/generate")
    async def generate(request: Request) -> Response:
        body = await tm.run_tokenizer(decode_body, await request.body(), GenerateRequest)
        namespace = tenancy.namespace(request, body.cache_salt, body.extra_key)
        handle, pins = None, None
        if body.cache_id is not None:
            handle = registry.get(owner_of(request), body.cache_id)
            if namespace != handle.namespace:
                raise BadRequestError("cache_salt differs from the one the cache was made with")
            pins = [handle.pin_spec()]  # pinned again if a flush dropped it
        prefix = handle.input_ids if handle is not None else None
        prepared = await tm.run_tokenizer(prepare_generate, body, tm.tokenizer, limits, prefix)
        await grammar.check(prepared.params)
        tenancy.admit(tm, request, *work_of(prepared.prompts, prepared.params))
        explained = None
        if body.explain_cache and not body.stream:
            explained = await explain_prompts(tm, tenancy, request, prepared.prompts, namespace)
        states = tm.submit(
            prepared.prompts,
            prepared.params,
            prepared.rids,
            namespace,
            session=request.headers.get(SESSION_HEADER),
            caller=caller_of(request),
            endpoint=request.url.path,
            pins=pins,
        )
        if body.stream:
            return sse_response(request_events(tm, states, _generate_events(states)))
        try:
            await wait_finished(request, tm, states)
        except ClientGoneError:
            return Response(status_code=499)
        results = [s.result() for s in states]
        if explained is not None:
            for state, result in zip(states, results, strict=True):
                result["meta_info"]["cache_explanation"] = explained[tuple(state.out.input_ids)]
        return json_response(results[0] if prepared.is_single and len(results) == 1 else results)

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
                "served_model_name": openai.model_name,
                "chat_template": getattr(tm.tokenizer, "chat_template", None),
                "context_length": limits.context_length,
                "vocab_size": limits.vocab_size,
            }
        )

    kv_sizing = _kv_sizing(tm.ready, args)

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

    openai.add_routes(app)
    AnthropicServing(tm, limits, openai.model_name, tenancy, args.server).add_routes(app)
    add_cache_routes(app, tm, limits, tenancy)
    add_caches_routes(app, tm, limits, tenancy, registry)
    add_gemini_routes(app, tm, limits, tenancy, registry, openai.model_name)
    add_dashboard_routes(app, tm, recorder or DashboardRecorder(), openai.model_name)
    install_openapi(
        app,
        {
            "/generate": GenerateRequest,
            "/v1/completions": CompletionRequest,
            "/v1/chat/completions": ChatCompletionRequest,
            "/abort_request": AbortRequest,
            "/v1/cache/explain": ExplainRequest,
            "/v1/caches": CreateCacheRequest,
            "PATCH /v1/caches/{handle_id}": UpdateCacheRequest,
            **ANTHROPIC_BODIES,
        },
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=args.server.max_request_bytes)
    tenancy.install(app)  # outermost: no body is read before the key check
    return app


async def _generate_events(states: list[ReqState]) -> AsyncIterator[bytes]:
    """SSE events for /generate: cumulative results; `index` tells requests apart when
    several (errors, [DONE] and aborts: `request_events`)."""
    sent: list[tuple[int, str, bool]] = [(0, "", False)] * len(states)
    async for _ in updates(states):
        for i, state in enumerate(states):
            result = state.result()
            key = (len(result["output_ids"]), result["text"], state.out.is_finished)
            if key == sent[i]:
                continue
            sent[i] = key
            if len(states) > 1:
                result["index"] = i
            yield sse_event(result)


def _kv_sizing(ready: Any, args: ServerArgs) -> dict[str, Any]:
    """The pool's figures by `radixrt kv-size`'s arithmetic (radixrt/economics), next to the
    measured ones; {"error": ...} when the model folder cannot be read for it."""
    from pathlib import Path

    from radixrt.economics.kv_size import pool_figures
    from radixrt.economics.model_facts import facts_from_folder

    try:
        facts = facts_from_folder(Path(ready.model_path), exact_params=False)
        return pool_figures(facts, ready.dtype, ready.max_total_tokens, ready.kv_pool_bytes,
                            ready.context_length, args.model.tp_size)  # fmt: skip
    except (OSError, ValueError, KeyError) as e:
        return {"error": f"{type(e).__name__}: {e}"}
