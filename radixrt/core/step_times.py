"""Per-step wall times by step kind, as Prometheus-style histogram counts: the scheduler
counts each step that ran a pass (`StepTimes`), InfoReplyMsg carries the counts
(`StepTimesMsg`), and /metrics renders them (serve/http/metrics_steps.py)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from radixrt.core.req import Req

# What a pass computed: every row a one-token decode ("decode"), none ("extend": prefill
# chunks and finished requests' tails), both ("mixed"), or any row a draft to verify.
STEP_KINDS = ("decode", "extend", "mixed", "verify")
# In the model's forward, and the whole step (scheduling, forward, sampling, finish checks).
STEP_MEASURES = ("forward", "step")
# Upper bounds in seconds: a tiny model's decode on a GPU (sub-ms) to a long CPU prefill.
STEP_TIME_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class StepTimesMsg(msgspec.Struct):
    """One histogram: `counts[i]` steps took at most STEP_TIME_BUCKETS[i] seconds and more
    than the bound before it; the last count is above every bound (+Inf)."""

    kind: str
    measure: str
    counts: list[int]  # len(STEP_TIME_BUCKETS) + 1, not cumulative
    sum_s: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)


class StepTimes:
    """The scheduler's histograms since start, one per (kind, measure); owned by its
    SchedulerStats, written by the scheduler thread only."""

    def __init__(self) -> None:
        self._rows = {(k, m): _empty(k, m) for k in STEP_KINDS for m in STEP_MEASURES}

    def observe(self, kind: str, forward_s: float, step_s: float) -> None:
        """Count one step of `kind` (one of STEP_KINDS) that spent these seconds."""
        for measure, seconds in (("forward", forward_s), ("step", step_s)):
            row = self._rows[(kind, measure)]
            row.counts[bisect_left(STEP_TIME_BUCKETS, seconds)] += 1
            row.sum_s += seconds

    def rows(self) -> list[StepTimesMsg]:
        """Copies of every histogram, empty ones included (a dashboard's queries find them)."""
        rows = self._rows.values()
        return [StepTimesMsg(r.kind, r.measure, list(r.counts), r.sum_s) for r in rows]


def step_kind(reqs: Sequence[Req]) -> str:
    """The STEP_KINDS name of a pass over `reqs` (each computing its `extend_len` tokens): a
    row decodes when it computes one token after a cached one (core/req.py Batch)."""
    if any(r.draft_ids for r in reqs):
        return "verify"
    decoding = sum(1 for r in reqs if r.extend_len == 1 and r.kv_len > 0)
    return "decode" if decoding == len(reqs) else "extend" if not decoding else "mixed"


def merge_step_times(per_replica: list[list[StepTimesMsg]]) -> list[StepTimesMsg]:
    """One histogram per (kind, measure) over several schedulers' (--dp replicas): summed."""
    out: dict[tuple[str, str], StepTimesMsg] = {}
    for rows in per_replica:
        for r in rows:
            have = out.setdefault((r.kind, r.measure), _empty(r.kind, r.measure))
            have.counts = [a + b for a, b in zip(have.counts, r.counts, strict=True)]
            have.sum_s += r.sum_s
    return list(out.values())


def _empty(kind: str, measure: str) -> StepTimesMsg:
    return StepTimesMsg(kind, measure, [0] * (len(STEP_TIME_BUCKETS) + 1))
