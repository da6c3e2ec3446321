"""HTTP plumbing shared by the native and OpenAI endpoints: JSON and SSE responses, errors,
waiting for requests while watching for a client that goes away, who a request belongs to,
and the API-key and body-size checks."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from radixrt.server.tokenizer_manager import ReqState, SchedulerDeadError, TokenizerManager

_encoder = msgspec.json.Encoder()
SSE_DONE = b"data: [DONE]\n\n"
SESSION_HEADER = "x-session-id"  # a sticky-session key for routing across replicas
# On a 503 that refused a request before any of it reached a scheduler: safe to retry it
# elsewhere (the router does; any other 503 may have started work).
NOT_STARTED_HEADER = "x-radixrt-not-started"
_ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
                409: "ConflictError", 413: "RequestTooLargeError", 500: "InternalServerError",
                503: "ServiceUnavailableError"}


class ClientGoneError(Exception):
    """The client disconnected before its requests finished (they have been aborted)."""


class RequestFailedError(Exception):
    """A request ended in an error of its own (FinishReason.status_code); answered with it."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


class BodyTooLargeError(Exception):
    """The request body is over --max-request-bytes; answered with 413."""


def caller_of(request: Request) -> str:
    """Whose request this is, for rid scoping and aborts: the digest of the Authorization
    header when there is one (a tenant's key), else the client's address."""
    auth = request.headers.get("authorization")
    if auth:
        return "key:" + hashlib.sha256(auth.encode()).hexdigest()[:32]
    return "addr:" + (request.client.host if request.client is not None else "")


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


def sse_response(events: AsyncIterator[bytes]) -> StreamingResponse:
    """Stream `events`, an async generator whose `finally` aborts its unfinished requests.
    The generator is closed however the response ends (finished, client gone, cancelled), so
    that `finally` always runs, on any Starlette version."""
    return _ClosingStreamingResponse(events, media_type="text/event-stream")


class _ClosingStreamingResponse(StreamingResponse):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


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
    """SchedulerDeadError if the scheduler died, RequestFailedError if a state ended in an
    error of its own."""
    for s in states:
        if s.error is not None:
            raise SchedulerDeadError(s.error)
        reason = s.req.finish_reason
        if reason is not None and reason.status_code is not None:
            raise RequestFailedError(reason.message or "the request failed", reason.status_code)


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


class BodyLimitMiddleware:
    """Refuses request bodies over `max_bytes` with 413: at once from Content-Length, else
    while reading (BodyTooLargeError from `receive`, mapped to 413 by the app)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await body_too_large(self.max_bytes)(scope, receive, send)
            return
        seen = 0

        async def counting_receive() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLargeError
            return message

        await self.app(scope, counting_receive, send)


def body_too_large(max_bytes: int) -> Response:
    message = f"the request body is larger than {max_bytes} bytes (--max-request-bytes)"
    return error_response(message, 413)
