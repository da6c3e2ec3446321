"""Prometheus series of speculative decoding: tokens drafted, accepted and emitted, the
acceptance rate and the tokens each verifying request step emits.

Read from the scheduler's InfoReplyMsg at each scrape (the totals are the scheduler's
counters); all zero while speculation is off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from radixrt.core.messages import InfoReplyMsg

# (series, InfoReplyMsg field, help): counters, rendered as `<series>_total`.
_COUNTERS = (
    ("radixrt_spec_draft_tokens", "spec_drafted_tokens", "Drafted tokens verified"),
    ("radixrt_spec_accepted_tokens", "spec_accepted_tokens", "Drafted tokens accepted"),
    ("radixrt_spec_verify_steps", "spec_verify_steps", "Request steps that verified a draft"),
    ("radixrt_spec_emitted_tokens", "spec_emitted_tokens",
     "Tokens emitted by request steps that verified a draft"),
)  # fmt: skip


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
