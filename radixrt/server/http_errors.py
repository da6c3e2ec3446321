"""How the native app answers the exceptions its handlers raise: each kind of failure its
status code and an `{"error": {"message": ...}}` body."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.grammar.base import GrammarBusyError
from radixrt.server.http_common import RequestFailedError
from radixrt.server.protocol import BadRequestError
from radixrt.server.tenancy import TooManyRequestsError
from radixrt.server.tokenizer_manager import RefusedError, SchedulerDeadError
from radixrt.web.middleware import (
    NOT_STARTED_HEADER,
    BodyTooLargeError,
    ForbiddenError,
    body_too_large,
)
from radixrt.web.responses import error_response

logger = logging.getLogger("radixrt")


# Exceptions answered with their message and a fixed status. Starlette answers an exception
# with the handler of the nearest class in its MRO, so subclasses of ValueError registered
# here or below keep their own.
_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (BadRequestError, 400),
    (ForbiddenError, 403),
    (TooManyRequestsError, 429),
    (SchedulerDeadError, 503),
    (ValueError, 400),
)


def add_error_handlers(app: FastAPI) -> None:
    for cls, status in _STATUS:
        app.add_exception_handler(cls, _with_status(status))

    @app.exception_handler(BodyTooLargeError)
    async def too_large(request: Request, exc: Exception) -> Response:
        return body_too_large(request.app.state.max_request_bytes)

    @app.exception_handler(RequestFailedError)
    async def failed(request: Request, exc: Exception) -> Response:
        return error_response(str(exc), exc.status_code)  # type: ignore[attr-defined]

    @app.exception_handler(GrammarBusyError)
    @app.exception_handler(RefusedError)
    async def refused(request: Request, exc: Exception) -> Response:
        response = error_response(str(exc), 503)
        response.headers[NOT_STARTED_HEADER] = "1"
        return response

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> Response:
        logger.exception("unhandled error in %s", request.url.path)
        return error_response(f"internal error: {type(exc).__name__}", 500)


def _with_status(status: int) -> Any:
    async def handler(request: Request, exc: Exception) -> Response:
        return error_response(str(exc), status)

    return handler
