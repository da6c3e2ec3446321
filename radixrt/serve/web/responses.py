"""JSON, error and server-sent-event responses in the shapes radixrt's clients read (the
OpenAI client reads `error.message`), and the Prometheus text content type."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

_encoder = msgspec.json.Encoder()
SSE_DONE = b"data: [DONE]\n\n"
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    413: "RequestTooLargeError",
    415: "UnsupportedMediaTypeError",
    421: "MisdirectedRequestError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


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


def sse_response(
    events: AsyncIterator[bytes], media_type: str = "text/event-stream"
) -> StreamingResponse:
    """Stream `events`, an async generator; it is closed however the response ends
    (finished, client gone, cancelled), so its `finally` always runs, on any Starlette
    version (the server's serving pipeline aborts its requests there)."""
    return _ClosingStreamingResponse(events, media_type=media_type)


class _ClosingStreamingResponse(StreamingResponse):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
