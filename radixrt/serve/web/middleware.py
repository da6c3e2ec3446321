"""ASGI middleware every radixrt front end uses: the API-key check and the body-size bound;
who a request is (its identity: tenant and role) and whom it belongs to (its caller), for
rid scoping."""

from __future__ import annotations

import hashlib
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from radixrt.serve.web.keys import (
    OPEN,
    ROLE_HEADER,
    TENANT_HEADER,
    Identity,
    KeyFileError,
    KeyRing,
    KeyStore,
    service_identity,
)
from radixrt.serve.web.responses import error_response

SESSION_HEADER = "x-session-id"  # a sticky-session key for routing across replicas
# On a 503 that refused a request before any of it reached a scheduler: safe to retry it
# elsewhere (the router does; any other 503 may have started work).
NOT_STARTED_HEADER = "x-radixrt-not-started"
# Served without a key: the health check, and the dashboard's page (static, nothing secret in
# it; its data, /dashboard/data, needs an admin key like any other path).
_OPEN = {"/health": None, "/dashboard": "GET"}  # path -> the one method open (None: all)


class BodyTooLargeError(Exception):
    """The request body is over --max-request-bytes; answered with 413."""


def identity_of(request: Request) -> Identity:
    """Who sent `request`: set by AuthMiddleware; OPEN when the server has no keys."""
    return getattr(request.state, "identity", OPEN)


def caller_of(request: Request) -> str:
    """Whose request this is, for rid scoping and aborts: the tenant when keys have tenants,
    else the digest of the key the request carries when there is one, else the client's
    address."""
    tenant_caller = identity_of(request).caller
    if tenant_caller is not None:
        return tenant_caller
    key = _given_key(request.headers.raw)
    if key:
        return "key:" + hashlib.sha256(key).hexdigest()[:32]
    return "addr:" + (request.client.host if request.client is not None else "")


class ForbiddenError(Exception):
    """A known key without the role an endpoint needs; answered with 403."""


def require_admin(request: Request, what: str) -> None:
    if not identity_of(request).is_admin:
        raise ForbiddenError(f"{what} needs an admin key")


class AuthMiddleware:
    """Every HTTP path but /health and GET /dashboard (`_OPEN`) needs a key of `keys` (digests
    compared in constant time): `Authorization: Bearer <key>`, or `x-api-key` (Anthropic's
    clients) or `x-goog-api-key` (Gemini's); the key's Identity goes to `request.state`. The
    service key's Identity is the one its tenant and role headers name (keys.py)."""

    def __init__(self, app: ASGIApp, keys: KeyStore) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _is_open(scope):
            identity = None
            key = _given_key(scope["headers"])
            if key is not None:
                token = key.decode("utf-8", "replace")
                if self.keys.is_service(token):
                    try:
                        identity = _acting_for(scope["headers"])
                    except KeyFileError as e:
                        await error_response(str(e), 400)(scope, receive, send)
                        return
                else:
                    identity = self.keys.ring.lookup(token)
            if identity is None:
                response = error_response("missing or wrong API key", 401)
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
            scope.setdefault("state", {})["identity"] = identity
        await self.app(scope, receive, send)


def _acting_for(headers: list[tuple[bytes, bytes]]) -> Identity:
    """The identity a service call names (only ever read after its key matched)."""
    named: dict[bytes, str] = {}
    for k, v in headers:
        if k in _SERVICE_HEADERS:
            named.setdefault(k, v.decode("utf-8", "replace"))
    return service_identity(named.get(_SERVICE_HEADERS[0]), named.get(_SERVICE_HEADERS[1]))


_SERVICE_HEADERS = (TENANT_HEADER.encode(), ROLE_HEADER.encode())


def _is_open(scope: Scope) -> bool:
    path = scope["path"]
    return path in _OPEN and _OPEN[path] in (None, scope["method"])


def _given_key(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The key a request carries: the bearer token, else x-api-key, else x-goog-api-key."""
    found = dict.fromkeys(_KEY_HEADERS, b"")
    for k, v in headers:
        if k in found and not found[k]:
            found[k] = v
    bearer = found[b"authorization"]
    if bearer:
        return bearer[7:] if bearer.startswith(b"Bearer ") else None
    return found[b"x-api-key"] or found[b"x-goog-api-key"] or None


_KEY_HEADERS = (b"authorization", b"x-api-key", b"x-goog-api-key")


class ApiKeyMiddleware(AuthMiddleware):
    """One key, an admin of no tenant (`--api-key`)."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        super().__init__(app, KeyStore(KeyRing.single(api_key)))


class BodyLimitMiddleware:
    """Refuses request bodies over `max_bytes` with 413: at once from Content-Length, else
    while reading (BodyTooLargeError from `receive`: the app may answer it itself, else this
    does while no answer has started). The server, the router and the Ray ingress use it."""

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

        started = False

        async def watching_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
        except BodyTooLargeError:
            if started:
                raise
            await body_too_large(self.max_bytes)(scope, receive, send)


def body_too_large(max_bytes: int) -> Response:
    message = f"the request body is larger than {max_bytes} bytes (--max-request-bytes)"
    return error_response(message, 413)
