"""Prometheus series of speculative decoding: tokens drafted, accepted and emitted, draft
trees verified (their branches, and those accepted off the first branch), drafts verified in
the pass that ends a prompt (those steps, their accepted tokens), the acceptance
rate and the tokens each verifying request step emits, read from the scheduler's
InfoReplyMsg at each scrape (the totals are the scheduler's counters); and per finished
request (its ReqOutput, as for the latency histograms) histograms of its speed-up in tokens
per step and of its acceptance rate. While speculation is off every series is present and
zero (no observation, counters at 0), so a dashboard's queries find them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from radixrt.core.messages import InfoReplyMsg
from radixrt.serve.results.state import ReqOutput

ACCEPTANCE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

# (series, InfoReplyMsg field, help): counters, rendered as `<series>_total`.
_COUNTERS = (
    ("radixrt_spec_draft_tokens", "spec_drafted_tokens", "Drafted tokens verified"),
    ("radixrt_spec_accepted_tokens", "spec_accepted_tokens", "Drafted tokens accepted"),
    ("radixrt_spec_verify_steps", "spec_verify_steps", "Request steps that verified a draft"),
    ("radixrt_spec_emitted_tokens", "spec_emitted_tokens",
     "Tokens emitted by request steps that verified a draft"),
    ("radixrt_spec_tree_steps", "spec_tree_steps", "Verifications of a branched draft tree"),
    ("radixrt_spec_tree_branches", "spec_tree_branches",
     "Leaves (branches) of the branched draft trees verified"),
    ("radixrt_spec_tree_side_accepts", "spec_tree_side_accepts",
     "Branched tree verifications whose accepted path left the first branch"),
    ("radixrt_spec_prompt_end_steps", "spec_prompt_end_steps",
     "Request steps that verified a draft in the pass ending their prompt"),
    ("radixrt_spec_prompt_end_accepted", "spec_prompt_end_accepted",
     "Drafted tokens accepted in the pass ending their prompt"),
)  # fmt: skip


def tokens_per_step_buckets(draft_tokens: int) -> tuple[float, ...]:
    """Upper bounds from 1 (no draft accepted) to draft_tokens + 1 (every step all accepted):
    quarters up to 2, halves above (forced grammar tokens can pass the last: +Inf)."""
    top = draft_tokens + 1
    edges = {1.0, 1.25, 1.5, 1.75} | {h / 2 for h in range(4, 2 * top + 1)}
    return tuple(sorted(e for e in edges if e <= top))


def request_figures(req: ReqOutput) -> tuple[float, float | None] | None:
    """(tokens per step, accepted / drafted) of a finished request while speculation is on:
    one token per step and no rate when nothing was drafted for it; None without output."""
    if not req.output_ids:
        return None
    per_step = req.spec_tokens_per_step()
    if per_step is None:
        return 1.0, None
    return per_step, req.spec_accepted / req.spec_drafted


def spec_rates(info: InfoReplyMsg) -> tuple[float, float]:
    """(accepted / drafted tokens, tokens emitted per verifying request step) since start;
    0.0 where nothing was drafted."""
    drafted, steps = info.spec_drafted_tokens, info.spec_verify_steps
    return (
        info.spec_accepted_tokens / drafted if drafted else 0.0,
        info.spec_emitted_tokens / steps if steps else 0.0,
    )


class SpecCollector:
    """Set `info` before each scrape; yields the counters and the two rates."""

    def __init__(self) -> None:
        self.info: InfoReplyMsg | None = None

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        info = self.info
        if info is None:
            return
        for name, field, doc in _COUNTERS:
            yield CounterMetricFamily(name, doc, value=float(getattr(info, field)))
        acceptance, per_step = spec_rates(info)
        yield GaugeMetricFamily(
            "radixrt_spec_acceptance_rate", "Drafted tokens accepted / drafted, since start",
            value=acceptance,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "radixrt_spec_tokens_per_step",
            "Tokens emitted per request step that verified a draft, since start",
            value=per_step,
        )


class SpecRequestHistograms:
    """The per-request histograms on `registry`; `draft_tokens` 0 (speculation off): they
    stay empty."""

    def __init__(self, registry: Any, draft_tokens: int) -> None:
        from prometheus_client import Histogram

        self.on = draft_tokens > 0
        self.tokens_per_step = Histogram(
            "radixrt_spec_request_tokens_per_step",
            "Per finished request: output tokens per step that sampled for it (its speed-up)",
            buckets=tokens_per_step_buckets(draft_tokens),
            registry=registry,
        )
        self.acceptance = Histogram(
            "radixrt_spec_request_acceptance_rate",
            "Per finished request drafted for: its accepted / drafted tokens",
            buckets=ACCEPTANCE_BUCKETS,
            registry=registry,
        )

    def observe(self, req: ReqOutput) -> None:
        figures = request_figures(req) if self.on else None
        if figures is None:
            return
        per_step, acceptance = figures
        self.tokens_per_step.observe(per_step)
        if acceptance is not None:
            self.acceptance.observe(acceptance)
