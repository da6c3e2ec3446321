"""Speculative decoding's share of the dashboard's history: per recorder bucket, the finished
requests' output tokens, sampling steps, drafted and accepted tokens and their speed-ups
(tokens per step, one per request); summed over the last minute into the current rates and a
distribution over the Prometheus histogram's buckets (server/metrics_spec.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from radixrt.serve.http.metrics_spec import request_figures, tokens_per_step_buckets
from radixrt.serve.results.state import ReqOutput

MAX_SPEEDUPS = 256  # per-request speed-ups kept per bucket (the first ones; the rest only sum)


@dataclass(slots=True)
class SpecTally:
    """One bucket's finished requests while speculation is on (requests without output are
    left out: they took no step)."""

    requests: int = 0
    tokens: int = 0  # output tokens
    steps: float = 0.0  # steps that sampled for them (tokens / speed-up)
    drafted: int = 0
    accepted: int = 0
    speedups: list[float] = field(default_factory=list)

    def add(self, req: ReqOutput) -> None:
        figures = request_figures(req)
        if figures is None:
            return
        per_step = figures[0]
        self.requests += 1
        self.tokens += len(req.output_ids)
        self.steps += len(req.output_ids) / per_step
        self.drafted += req.spec_drafted
        self.accepted += req.spec_accepted
        if len(self.speedups) < MAX_SPEEDUPS:
            self.speedups.append(per_step)

    def tokens_per_step(self) -> float | None:
        return self.tokens / self.steps if self.steps else None


def spec_recent(tallies: Iterable[SpecTally], draft_tokens: int) -> dict[str, Any]:
    """The window's figures: `requests`, `acceptance_rate` (accepted / drafted tokens),
    `tokens_per_step` (output tokens / steps, over its requests), and `distribution`: per
    bucket of the histogram (`le`, its upper bound; None: above the last) how many requests'
    speed-ups fell in it (not cumulative). Rates are None without data."""
    total = SpecTally()
    for t in tallies:
        total.requests += t.requests
        total.tokens += t.tokens
        total.steps += t.steps
        total.drafted += t.drafted
        total.accepted += t.accepted
        total.speedups += t.speedups
    edges: list[float | None] = [*tokens_per_step_buckets(draft_tokens), None]
    counts = [0] * len(edges)
    for s in total.speedups:
        counts[next(i for i, e in enumerate(edges) if e is None or s <= e)] += 1
    return {
        "draft_tokens": draft_tokens,
        "requests": total.requests,
        "acceptance_rate": total.accepted / total.drafted if total.drafted else None,
        "tokens_per_step": total.tokens_per_step(),
        "distribution": [{"le": e, "requests": n} for e, n in zip(edges, counts)],
    }
