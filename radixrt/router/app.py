"""The standalone router's FastAPI app: the native and OpenAI-compatible endpoints, each request
passed through (streams included) to the worker server its routing policy picks.

A request that certainly never reached a worker's scheduler (the connection could not be made,
or a 503 the worker marks as refused before starting) is sent to another; any other failure
is answered with 502, since the worker may have started it. A client that goes away closes
the upstream connection, so the worker aborts the request as it does for its own clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import httpx
from fastapi import FastAPI
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from radixrt.config import RouterConfig, RouterServerConfig
from radixrt.router.handles import HandleHomes, add_handle_routes, named_handle, passed_headers
from radixrt.router.kv_feed import KVEventFeed
from radixrt.router.status import router_info, router_metrics
from radixrt.router.workers import Worker, WorkerPool
from radixrt.routing.cache_aware import CacheAwarePolicy
from radixrt.routing.keys import route_request
from radixrt.routing.policy import BaseRoutingPolicy, make_policy
from radixrt.web.keys import KeyRing, KeyStore
from radixrt.web.middleware import (
    NOT_STARTED_HEADER,
    SESSION_HEADER,
    ApiKeyMiddleware,
    AuthMiddleware,
    ForbiddenError,
    caller_of,
    identity_of,
    require_admin,
)
from radixrt.web.responses import (
    PROMETHEUS_CONTENT_TYPE,
    error_response,
    json_response,
)

logger = logging.getLogger("radixrt.router")

ROUTED_PATHS = (
    "/generate",
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
)
# Errors raised before a connection to the worker existed: nothing was sent, so the request
# can go elsewhere. A read, write or protocol error may come after the worker got the body.
_NEVER_STARTED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

T = TypeVar("T")


class _ClientGone(Exception):
    pass


def create_router_app(urls: list[str], router: RouterConfig, config: RouterServerConfig) -> FastAPI:
    """Build the app; the worker pool's health checks run for the app's lifetime."""
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(config.request_timeout_s, connect=5.0),
        limits=httpx.Limits(max_connections=1024),
    )
    auth = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    feed = None
    if config.kv_events:  # cache_aware over the blocks the workers' events report
        feed = KVEventFeed([u.rstrip("/") for u in urls], client, auth, config.tokenizer_path)
        policy: BaseRoutingPolicy = CacheAwarePolicy(router, make_index=feed.index_for)
    else:
        policy = make_policy(router)
    pool = WorkerPool(urls, policy, config, client)
    keys = None
    if config.api_key_file is not None:  # read once here: a bad file stops the start-up
        keys = KeyStore(KeyRing.from_file(config.api_key_file), config.api_key_file)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if keys is not None:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, keys.reload)
        await pool.check_all()
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

    async def routed(request: Request) -> Response:
        owner = _owner(request, config.shared_prefix_cache)
        return await _forward(request, pool, owner, homes, feed, config.shared_prefix_cache)

    for path in ROUTED_PATHS:
        app.add_api_route(path, routed, methods=["POST"])
    app.add_api_route("/v1beta/models/{rest:path}", routed, methods=["POST"])

    add_handle_routes(app, pool, homes, lambda r: _owner(r, config.shared_prefix_cache))

    @app.get("/health")
    async def health() -> Response:
        n = len(pool.healthy)
        if n == 0:
            return error_response("no healthy worker", 503)
        return json_response({"status": "ok", "healthy_workers": n})

    async def first_healthy(request: Request) -> Response:
        for worker in pool.healthy:
            try:
                r = await client.get(worker.url + request.url.path, headers=auth)
            except httpx.HTTPError as e:
                pool.mark_unreachable(worker, repr(e))
                continue
            return Response(r.content, r.status_code, media_type=r.headers.get("content-type"))
        return error_response("no healthy worker", 503)

    for path in ("/v1/models", "/get_model_info", "/v1beta/models", "/v1beta/models/{rest:path}"):
        app.add_api_route(path, first_healthy, methods=["GET"])

    @app.get("/get_server_info")
    async def get_server_info(request: Request) -> Response:
        require_admin(request, "/get_server_info")
        info = await router_info(pool, auth)
        if feed is not None:
            info["kv_events"] = feed.stats()
        return json_response(info)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        require_admin(request, "/metrics")
        text = router_metrics(await router_info(pool, auth))
        return Response(text, media_type=PROMETHEUS_CONTENT_TYPE)

    @app.post("/flush_cache")
    async def flush_cache(request: Request) -> Response:
        require_admin(request, "/flush_cache")
        query = f"?{request.url.query}" if request.url.query else ""  # ?disk=true travels
        codes = await _broadcast(pool, "/flush_cache" + query, await request.body(), auth)
        if codes and all(c == 200 for c in codes):
            return json_response({"success": True})
        if 400 in codes:
            return error_response('flush_cache takes {"disk": true|false} or ?disk=', 400)
        return error_response("requests are running on a worker; flush when idle", 409)

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        """Every worker aborts the rid among the caller's requests (the client's own
        Authorization travels, as with its requests); the same answer whether or not one ran."""
        body = await request.body()
        headers = {**auth, **passed_headers(request)}
        codes = await _broadcast(pool, "/abort_request", body, headers)
        if 400 in codes:
            return error_response('abort_request takes {"rid": "..."}', 400)
        return json_response({"success": True})

    @app.exception_handler(ForbiddenError)
    async def forbidden(request: Request, exc: Exception) -> Response:
        return error_response(str(exc), 403)

    if config.api_key is not None:
        app.add_middleware(ApiKeyMiddleware, api_key=config.api_key)
    elif keys is not None:
        app.add_middleware(AuthMiddleware, keys=keys)
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


async def _forward(
    request: Request,
    pool: WorkerPool,
    owner: str | None,
    homes: HandleHomes,
    feed: KVEventFeed | None,
    shared: bool,
) -> Response:
    """Send the request to the worker holding the cache handle it names, else the policy's
    worker, retrying elsewhere while it never started."""
    body = await request.body()
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        parsed = None  # the worker answers 400
    path = request.url.path
    route = route_request(path, parsed, request.headers.get(SESSION_HEADER), owner)
    if feed is not None:  # keyed by block hashes in the namespace the workers will use
        namespace = identity_of(request).namespace(_salt(parsed), shared)
        route = await feed.route(path, parsed, route.session, namespace)
    headers = passed_headers(request)
    home = homes.home(named_handle(path, parsed))
    tried: set[str] = set()
    while (worker := pool.pick_at(home, tried) or pool.pick(route, tried)) is not None:
        tried.add(worker.url)
        upstream = pool.client.build_request(
            "POST", worker.url + path, content=body, headers=headers
        )
        try:
            resp = await _unless_client_goes(request, pool.client.send(upstream, stream=True))
        except _ClientGone:
            pool.done(worker)  # the cancelled send closed the connection: the worker aborts
            return Response(status_code=499)
        except _NEVER_STARTED as e:
            pool.done(worker)
            pool.mark_unreachable(worker, repr(e))
            pool.retries += 1
            continue
        except httpx.HTTPError as e:
            pool.done(worker)
            if isinstance(e, httpx.TransportError):
                pool.mark_unreachable(worker, repr(e))
            return error_response(f"worker {worker.url} failed: {e!r}", 502)
        refused = resp.status_code == 503 and resp.headers.get(NOT_STARTED_HEADER) == "1"
        if refused and any(w.healthy and w.url not in tried for w in pool.workers):
            await resp.aclose()  # refused before it started (queue full, scheduler gone)
            pool.done(worker)
            pool.retries += 1
            continue
        return StreamingResponse(
            _relay(resp),
            status_code=resp.status_code,
            media_type=resp.headers.get("content-type"),
            background=BackgroundTask(_release, resp, pool, worker),
        )
    return error_response("no healthy worker could take the request", 503)


def _salt(body: object) -> str | None:
    """The body's cache_salt, else its extra_key: the workers' rule for the namespace
    (server/tenancy.py `namespace`; a body they refuse is routed all the same)."""
    if not isinstance(body, dict):
        return None
    salt = body.get("cache_salt")
    if salt is None:
        salt = body.get("extra_key")
    return salt if isinstance(salt, str) else None


async def _relay(resp: httpx.Response) -> AsyncIterator[bytes]:
    async for chunk in resp.aiter_raw():
        yield chunk


async def _release(resp: httpx.Response, pool: WorkerPool, worker: Worker) -> None:
    """After the answer ends or the client leaves: closing an unfinished upstream response
    drops its connection, which the worker treats as its client going away."""
    await resp.aclose()
    pool.done(worker)


async def _unless_client_goes(request: Request, work: Awaitable[T]) -> T:
    """Await `work`; cancel it and raise _ClientGone if the client disconnects first."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise _ClientGone


async def _wait_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _broadcast(
    pool: WorkerPool, path: str, body: bytes, headers: dict[str, str]
) -> list[int]:
    """POST to every healthy worker; the status codes of those that answered."""

    async def one(worker: Worker) -> int | None:
        try:
            r = await pool.client.post(
                worker.url + path,
                content=body,
                headers={**headers, "content-type": "application/json"},
            )
            return r.status_code
        except httpx.HTTPError:
            return None

    codes = await asyncio.gather(*(one(w) for w in pool.healthy))
    return [c for c in codes if c is not None]
