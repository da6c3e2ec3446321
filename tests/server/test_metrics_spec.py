"""Speculative decoding's Prometheus series and dashboard figures, from the scheduler's
InfoReplyMsg: the counters as reported, acceptance rate and tokens per verifying step, and
zeros (no division by zero) when nothing was drafted."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, generate_latest

from radixrt.core.messages import InfoReplyMsg
from radixrt.serve.http.metrics_spec import SpecCollector, spec_rates


def _info(**spec: int) -> InfoReplyMsg:
    return InfoReplyMsg(1, 100, 50, 30, 20, 0, 0, 70, 30, 90, 0.4, 40, 0, **spec)


def _scrape(info: InfoReplyMsg) -> dict[str, float]:
    registry = CollectorRegistry()
    collector = SpecCollector()
    registry.register(collector)
    collector.info = info
    text = generate_latest(registry).decode()
    return {m[1]: float(m[2]) for m in re.finditer(r"^(radixrt_spec_\w+) (\S+)$", text, re.M)}


def test_series_follow_the_counters() -> None:
    info = _info(spec_drafted_tokens=40, spec_accepted_tokens=30, spec_verify_steps=10,
                 spec_emitted_tokens=38)  # fmt: skip
    got = _scrape(info)
    assert got["radixrt_spec_draft_tokens_total"] == 40
    assert got["radixrt_spec_accepted_tokens_total"] == 30
    assert got["radixrt_spec_verify_steps_total"] == 10
    assert got["radixrt_spec_emitted_tokens_total"] == 38
    assert got["radixrt_spec_acceptance_rate"] == 0.75
    assert got["radixrt_spec_tokens_per_step"] == 3.8
    assert spec_rates(info) == (0.75, 3.8)


def test_off_is_zeros() -> None:
    got = _scrape(_info())
    assert got["radixrt_spec_acceptance_rate"] == 0.0
    assert got["radixrt_spec_tokens_per_step"] == 0.0
    assert got["radixrt_spec_draft_tokens_total"] == 0.0
