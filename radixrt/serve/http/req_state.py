"""The HTTP side's nouns for a request in flight: its state (`ReqState`, one per sample) and the
errors that refuse or fail it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from radixrt.serve.results.delta import DeltaCursor, OutputDelta
from radixrt.serve.results.detokenizer import IncrementalDetokenizer
from radixrt.serve.results.result import build_result
from radixrt.serve.results.state import ReqOutput


class SchedulerDeadError(RuntimeError):
    """The scheduler process is gone; the server answers 503 until it exits."""


class RefusedError(RuntimeError):
    """Refused before anything was sent to a scheduler: a client (or router) may retry."""


class QueueFullError(RefusedError):
    """More than max_queued_requests would be waiting."""


class SchedulerUnavailableError(RefusedError, SchedulerDeadError):
    """The scheduler was already gone when the request arrived."""


GroupKey = tuple[str, str]  # (caller, the id the client knows the request by)


@dataclass(slots=True, eq=False)
class ReqState:
    """One scheduled request (one sample of one prompt). `event` is shared by all requests of
    one HTTP call; `out.rid` is the scheduler's id, `visible_id` the client's."""

    out: ReqOutput
    detok: IncrementalDetokenizer
    event: asyncio.Event
    group: GroupKey  # the client's name for the prompt this sample belongs to
    visible_id: str  # meta_info.id: the group id, with "-i" for sample i when n > 1
    error: str | None = None  # the scheduler died
    cursor: DeltaCursor = field(init=False)  # what the HTTP call has taken of the output

    def __post_init__(self) -> None:
        self.cursor = DeltaCursor(self.out, self.detok)

    def take_delta(self) -> OutputDelta | None:
        """What is new since the last take (DeltaCursor.take)."""
        return self.cursor.take()

    def take_text_delta(self) -> OutputDelta | None:
        """What is new once its text is (DeltaCursor.take_text)."""
        return self.cursor.take_text()

    def result(self) -> dict[str, Any]:
        """{text, output_ids, meta_info} as of now (the Engine's shape)."""
        if self.error is not None:
            raise SchedulerDeadError(self.error)
        result = build_result(self.out, self.detok)
        result["meta_info"]["id"] = self.visible_id
        return result
