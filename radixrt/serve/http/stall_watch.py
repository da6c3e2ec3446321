"""StallWatch: tells a wedged scheduler from a busy one by its loop's heartbeat
(radixrt/scheduler/heartbeat.py), on the HTTP process's event loop.

The loop beats every iteration, so silence longer than `timeout_s`
(ServerConfig.scheduler_stall_timeout_s) means it is stuck: stopped by a signal, blocked in a
read, or in a step far slower than any should be. While it is, `reason` says so (/health
answers 503 with it, new requests are refused), and every `period_s` the watch hands it to
`on_stall`, which fails the work waiting on that scheduler. The first beat after a stall
clears it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

logger = logging.getLogger("radixrt")


class StallWatch:
    """The heartbeat `last_beat()` (time.monotonic(), 0.0 before the first) against a bound."""

    def __init__(self, last_beat: Callable[[], float], timeout_s: float) -> None:
        self._last_beat = last_beat
        self.timeout_s = timeout_s
        self.period_s = min(1.0, timeout_s / 4)
        self._armed_at = time.monotonic()  # no beat yet counts from here
        self._stalled_at: float | None = None  # when a stall was first seen; None: none

    @property
    def age_s(self) -> float:
        """Seconds since the scheduler loop last ran an iteration."""
        return time.monotonic() - max(self._last_beat(), self._armed_at)

    @property
    def reason(self) -> str | None:
        """Why the scheduler counts as wedged now; None while its heartbeat is fresh."""
        age = self.age_s
        if age <= self.timeout_s:
            if self._stalled_at is not None:
                logger.warning("the scheduler loop runs again after a stall of %.1f s",
                               time.monotonic() - self._stalled_at)  # fmt: skip
                self._stalled_at = None
            return None
        if self._stalled_at is None:
            self._stalled_at = time.monotonic()
            logger.error("the scheduler loop has not run for %.1f s "
                         "(--scheduler-stall-timeout-s %g): failing what waits on it; /health "
                         "answers 503 until it runs again", age, self.timeout_s)  # fmt: skip
        return (
            f"the scheduler has not made progress for {age:.0f} s (more than "
            f"--scheduler-stall-timeout-s {self.timeout_s:g}): it is stopped or wedged"
        )

    async def run(self, on_stall: Callable[[str], None]) -> None:
        """Every `period_s`, hand the reason to `on_stall` while the scheduler is stalled."""
        while True:
            await asyncio.sleep(self.period_s)
            reason = self.reason
            if reason is not None:
                on_stall(reason)
