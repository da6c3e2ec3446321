"""The standalone router's FastAPI app: the native and OpenAI-compatible endpoints, each request
passed through (streams included) to the worker server its routing policy picks (forward.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.core.config import RouterConfig, RouterServerConfig
from radixrt.serve.http.api.gemini.render import ACTIONS as GEMINI_METHODS
from radixrt.serve.http.api.gemini.render import CLIENT_HEADER as GEMINI_CLIENT_HEADER
from radixrt.serve.placement.cache_aware import CacheAwarePolicy
from radixrt.serve.placement.policy import BaseRoutingPolicy, make_policy
from radixrt.serve.router.forward import broadcast, forward
from radixrt.serve.router.handles import HandleHomes, add_handle_routes
from radixrt.serve.router.kv_feed import KVEventFeed
from radixrt.serve.router.service import WorkerAuth
from radixrt.serve.router.status import router_info, router_metrics
from radixrt.serve.router.workers import WorkerPool, WorkerUnsafeError
from radixrt.serve.web.browser import BrowserGuardMiddleware
from radixrt.serve.web.keys import KeyRing, KeyStore
from radixrt.serve.web.middleware import (
    ApiKeyMiddleware,
    AuthMiddleware,
    BodyLimitMiddleware,
    ForbiddenError,
    caller_of,
    identity_of,
    require_admin,
)
from radixrt.serve.web.paths import MODEL_NAME, PathGuardMiddleware
from radixrt.serve.web.responses import (
    PROMETHEUS_CONTENT_TYPE,
    error_response,
    json_response,
)

logger = logging.getLogger("radixrt.serve.router")

ROUTED_PATHS = (
    "/generate",
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/tokenize",
    "/detokenize",
)
GEMINI_PREFIXES = ("/v1beta", "/v1")  # google-genai's api_version "v1beta" and its default


def create_router_app(urls: list[str], router: RouterConfig, config: RouterServerConfig) -> FastAPI:
    """Build the app; the worker pool's health checks run for the app's lifetime."""
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(config.request_timeout_s, connect=5.0),
        limits=httpx.Limits(max_connections=1024),
    )
    auth = WorkerAuth(config)  # a service key file that cannot be used stops the start-up
    feed = None
    if config.kv_events:  # cache_aware over the blocks the workers' events report
        feed = KVEventFeed([u.rstrip("/") for u in urls], client, auth.own, config.tokenizer_path)
        policy: BaseRoutingPolicy = CacheAwarePolicy(router, make_index=feed.index_for)
    else:
        policy = make_policy(router)
    pool = WorkerPool(urls, policy, config, client, functools.partial(auth.vet, client))
    keys = None
    if config.api_key_file is not None:  # read once here: a bad file stops the start-up
        keys = KeyStore(KeyRing.from_file(config.api_key_file), config.api_key_file)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if keys is not None:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, keys.reload)
        await pool.check_all()
        unsafe = [w.refused for w in pool.workers if w.refused is not None]
        if unsafe:  # a worker reached at start is unsafe behind this router: do not serve
            raise WorkerUnsafeError("; ".join(unsafe))
        pool.start()
        if feed is not None:
            feed.start()
        yield
        if feed is not None:
            await feed.close()
        await pool.close()
        await client.aclose()

    app = FastAPI(title="radixrt router", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.pool = pool

    homes = HandleHomes()  # where each cache handle made through the router lives

    def route_to(path: str) -> Any:
        async def routed(request: Request) -> Response:
            owner = _owner(request, config.shared_prefix_cache)
            return await forward(
                request, pool, owner, homes, feed, config.shared_prefix_cache, path,
                auth.forwarded(request),
            )  # fmt: skip

        return routed

    for path in ROUTED_PATHS:  # the allow-list: nothing else is passed on
        app.add_api_route(path, route_to(path), methods=["POST"])

    def gemini_method(prefix: str) -> Any:
        async def call(request: Request, model_method: str) -> Response:
            """`{model}:{method}`, rebuilt from a checked model name and a known method."""
            model, _, method = model_method.partition(":")
            if not MODEL_NAME.fullmatch(model) or method not in GEMINI_METHODS:
                return error_response(f"no route POST {prefix}/models/{model_method}", 404)
            alt = request.query_params.get("alt")
            query = f"?alt={alt}" if alt in ("sse", "json") else ""
            owner = _owner(request, config.shared_prefix_cache)
            path = f"{prefix}/models/{model}:{method}"
            return await forward(
                request, pool, owner, homes, feed, config.shared_prefix_cache, path,
                auth.forwarded(request), query,
            )  # fmt: skip

        return call

    for prefix in GEMINI_PREFIXES:
        app.add_api_route(
            prefix + "/models/{model_method}", gemini_method(prefix), methods=["POST"]
        )

    add_handle_routes(
        app, pool, homes, lambda r: _owner(r, config.shared_prefix_cache), auth.forwarded
    )

    @app.get("/health")
    async def health() -> Response:
        n = len(pool.healthy)
        if n == 0:
            return error_response("no healthy worker", 503)
        return json_response({"status": "ok", "healthy_workers": n})

    async def first_healthy(path: str, request: Request | None = None) -> Response:
        """GET `path` from the first healthy worker. A Gemini client's header goes with it:
        the worker answers /v1/models in that client's shape."""
        headers = dict(auth.own)
        if request is not None and GEMINI_CLIENT_HEADER in request.headers:
            headers[GEMINI_CLIENT_HEADER] = request.headers[GEMINI_CLIENT_HEADER]
        for worker in pool.healthy:
            try:
                r = await client.get(worker.url + path, headers=headers)
            except httpx.HTTPError as e:
                pool.mark_unreachable(worker, repr(e))
                continue
            pool.report(worker, "GET " + path.split("/")[1], _failure(r))
            return Response(r.content, r.status_code, media_type=r.headers.get("content-type"))
        return error_response("no healthy worker", 503)

    def ask_first_healthy(path: str) -> Any:
        async def ask(request: Request) -> Response:
            return await first_healthy(path, request)

        return ask

    for path in ("/v1/models", "/get_model_info", "/v1beta/models", "/tokenizer_info"):
        app.add_api_route(path, ask_first_healthy(path), methods=["GET"])

    def gemini_model(prefix: str) -> Any:
        async def get(request: Request, model: str) -> Response:
            if not MODEL_NAME.fullmatch(model):
                return error_response(f"no model {model!r}", 404)
            return await first_healthy(f"{prefix}/models/{model}", request)

        return get

    for prefix in GEMINI_PREFIXES:
        app.add_api_route(prefix + "/models/{model}", gemini_model(prefix), methods=["GET"])

    @app.get("/get_server_info")
    async def get_server_info(request: Request) -> Response:
        require_admin(request, "/get_server_info")
        info = await router_info(pool, auth.own)
        if feed is not None:
            info["kv_events"] = feed.stats()
        return json_response(info)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        require_admin(request, "/metrics")
        text = router_metrics(await router_info(pool, auth.own))
        return Response(text, media_type=PROMETHEUS_CONTENT_TYPE)

    @app.post("/flush_cache")
    async def flush_cache(request: Request) -> Response:
        require_admin(request, "/flush_cache")
        query = f"?{request.url.query}" if request.url.query else ""  # ?disk=true travels
        codes = await broadcast(pool, "/flush_cache" + query, await request.body(), auth.own)
        if codes and all(c == 200 for c in codes):
            return json_response({"success": True})
        if 401 in codes or 403 in codes:
            return error_response("a worker refused the router's credential (see its log)", 502)
        if 400 in codes:
            return error_response('flush_cache takes {"disk": true|false} or ?disk=', 400)
        return error_response("requests are running on a worker; flush when idle", 409)

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        """Every worker aborts the rid among the caller's requests (the client's own
        Authorization travels, as with its requests); the same answer whether or not one ran."""
        body = await request.body()
        codes = await broadcast(pool, "/abort_request", body, auth.forwarded(request))
        if 400 in codes:
            return error_response('abort_request takes {"rid": "..."}', 400)
        return json_response({"success": True})

    @app.exception_handler(ForbiddenError)
    async def forbidden(request: Request, exc: Exception) -> Response:
        return error_response(str(exc), 403)

    app.add_middleware(BodyLimitMiddleware, max_bytes=config.max_request_bytes)
    if config.api_key is not None:
        app.add_middleware(ApiKeyMiddleware, api_key=config.api_key)
    elif keys is not None:
        app.add_middleware(AuthMiddleware, keys=keys)
    app.add_middleware(PathGuardMiddleware)  # a dot segment is refused before routing
    app.add_middleware(BrowserGuardMiddleware, config=config)  # outermost: pages first
    return app


def _owner(request: Request, shared: bool) -> str | None:
    """Whose routing namespace a request is in: its tenant (router keys), else the digest of
    the key it carries (the workers tell tenants apart by it), else none; None as well with
    --shared-prefix-cache."""
    if shared:
        return None
    tenant = identity_of(request).tenant
    if tenant is not None:
        return "tenant:" + tenant
    caller = caller_of(request)
    return caller if caller.startswith("key:") else None


def _failure(r: httpx.Response) -> str | None:
    """What went wrong with one of the router's own calls (None: nothing)."""
    return None if r.status_code < 400 else f"HTTP {r.status_code}"
