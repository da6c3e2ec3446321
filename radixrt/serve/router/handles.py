"""Cache handles behind the router: a handle (`/v1/caches`, Gemini's cachedContents) lives in
the worker that made it, pinned in that worker's radix tree, so every request that names it
must go there. The router remembers each handle made through it (id -> worker URL, bounded,
least recently used forgotten first). A read, change or delete of a handle it does not know
(made on a worker directly, or forgotten) is tried on every healthy worker in turn; a
generation naming one goes where the policy says. Lists merge every worker's."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import httpx
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.serve.placement.route_keys import route_request
from radixrt.serve.router.workers import WorkerPool
from radixrt.serve.web.middleware import SESSION_HEADER
from radixrt.serve.web.paths import HANDLE_ID
from radixrt.serve.web.responses import error_response, json_response

PASSED_HEADERS = (
    "content-type",
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "anthropic-version",
    "anthropic-beta",
    SESSION_HEADER,
)
MAX_HANDLES = 100_000
# Paths that create a handle, and the paths of one handle (its id in group 1).
CREATE_PATHS = ("/v1/caches", "/v1beta/cachedContents", "/v1/cachedContents")
ONE_HANDLE = re.compile(
    r"^/(?:v1/caches|v1beta/cachedContents|v1/cachedContents)/([A-Za-z0-9_-]{1,128})$"
)
_GEMINI_PREFIX = "cachedContents/"


class HandleHomes:
    """id -> the URL of the worker holding it."""

    def __init__(self, max_size: int = MAX_HANDLES) -> None:
        self.max_size = max_size
        self._homes: OrderedDict[str, str] = OrderedDict()

    def record(self, handle_id: str, url: str) -> None:
        self._homes.pop(handle_id, None)
        self._homes[handle_id] = url
        if len(self._homes) > self.max_size:
            self._homes.popitem(last=False)

    def home(self, handle_id: str | None) -> str | None:
        if handle_id is None or handle_id not in self._homes:
            return None
        self._homes.move_to_end(handle_id)
        return self._homes[handle_id]

    def forget(self, handle_id: str) -> None:
        self._homes.pop(handle_id, None)


def named_handle(path: str, body: Any) -> str | None:
    """The handle a request names: /generate's `cache_id`, Gemini's `cachedContent`, or the
    id in a one-handle path."""
    m = ONE_HANDLE.match(path)
    if m:
        return m.group(1)
    if not isinstance(body, dict):
        return None
    value = body.get("cache_id") if path == "/generate" else body.get("cachedContent")
    if not isinstance(value, str):
        return None
    return value.removeprefix(_GEMINI_PREFIX)


def created_id(answer: Any) -> str | None:
    """The id in a create answer: native `id`, Gemini `name` ("cachedContents/{id}")."""
    if not isinstance(answer, dict):
        return None
    if isinstance(answer.get("id"), str):
        return answer["id"]
    name = answer.get("name")
    return name.removeprefix(_GEMINI_PREFIX) if isinstance(name, str) else None


def merge_lists(path: str, answers: list[Any]) -> dict[str, Any]:
    """The workers' list answers as one: native `data`, Gemini `cachedContents` (each worker's
    first page; a page token of one worker means nothing to another, so none is passed on)."""
    key = "data" if path == "/v1/caches" else "cachedContents"
    items = [x for a in answers if isinstance(a, dict) for x in a.get(key) or ()]
    return {"object": "list", "data": items} if key == "data" else {key: items}


def add_handle_routes(
    app: FastAPI,
    pool: WorkerPool,
    homes: HandleHomes,
    owner_of: Callable[[Request], str | None],
    headers_of: Callable[[Request], dict[str, str]],
) -> None:
    """Create, list, read, change and delete handles through the router; `headers_of`: the
    headers a client's request is passed on with (service.py)."""

    async def _send(url: str, request: Request, body: bytes) -> httpx.Response:
        """`request` (method, query, headers) to `url`, built by the caller from checked
        parts, read whole."""
        return await pool.client.request(
            request.method, url, params=request.query_params, content=body,
            headers=headers_of(request),
        )  # fmt: skip

    async def create_handle(request: Request, prefix: str) -> Response:
        """Made on the policy's worker, which is then the handle's home."""
        owner = owner_of(request)
        route = route_request(prefix, None, request.headers.get(SESSION_HEADER), owner)
        worker = pool.pick(route, set())
        if worker is None:
            return error_response("no healthy worker", 503)
        try:
            r = await _send(worker.url + prefix, request, await request.body())
        except httpx.HTTPError as e:
            pool.mark_unreachable(worker, repr(e))
            return error_response(f"worker {worker.url} failed: {e!r}", 502)
        finally:
            pool.done(worker)
        if r.status_code == 200 and (handle_id := created_id(_json(r))) is not None:
            homes.record(handle_id, worker.url)
        return _answer(r)

    async def one_handle(request: Request, prefix: str, handle_id: str) -> Response:
        """At its home first, then at every other healthy worker until one knows it."""
        if not HANDLE_ID.fullmatch(handle_id):
            return error_response(f"no cache {handle_id!r}: not a cache id", 400)
        path, body = f"{prefix}/{handle_id}", await request.body()
        home = homes.home(handle_id)
        order = sorted(pool.healthy, key=lambda w: w.url != home)
        last: httpx.Response | None = None
        for worker in order:
            try:
                r = await _send(worker.url + path, request, body)
            except httpx.HTTPError:
                continue
            if r.status_code != 404:
                if request.method == "DELETE" and r.status_code == 200:
                    homes.forget(handle_id)
                elif r.status_code == 200:
                    homes.record(handle_id, worker.url)
                return _answer(r)
            last = r
        return _answer(last) if last is not None else error_response("no healthy worker", 503)

    async def list_handles(request: Request, prefix: str) -> Response:
        """Every healthy worker's list, merged."""
        answers = []
        for worker in pool.healthy:
            try:
                r = await _send(worker.url + prefix, request, b"")
            except httpx.HTTPError:
                continue
            if r.status_code != 200:
                return _answer(r)  # a bad key is bad everywhere
            answers.append(_json(r))
        return json_response(merge_lists(prefix, answers))

    for prefix in CREATE_PATHS:  # each route's upstream path is built from `prefix`
        on_list, on_one = _at(create_handle, list_handles, one_handle, prefix)
        app.add_api_route(prefix, on_list[0], methods=["POST"])
        app.add_api_route(prefix, on_list[1], methods=["GET"])
        app.add_api_route(prefix + "/{handle_id}", on_one, methods=["GET", "PATCH", "DELETE"])


def _at(create: Any, listing: Any, one: Any, prefix: str) -> tuple[tuple[Any, Any], Any]:
    """The three handlers bound to `prefix` (closures: nothing a client sends can change it)."""

    async def on_create(request: Request) -> Response:
        return await create(request, prefix)

    async def on_list(request: Request) -> Response:
        return await listing(request, prefix)

    async def on_one(request: Request, handle_id: str) -> Response:
        return await one(request, prefix, handle_id)

    return (on_create, on_list), on_one


def _answer(r: httpx.Response) -> Response:
    return Response(r.content, r.status_code, media_type=r.headers.get("content-type"))


def _json(r: httpx.Response) -> object:
    try:
        return r.json()
    except ValueError:
        return None


def passed_headers(request: Request) -> dict[str, str]:
    """The client's headers a worker needs: its key, content type, session, dialect."""
    return {k: v for k in PASSED_HEADERS if (v := request.headers.get(k)) is not None}
