"""SchedulerStats, the scheduler's counters since start, and `guarded`, which turns a fault of
one request's own into that request's error finish instead of a failed step."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from radixrt.core import FinishReason, Req

logger = logging.getLogger("radixrt")


@dataclass(slots=True)
class SchedulerStats:
    """Counters since start: cache hit rate = cached_tokens / prompt_tokens."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    forward_passes: int = 0
    retractions: int = 0
    input_logprob_rows: int = 0  # prompt positions whose logprobs were computed
    # Speculative decoding: draft tokens verified, and those the model agreed with.
    spec_drafted_tokens: int = 0
    spec_accepted_tokens: int = 0

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def guarded(req: Req, what: str, fn: Callable[..., None], *args: Any) -> None:
    """Run fn(*args), a step of `req`'s own; if it raises, finish `req` with a 500 error
    (logged with its traceback) instead of failing the whole step."""
    try:
        fn(*args)
    except Exception as e:
        logger.exception("request %s failed in %s", req.rid, what)
        req.finish(FinishReason.error(f"internal error in {what}: {type(e).__name__}: {e}"))
