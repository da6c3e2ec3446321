"""One HTTP call answered by the app itself, without a socket: the whole middleware stack (the
key check, the body bound, the error handlers) runs as for a client's call.

The call carries its creator's headers (so its key, tenant and role) and client address. Its
ASGI channel gives the body once, then reports a disconnect when `gone` is set: the serving
pipeline then aborts what the call submitted, as for a client that went away."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from starlette.types import ASGIApp, Message

# Headers of the creating call that are not carried: its body's framing and the connection's.
_NOT_CARRIED = frozenset(
    (b"content-length", b"content-type", b"transfer-encoding", b"expect", b"connection",
     b"accept-encoding", b"host")
)  # fmt: skip

Headers = list[tuple[bytes, bytes]]


def carried_headers(raw: Sequence[tuple[bytes, bytes]]) -> Headers:
    """The creating call's headers a later in-process call repeats (its key among them)."""
    return [(k, v) for k, v in raw if k.lower() not in _NOT_CARRIED]


async def call_app(
    app: ASGIApp,
    path: str,
    body: bytes,
    headers: Headers,
    client: tuple[str, int] | None,
    gone: asyncio.Event,
) -> tuple[int, dict[str, str], bytes]:
    """POST `body` (JSON) to `path` of `app`: (status, response headers, response body)."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            *headers,
            (b"host", b"localhost"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": client,
        "server": ("127.0.0.1", 0),
        "state": {},
    }
    sent_body = False

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    status = 500
    out_headers: dict[str, str] = {}
    chunks: list[bytes] = []

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            out_headers.update(
                (k.decode("latin-1").lower(), v.decode("latin-1"))
                for k, v in message.get("headers", ())
            )
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, out_headers, b"".join(chunks)
