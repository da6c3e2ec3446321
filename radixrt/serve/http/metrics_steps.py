"""Prometheus histograms of the scheduler's per-step wall times, by step kind (decode,
extend, mixed, verify: core/step_times.py): `radixrt_step_forward_seconds` (in the model's
forward) and `radixrt_step_seconds` (the whole step: scheduling, forward, sampling, finish
checks). Read from the scheduler's InfoReplyMsg at each scrape (the scheduler counts them);
every kind is present, empty until a step of it runs, so a dashboard's queries find them."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import accumulate
from typing import Any

from radixrt.core.messages import InfoReplyMsg
from radixrt.core.step_times import STEP_TIME_BUCKETS

# (series, StepTimesMsg measure, help)
_FAMILIES = (
    ("radixrt_step_forward_seconds", "forward", "Per step that ran a pass: seconds in the "
     "model's forward, by step kind"),
    ("radixrt_step_seconds", "step", "Per step that ran a pass: seconds of the whole step "
     "(scheduling, forward, sampling, finish checks), by step kind"),
)  # fmt: skip
_BOUNDS = [repr(float(b)) for b in STEP_TIME_BUCKETS] + ["+Inf"]


class StepTimesCollector:
    """Set `info` before each scrape; yields the two histograms, one series per kind."""

    def __init__(self) -> None:
        self.info: InfoReplyMsg | None = None

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import HistogramMetricFamily

        if self.info is None:
            return
        for name, measure, doc in _FAMILIES:
            family = HistogramMetricFamily(name, doc, labels=["kind"])
            for row in self.info.step_times:
                if row.measure == measure:
                    cumulative = list(zip(_BOUNDS, map(float, accumulate(row.counts))))
                    family.add_metric([row.kind], cumulative, sum_value=row.sum_s)
            yield family
