"""How the native app answers the exceptions its handlers raise: each kind of failure its
status code and an `{"error": {"message": ...}}` body, or the body of the API dialect whose
paths the request is on (`add_error_dialect`: Anthropic's and Gemini's error shapes)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

from radixrt.grammar.base import GrammarBusyError
from radixrt.serve.http.cache_handles import HandleNotFoundError, HandleRefusedError
from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.scheduler_queries import SchedulerQueryError
from radixrt.serve.http.tenancy import TooManyRequestsError
from radixrt.serve.http.tokenizer_manager import RefusedError, SchedulerDeadError
from radixrt.serve.http.wait import ClientGoneError, RequestFailedError
from radixrt.serve.web.middleware import (
    NOT_STARTED_HEADER,
    BodyTooLargeError,
    ForbiddenError,
    body_too_large,
)
from radixrt.serve.web.responses import error_response

logger = logging.getLogger("radixrt")


# Exceptions answered with their message and a fixed status. Starlette answers an exception
# with the handler of the nearest class in its MRO, so subclasses of ValueError registered
# here or below keep their own.
_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (BadRequestError, 400),
    (ForbiddenError, 403),
    (HandleNotFoundError, 404),
    (HandleRefusedError, 409),
    (TooManyRequestsError, 429),
    (SchedulerDeadError, 503),
    (SchedulerQueryError, 500),
    (ValueError, 400),
)


ErrorRenderer = Callable[[str, int], Response]  # (message, status) -> the response


def add_error_dialect(app: FastAPI, path_prefix: str, render: ErrorRenderer) -> None:
    """Answer errors on paths starting with `path_prefix` with `render` instead."""
    app.state.error_dialects = [*getattr(app.state, "error_dialects", []), (path_prefix, render)]


def respond(request: Request, message: str, status: int) -> Response:
    """The error response for `request`'s path: its dialect's shape, else the native one."""
    path = request.url.path
    for prefix, render in getattr(request.app.state, "error_dialects", ()):
        if path.startswith(prefix):
            return render(message, status)
    return error_response(message, status)


def add_error_handlers(app: FastAPI) -> None:
    for cls, status in _STATUS:
        app.add_exception_handler(cls, _with_status(status))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: Exception) -> Response:
        """Routing's own errors (no such path: 404, wrong method: 405) in the path's shape."""
        assert isinstance(exc, StarletteHTTPException)
        detail = (
            exc.detail
            if exc.status_code not in (404, 405)
            else (f"{request.method} {request.url.path}: {exc.detail}")
        )
        response = respond(request, detail, exc.status_code)
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(ClientGoneError)
    async def client_gone(request: Request, exc: Exception) -> Response:
        return Response(status_code=499)  # nobody reads it; its requests were aborted

    @app.exception_handler(BodyTooLargeError)
    async def too_large(request: Request, exc: Exception) -> Response:
        return body_too_large(request.app.state.max_request_bytes)

    @app.exception_handler(RequestFailedError)
    async def failed(request: Request, exc: Exception) -> Response:
        return respond(request, str(exc), exc.status_code)  # type: ignore[attr-defined]

    @app.exception_handler(GrammarBusyError)
    @app.exception_handler(RefusedError)
    async def refused(request: Request, exc: Exception) -> Response:
        response = respond(request, str(exc), 503)
        response.headers[NOT_STARTED_HEADER] = "1"
        return response

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> Response:
        logger.exception("unhandled error in %s", request.url.path)
        return respond(request, f"internal error: {type(exc).__name__}", 500)


def _with_status(status: int) -> Any:
    async def handler(request: Request, exc: Exception) -> Response:
        return respond(request, str(exc), status)

    return handler
