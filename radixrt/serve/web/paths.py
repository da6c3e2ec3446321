"""Request paths a front end that forwards requests accepts: no dot segments, raw or
percent-encoded, no encoded slashes, backslashes or encoded percents, refused with 400 before
routing; and the name patterns the router builds upstream paths from (docs/reliability.md,
"The router's paths").

An HTTP client normalises `..` when it sends (httpx does), so a path that reached a forwarding
route with a dot segment would leave it as another path on the worker (`/v1beta/models/../../
flush_cache` is the worker's `/flush_cache`). Nothing radixrt serves has a dot segment or needs
an encoded `.`, `/`, `\\` or `%`, so any such path is refused whole.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from radixrt.serve.web.responses import error_response

# Percent-encoded `.`, `/`, `\` and `%` (case-insensitive): checked on the raw request target.
_ENCODED = re.compile(rb"%(2e|2f|5c|25)", re.IGNORECASE)
# A model name (Gemini's `models/{model}`), a cache handle's id: what the router forwards.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
HANDLE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def bad_path(scope: Scope) -> str | None:
    """Why the request's path is refused, or None."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
    raw = raw.partition(b"?")[0]
    if _ENCODED.search(raw):
        return "the path has a percent-encoded '.', '/', '\\' or '%'"
    for path in (raw.decode("latin-1"), scope["path"]):
        if "\\" in path:
            return "the path has a backslash"
        if any(segment in (".", "..") for segment in path.split("/")):
            return "the path has a '.' or '..' segment"
    return None


class PathGuardMiddleware:
    """Refuses a path `bad_path` names with 400, before routing and before the key check."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (why := bad_path(scope)) is not None:
            await error_response(f"bad request path: {why}", 400)(scope, receive, send)
            return
        await self.app(scope, receive, send)
