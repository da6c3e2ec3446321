"""Prometheus series of the lower KV tiers (radixrt/cache/tiers/), one label value per tier.

Read from the scheduler's InfoReplyMsg at each scrape (a custom collector: the totals are kept
by the tiers, not counted here); nothing is rendered when no lower tier is configured. The
per-request split of cached tokens by tier is counted as requests finish (`Metrics`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from radixrt.core.messages import TierInfoMsg

# (series, TierInfoMsg field, help): gauges, then counters (rendered as `<series>_total`).
_GAUGES = (
    ("radixrt_kv_tier_blocks", "blocks", "KV blocks a lower tier holds"),
    ("radixrt_kv_tier_tokens", "tokens", "Tokens of KV a lower tier holds"),
    ("radixrt_kv_tier_bytes", "bytes", "Bytes a lower tier holds (files: with headers)"),
    ("radixrt_kv_tier_capacity_bytes", "capacity_bytes", "A lower tier's bound in bytes"),
)
_COUNTERS = (
    ("radixrt_kv_tier_stored_blocks", "stored_blocks", "Blocks spilled or written through"),
    ("radixrt_kv_tier_dropped_blocks", "dropped_blocks", "Blocks a tier's LRU pushed out"),
    ("radixrt_kv_tier_hit_tokens", "hit_tokens", "Tokens loaded back to the device pool"),
    ("radixrt_kv_tier_loaded_blocks", "loaded_blocks", "Blocks loaded back to the device pool"),
    ("radixrt_kv_tier_load_seconds", "load_s", "Seconds spent loading blocks back"),
    ("radixrt_kv_tier_corrupt_blocks", "corrupt_blocks", "Blocks that failed their checks"),
    ("radixrt_kv_tier_write_errors", "write_errors", "Blocks that could not be stored"),
)


class TierCollector:
    """Set `tiers` before each scrape; yields one family per figure with a `tier` label."""

    def __init__(self) -> None:
        self.tiers: list[TierInfoMsg] = []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        if not self.tiers:
            return
        families: list[tuple[Any, str]] = [
            (GaugeMetricFamily(name, doc, labels=["tier"]), field) for name, field, doc in _GAUGES
        ]
        families += [
            (CounterMetricFamily(name, doc, labels=["tier"]), field)
            for name, field, doc in _COUNTERS
        ]
        for family, field in families:
            for t in self.tiers:
                family.add_metric([t.name], float(getattr(t, field)))
            yield family
