"""DashboardRecorder: the recent history the dashboard charts (hit rate, time to first token and
speculation's tokens per step over time, finished requests by finish reason), kept in the HTTP
process whether or not `--enable-metrics` is on. Every TokenizerManager feeds it as a
RequestObserver; it is written and read on the event loop's thread only."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from radixrt.serve.http.dashboard.spec_recent import SpecTally, spec_recent
from radixrt.serve.results.state import ReqOutput

BUCKET_S = 2.0  # one chart point per bucket: the page polls about this often
NUM_BUCKETS = 300  # ten minutes of history
MAX_TTFT_SAMPLES = 256  # first tokens kept per bucket (the first ones; the rest only count)
RECENT_S = 60.0  # the window of the headline figures


@dataclass(slots=True)
class _Bucket:
    start: float  # time.time(), a multiple of BUCKET_S
    requests: int = 0  # finished in this bucket
    prompt_tokens: int = 0  # of those
    cached_tokens: int = 0
    ttfts: list[float] = field(default_factory=list)  # seconds, of first tokens in this bucket
    spec: SpecTally = field(default_factory=SpecTally)  # empty while speculation is off


class DashboardRecorder:
    """Per BUCKET_S of wall time: finished requests, their prompt and cached tokens, and the
    times to first token seen, speculation's figures; finish reasons since start.
    `spec_draft_tokens`: --speculative-num-draft-tokens (0: off)."""

    def __init__(self, clock: Callable[[], float] = time.time, spec_draft_tokens: int = 0) -> None:
        self._clock = clock
        self.spec_draft_tokens = spec_draft_tokens
        self._buckets: deque[_Bucket] = deque(maxlen=NUM_BUCKETS)
        self.requests_by_finish: dict[str, int] = {}
        self.started_at = clock()

    def observe_first_token(self, seconds: float) -> None:
        bucket = self._current()
        if len(bucket.ttfts) < MAX_TTFT_SAMPLES:
            bucket.ttfts.append(seconds)

    def observe_finished(self, req: ReqOutput, seconds: float) -> None:
        bucket = self._current()
        bucket.requests += 1
        bucket.prompt_tokens += req.prompt_len
        bucket.cached_tokens += req.cached_tokens
        if self.spec_draft_tokens:
            bucket.spec.add(req)
        kind = req.finish_reason.kind.value if req.finish_reason is not None else "abort"
        self.requests_by_finish[kind] = self.requests_by_finish.get(kind, 0) + 1

    def series(self) -> list[dict[str, Any]]:
        """One point per bucket that saw anything, oldest first: `t` (its start, unix time),
        `requests`, `hit_rate` (cached / prompt tokens of its finished requests, None without
        any), `ttft_p50` and `ttft_p90` (seconds, None without a first token),
        `spec_tokens_per_step` (None without a finished request while speculation is on)."""
        return [
            {
                "t": b.start,
                "requests": b.requests,
                "hit_rate": b.cached_tokens / b.prompt_tokens if b.prompt_tokens else None,
                "ttft_p50": quantile(b.ttfts, 0.5),
                "ttft_p90": quantile(b.ttfts, 0.9),
                "spec_tokens_per_step": b.spec.tokens_per_step(),
            }
            for b in self._buckets
        ]

    def recent(self) -> dict[str, Any]:
        """The last RECENT_S seconds: requests, hit rate, TTFT quantiles (None: no data) and
        `spec` (spec_recent.py; None while speculation is off)."""
        since = self._clock() - RECENT_S
        buckets = [b for b in self._buckets if b.start + BUCKET_S > since]
        prompt = sum(b.prompt_tokens for b in buckets)
        ttfts = [t for b in buckets for t in b.ttfts]
        return {
            "window_s": RECENT_S,
            "requests": sum(b.requests for b in buckets),
            "hit_rate": sum(b.cached_tokens for b in buckets) / prompt if prompt else None,
            "ttft_p50": quantile(ttfts, 0.5),
            "ttft_p90": quantile(ttfts, 0.9),
            "ttft_p99": quantile(ttfts, 0.99),
            "spec": spec_recent((b.spec for b in buckets), self.spec_draft_tokens)
            if self.spec_draft_tokens
            else None,
        }

    def _current(self) -> _Bucket:
        start = math.floor(self._clock() / BUCKET_S) * BUCKET_S
        if not self._buckets or self._buckets[-1].start != start:
            self._buckets.append(_Bucket(start))
        return self._buckets[-1]


def quantile(values: list[float], q: float) -> float | None:
    """The nearest-rank q-quantile of `values`; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
