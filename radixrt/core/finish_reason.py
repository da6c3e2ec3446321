"""FinishReason: why a request ended (stop, length, abort), with the HTTP status of an error."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class FinishKind(str, enum.Enum):
    STOP = "stop"  # EOS, a stop token id or a stop string
    LENGTH = "length"  # max_new_tokens or the context length
    ABORT = "abort"  # aborted by the client or rejected


@dataclass(frozen=True, slots=True)
class FinishReason:
    kind: FinishKind
    matched: int | str | None = None  # the stop token id or stop string that matched
    message: str | None = None
    # Set when the request ended in an error (always kind ABORT): 400 when the request
    # itself cannot run, 500 for a fault of the runtime that only this request met. The
    # server answers with this status; an abort asked for by a client has none.
    status_code: int | None = None

    @classmethod
    def error(cls, message: str, status_code: int = 500) -> FinishReason:
        return cls(FinishKind.ABORT, message=message, status_code=status_code)

    @property
    def is_error(self) -> bool:
        return self.status_code is not None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.kind.value}
        if self.matched is not None:
            d["matched"] = self.matched
        if self.message is not None:
            d["message"] = self.message
        if self.status_code is not None:
            d["status_code"] = self.status_code
        if self.kind == FinishKind.LENGTH:
            d["length"] = None
        return {k: v for k, v in d.items() if v is not None or k == "type"}
