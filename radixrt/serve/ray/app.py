"""The Ray Serve application: an HTTP ingress in front of N `RadixrtReplica`s, routed by
`CacheAwareRequestRouter`.

The ingress takes radixrt's native `/generate` and OpenAI's `/v1/completions` and
`/v1/chat/completions` (JSON answers, or server-sent events with `"stream": true`), and
answers `/health` and `/v1/models`. A request
whose replica's server has died (before or while running it; replica.py) is sent again, after
a short wait, until RETRY_S has passed; Ray's health check (every `health_check_period_s`)
takes the dead replica out and starts a new one.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations at run time.
import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from ray.exceptions import RayActorError
from ray.serve.config import RequestRouterConfig
from ray.serve.handle import DeploymentHandle
from starlette.types import ASGIApp, Receive, Scope, Send

from radixrt.core.config import BrowserConfig, ServerConfig
from radixrt.serve.ray.replica import CLIENT_HEADERS, RadixrtReplica, ServerUnavailableError
from radixrt.serve.ray.request_router import CacheAwareRequestRouter
from radixrt.serve.web.browser import BrowserGuardMiddleware
from radixrt.serve.web.middleware import BodyLimitMiddleware

RETRY_S = 120.0
PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")

api = FastAPI(title="radixrt on Ray Serve")
# The ingress's BrowserConfig, set by RadixrtIngress.__init__ in its own actor process. Ray
# serves a frozen copy of `api` made when the class is decorated, so the middleware below is
# added here and reads the config when a request comes (the strict default until then).
_BROWSER: list[BrowserConfig] = [BrowserConfig()]
_MAX_REQUEST_BYTES: list[int] = [ServerConfig.max_request_bytes]  # the same, for the body limit


class _IngressBrowserGuard:
    """The server's and the router's browser check and body limit, over the ingress's
    config."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limited = BodyLimitMiddleware(self.app, _MAX_REQUEST_BYTES[0])
        await BrowserGuardMiddleware(limited, _BROWSER[0])(scope, receive, send)


api.add_middleware(_IngressBrowserGuard)


def _client_headers(request: Request) -> dict[str, str]:
    """The client's headers each replica's server needs (its key, its session)."""
    return {k: v for k in CLIENT_HEADERS if (v := request.headers.get(k)) is not None}


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "code": status}}, status)


@serve.deployment(name="ingress", ray_actor_options={"num_cpus": 0})
@serve.ingress(api)
class RadixrtIngress:
    def __init__(
        self,
        replicas: DeploymentHandle,
        browser: BrowserConfig | None = None,
        max_request_bytes: int = ServerConfig.max_request_bytes,
    ) -> None:
        self.replicas = replicas
        _BROWSER[0] = browser or BrowserConfig()
        _MAX_REQUEST_BYTES[0] = max_request_bytes

    @api.post("/generate")
    async def generate(self, request: Request) -> Response:
        return await self._forward("/generate", request)

    @api.post("/v1/completions")
    async def completions(self, request: Request) -> Response:
        return await self._forward("/v1/completions", request)

    @api.post("/v1/chat/completions")
    async def chat(self, request: Request) -> Response:
        return await self._forward("/v1/chat/completions", request)

    @api.get("/v1/models")
    async def models(self, request: Request) -> JSONResponse:
        status, answer = await self.replicas.get.remote("/v1/models", _client_headers(request))
        return JSONResponse(answer, status)

    @api.get("/health")
    async def health(self) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def _forward(self, path: str, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error("the body is not JSON", 400)
        headers = _client_headers(request)
        if isinstance(body, dict) and body.get("stream") is True:
            return await self._stream(path, body, headers)
        deadline = time.monotonic() + RETRY_S
        while True:
            try:
                status, answer = await self.replicas.forward.remote(path, body, headers)
                return JSONResponse(answer, status)
            except (ServerUnavailableError, RayActorError) as e:
                if time.monotonic() > deadline:
                    return _error(f"no replica could take the request: {e}", 503)
                await asyncio.sleep(0.5)

    async def _stream(self, path: str, body: Any, headers: dict[str, str]) -> Response:
        """The replica's events as they come; sent again while no byte has come back."""
        deadline = time.monotonic() + RETRY_S
        handle = self.replicas.options(stream=True)
        while True:
            gen = handle.forward_stream.remote(path, body, headers)
            try:
                head = await gen.__anext__()
                break
            except (ServerUnavailableError, RayActorError) as e:
                if time.monotonic() > deadline:
                    return _error(f"no replica could take the request: {e}", 503)
                await asyncio.sleep(0.5)
        if head["status"] != 200:  # an error is one JSON answer, not a stream
            raw = b"".join([chunk async for chunk in gen])
            return Response(raw, head["status"], media_type="application/json")

        async def events() -> AsyncIterator[bytes]:
            async for chunk in gen:
                yield chunk

        return StreamingResponse(events(), media_type="text/event-stream")


def build_app(server_flags: list[str], replicas: int, router: dict[str, Any] | None = None,
              health_check_period_s: float = 5.0, threads: int | None = None,
              browser: BrowserConfig | None = None,
              max_request_bytes: int = ServerConfig.max_request_bytes) -> Any:  # fmt: skip
    """The application to `serve.run`: `replicas` radixrt servers started with `server_flags`
    (the flags of `radixrt serve`, without --host/--port), routed by the policy and thresholds
    in `router` (RouterConfig fields; cache_aware by default); `threads`: each server's torch
    threads (OMP_NUM_THREADS; None: the server's default, all cores); `browser`: the hosts and
    origins the ingress accepts besides its own (radixrt/serve/web/browser.py); `max_request_bytes`:
    larger bodies get 413 at the ingress."""
    env = {"OMP_NUM_THREADS": str(threads)} if threads else {}
    replica = serve.deployment(
        RadixrtReplica,
        name="radixrt",
        num_replicas=replicas,
        max_ongoing_requests=256,
        health_check_period_s=health_check_period_s,
        health_check_timeout_s=30,
        graceful_shutdown_timeout_s=30,
        ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": env}},
        request_router_config=RequestRouterConfig(
            request_router_class=CacheAwareRequestRouter,
            request_router_kwargs=dict(router or {}),
        ),
    )
    return RadixrtIngress.bind(replica.bind(server_flags), browser, max_request_bytes)
