"""Passing one request through to a worker: the cache handle's home or the policy's pick,
streamed back as it comes, and POSTs broadcast to every healthy worker.

A request that certainly never reached a worker's scheduler (the connection could not be made,
or a 503 the worker marks as refused before starting) is sent to another; any other failure
is answered with 502, since the worker may have started it. A client that goes away closes
the upstream connection, so the worker aborts the request as it does for its own clients.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from radixrt.serve.placement.route_keys import route_request
from radixrt.serve.router.handles import HandleHomes, named_handle
from radixrt.serve.router.kv_feed import KVEventFeed
from radixrt.serve.router.workers import Worker, WorkerPool
from radixrt.serve.web.middleware import NOT_STARTED_HEADER, SESSION_HEADER, identity_of
from radixrt.serve.web.responses import error_response

# Errors raised before a connection to the worker existed: nothing was sent, so the request
# can go elsewhere. A read, write or protocol error may come after the worker got the body.
_NEVER_STARTED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

T = TypeVar("T")


class _ClientGone(Exception):
    pass


async def forward(
    request: Request,
    pool: WorkerPool,
    owner: str | None,
    homes: HandleHomes,
    feed: KVEventFeed | None,
    shared: bool,
    path: str,
    headers: dict[str, str],
    query: str = "",
) -> Response:
    """Send the request with `headers` to `path` (built by the caller from validated parts;
    `query`, with its `?`, likewise) on the worker holding the cache handle it names, else
    the policy's worker, retrying elsewhere while it never started."""
    body = await request.body()
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        parsed = None  # the worker answers 400
    route = route_request(path, parsed, request.headers.get(SESSION_HEADER), owner)
    if feed is not None:  # keyed by block hashes in the namespace the workers will use
        namespace = identity_of(request).namespace(_salt(parsed), shared)
        route = await feed.route(path, parsed, route.session, namespace)
    home = homes.home(named_handle(path, parsed))
    tried: set[str] = set()
    while (worker := pool.pick_at(home, tried) or pool.pick(route, tried)) is not None:
        tried.add(worker.url)
        upstream = pool.client.build_request(
            "POST", worker.url + path + query, content=body, headers=headers
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


async def broadcast(pool: WorkerPool, path: str, body: bytes, headers: dict[str, str]) -> list[int]:
    """POST to every healthy worker; the status codes of those that answered."""

    what = "POST " + path.partition("?")[0]

    async def one(worker: Worker) -> int | None:
        try:
            r = await pool.client.post(
                worker.url + path,
                content=body,
                headers={**headers, "content-type": "application/json"},
            )
        except httpx.HTTPError as e:
            pool.report(worker, what, repr(e))
            return None
        pool.report(worker, what, None if r.status_code in (200, 400, 409) else
                    f"HTTP {r.status_code}")  # fmt: skip
        return r.status_code

    codes = await asyncio.gather(*(one(w) for w in pool.healthy))
    return [c for c in codes if c is not None]
