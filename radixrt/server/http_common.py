"""HTTP plumbing shared by the native and OpenAI endpoints: JSON and SSE responses, errors,
waiting for requests while watching for a client that goes away, and the API-key check."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from radixrt.server.tokenizer_manager import ReqState, SchedulerDeadError, TokenizerManager

_encoder = msgspec.json.Encoder()
SSE_DONE = b"data: [DONE]\n\n"
SESSION_HEADER = "x-session-id"  # a sticky-session key for routing across replicas
_ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
                409: "ConflictError", 500: "InternalServerError", 503: "ServiceUnavailableError"}


class ClientGoneError(Exception):
    """The client disconnected before its requests finished (they have been aborted)."""


def json_response(obj: Any, status_code: int = 200) -> Response:
    return Response(_encoder.encode(obj), status_code, media_type="application/json")


def error_body(message: str, status_code: int) -> dict[str, Any]:
    """OpenAI-style error object; the official client reads `error.message`."""
    kind = _ERROR_TYPES.get(status_code, "Error")
    return {"error": {"message": message, "type": kind, "code": status_code}}


def error_response(message: str, status_code: int) -> Response:
    return json_response(error_body(message, status_code), status_code)


def sse_event(obj: Any) -> bytes:
    return b"data: " + _encoder.encode(obj) + b"\n\n"


def sse_response(events: AsyncIterator[bytes], tm: TokenizerManager,
                 states: list[ReqState]) -> StreamingResponse:
    """Stream `events`; whether they end or the client leaves, unfinished states are aborted."""
    return StreamingResponse(events, media_type="text/event-stream",
                             background=BackgroundTask(tm.abort, states))


async def wait_finished(request: Request, tm: TokenizerManager, states: list[ReqState]) -> None:
    """Wait until every state finishes; abort them and raise ClientGoneError if the client
    disconnects first, SchedulerDeadError if the scheduler dies."""
    event = states[0].event
    watcher = DisconnectWatcher(request, event)
    try:
        while True:
            raise_if_failed(states)
            if all(s.req.is_finished for s in states):
                return
            if watcher.is_gone:
                raise ClientGoneError
            await event.wait()
            event.clear()
    finally:
        watcher.cancel()
        tm.abort(states)  # a no-op for the finished ones


async def updates(states: list[ReqState]) -> AsyncIterator[None]:
    """Yield after each batch of new output for `states`, and once more when all are done.

    When the client disconnects, starlette cancels the streaming response mid-wait; its
    background task (see `sse_response`) then aborts the unfinished requests.
    """
    event = states[0].event
    while True:
        await event.wait()
        event.clear()
        raise_if_failed(states)
        yield
        if all(s.req.is_finished for s in states):
            return


def raise_if_failed(states: list[ReqState]) -> None:
    for s in states:
        if s.error is not None:
            raise SchedulerDeadError(s.error)


class DisconnectWatcher:
    """Reads the ASGI channel (the body is already consumed) until it reports a disconnect,
    then sets `event` so a waiter wakes up and sees `is_gone`."""

    def __init__(self, request: Request, event: asyncio.Event) -> None:
        self.is_gone = False
        self._event = event
        self._task = asyncio.create_task(self._run(request.receive))

    async def _run(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.is_gone = True
        self._event.set()

    def cancel(self) -> None:
        self._task.cancel()


class ApiKeyMiddleware:
    """Every HTTP path but /health needs `Authorization: Bearer <key>` (constant-time check)."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._expected = b"Bearer " + api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self._expected):
                response = error_response("missing or wrong API key", 401)
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
