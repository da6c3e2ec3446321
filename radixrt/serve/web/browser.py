"""What a web page may do to a radixrt front end: one check (`BrowserGuard.refusal`) the
server, the router and the Ray ingress all run before anything else.

- `Host` must be localhost, `*.localhost`, an IP address or a name of `--allowed-hosts`: a
  page that re-points its own DNS name at 127.0.0.1 (DNS rebinding) sends that name, so it
  gets 421 and never reads an answer. A request without Host (not a browser) passes.
- An `Origin` other than the request's own host (`--allowed-origins` adds some, answered with
  CORS headers and preflights) gets 403: a page's fetch or form POST always carries Origin.
- A body must be sent as JSON (`application/json` or `application/*+json`, any parameters):
  else 415. A page can POST `text/plain` or a form without a CORS preflight; never JSON.
  One exception, `multipart/form-data` to POST /v1/files (OpenAI's file upload): a form
  there from a page without Origin (old browsers) cannot carry a key, so a server with keys
  refuses it; one without keys stores a file the page cannot read back (no CORS answer)
  and that only a JSON call (a batch) would use.
Clients that are not browsers (curl, the OpenAI / Anthropic / Gemini SDKs) send no Origin, an
IP or localhost Host and JSON, and pass unchanged; the dashboard's page fetches same-origin.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from radixrt.core.config.browser import BrowserConfig
from radixrt.serve.web.responses import error_response

_LOCAL = ("localhost",)
_METHODS = "GET, POST, PATCH, DELETE"
_DEFAULT_PORTS = {"http": 80, "https": 443}


class BrowserGuard:
    """The rule, over the front end's BrowserConfig."""

    def __init__(self, config: BrowserConfig) -> None:
        self.hosts = set(config.host_list)
        self.origins = set(config.origin_list)

    def refusal(self, scope: Scope) -> Response | None:
        """The answer to a request that breaks the rule, or None when it passes (its CORS
        preflight from an allowed origin is answered here too)."""
        headers = _headers(scope)
        host = headers.get("host")
        if host is not None and not self._host_ok(host):
            return error_response(
                f"Host {host!r} is not a name of this server: add it to --allowed-hosts", 421
            )
        origin = headers.get("origin")
        if origin is not None and not _same_origin(origin, host):
            if not self._origin_allowed(origin):
                return error_response(
                    f"requests from pages of {origin!r} are refused: add the origin to "
                    "--allowed-origins to let them in", 403
                )  # fmt: skip
            if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
                return self._preflight(origin, headers)
        content_type = headers.get("content-type")
        if (
            _has_body(headers)
            and not _is_json(content_type)
            and not _is_upload(scope, content_type)
        ):
            given = headers.get("content-type", "none")
            return error_response(
                f"request bodies are JSON: send Content-Type: application/json (got {given})",
                415,
            )
        return None

    def cors_headers(self, scope: Scope) -> list[tuple[bytes, bytes]]:
        """Headers that let an allowed foreign origin's page read the answer."""
        origin = _headers(scope).get("origin")
        if origin is None or not self._origin_allowed(origin):
            return []
        return [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]

    def _host_ok(self, host: str) -> bool:
        name = _hostname(host)
        if name is None:
            return False
        if name in _LOCAL or name.endswith(".localhost") or "*" in self.hosts:
            return True
        try:
            ipaddress.ip_address(name)
            return True  # a rebinding page has a name; an IP Host is a client that means it
        except ValueError:
            pass
        return name in self.hosts or any(
            h.startswith("*.") and name.endswith(h[1:]) for h in self.hosts
        )

    def _origin_allowed(self, origin: str) -> bool:
        return "*" in self.origins or origin.lower().rstrip("/") in self.origins

    def _preflight(self, origin: str, headers: dict[str, str]) -> Response:
        asked = headers.get("access-control-request-headers", "")
        return Response(
            status_code=204,
            headers={
                "access-control-allow-origin": origin,
                "access-control-allow-methods": _METHODS,
                "access-control-allow-headers": asked,
                "access-control-max-age": "600",
                "vary": "Origin",
            },
        )


class BrowserGuardMiddleware:
    """BrowserGuard as ASGI middleware: the outermost layer of the server and the router."""

    def __init__(self, app: ASGIApp, config: BrowserConfig) -> None:
        self.app = app
        self.guard = BrowserGuard(config)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self.guard.refusal(scope)
        if refused is not None:
            await refused(scope, receive, send)
            return
        extra = self.guard.cors_headers(scope)
        if not extra:
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_cors)


def _is_upload(scope: Scope, content_type: str | None) -> bool:
    """A file upload: multipart/form-data to POST /v1/files."""
    return (
        scope["method"] == "POST"
        and scope["path"] == "/v1/files"
        and (content_type or "").lower().startswith("multipart/form-data")
    )


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers, first of each name."""
    out: dict[str, str] = {}
    for k, v in scope.get("headers", ()):
        out.setdefault(k.decode("latin-1").lower(), v.decode("latin-1"))
    return out


def _hostname(host: str) -> str | None:
    """The name in a Host value (`name`, `name:port`, `[v6]:port`), lowercased; None if it
    is not one."""
    host = host.strip().lower()
    if host.startswith("["):
        name, sep, rest = host[1:].partition("]")
        return name if sep and (not rest or rest[1:].isdigit() and rest[0] == ":") else None
    name, _, port = host.partition(":")
    if port and not port.isdigit() or not name:
        return None
    return name.rstrip(".")


def _same_origin(origin: str, host: str | None) -> bool:
    """Whether `origin` is the page the request's own Host serves (the dashboard's fetches);
    a Host without a port matches its origin's default port (a TLS proxy in front)."""
    if host is None:
        return False
    try:
        parts = urlsplit(origin)
        origin_port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return False
    if parts.scheme not in _DEFAULT_PORTS or parts.hostname is None:
        return False
    tail = host.rpartition("]")[2] if host.startswith("[") else host.partition(":")[2]
    tail = tail.lstrip(":")
    host_port = int(tail) if tail.isdigit() else _DEFAULT_PORTS[parts.scheme]
    return parts.hostname == _hostname(host) and origin_port == host_port


def _has_body(headers: dict[str, str]) -> bool:
    length = headers.get("content-length")
    return "transfer-encoding" in headers or (length is not None and length.strip() != "0")


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return False
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )
