"""Exceptions of the frontend language: what a backend refused, and which primitive failed."""

from __future__ import annotations


class BackendError(RuntimeError):
    """A backend refused or failed a request; `status` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class NotSupportedError(BackendError):
    """The backend cannot do what a primitive needs (scoring, regex, json_schema, ...)."""


class ProgramError(RuntimeError):
    """A primitive of a program failed; the message names it and carries the backend's."""

    def __init__(self, primitive: str, cause: BaseException) -> None:
        reason = cause.message if isinstance(cause, BackendError) else str(cause)
        super().__init__(f"{primitive} failed: {reason}")
        self.primitive = primitive
        self.cause = cause


class OutputParseError(ValueError):
    """A typed `gen` (dtype=int/float/...) produced text that does not parse as that type."""
