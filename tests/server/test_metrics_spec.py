"""Speculative decoding's Prometheus series and dashboard figures, from the scheduler's
InfoReplyMsg: the counters as reported, acceptance rate and tokens per verifying step, and
zeros (no division by zero) when nothing was drafted; the per-request histograms and the
recorder's last minute (present and empty while speculation is off)."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, generate_latest

from radixrt.core import FinishKind, FinishReason, SamplingParams
from radixrt.core.messages import InfoReplyMsg
from radixrt.serve.http.dashboard.recorder import DashboardRecorder
from radixrt.serve.http.metrics import Metrics
from radixrt.serve.http.metrics_spec import (
    SpecCollector,
    request_figures,
    spec_rates,
    tokens_per_step_buckets,
)
from radixrt.serve.results.state import ReqOutput


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


def test_tree_counters_are_series() -> None:
    got = _scrape(_info(spec_tree_steps=7, spec_tree_branches=19, spec_tree_side_accepts=3))
    assert got["radixrt_spec_tree_steps_total"] == 7
    assert got["radixrt_spec_tree_branches_total"] == 19
    assert got["radixrt_spec_tree_side_accepts_total"] == 3
    assert _scrape(_info())["radixrt_spec_tree_steps_total"] == 0.0  # off: present, zero


def test_prompt_end_counters_are_series() -> None:
    got = _scrape(_info(spec_prompt_end_steps=4, spec_prompt_end_accepted=21))
    assert got["radixrt_spec_prompt_end_steps_total"] == 4
    assert got["radixrt_spec_prompt_end_accepted_total"] == 21
    assert _scrape(_info())["radixrt_spec_prompt_end_accepted_total"] == 0.0


def test_off_is_zeros() -> None:
    got = _scrape(_info())
    assert got["radixrt_spec_acceptance_rate"] == 0.0
    assert got["radixrt_spec_tokens_per_step"] == 0.0
    assert got["radixrt_spec_draft_tokens_total"] == 0.0


def _req(out: int, drafted: int = 0, accepted: int = 0, steps: int = 0) -> ReqOutput:
    req = ReqOutput("r", [1, 2, 3], SamplingParams(), 0.0)
    req.output_ids = list(range(out))
    req.spec_drafted, req.spec_accepted, req.spec_steps = drafted, accepted, steps
    req.finish(FinishReason(FinishKind.LENGTH))
    return req


def _hist(metrics: Metrics) -> dict[str, float]:
    text = generate_latest(metrics.registry).decode()
    pattern = r"^(radixrt_spec_request_\w+?(?:\{le=\"[^\"]+\"\})?) (\S+)$"
    return {m[1]: float(m[2]) for m in re.finditer(pattern, text, re.M)}


def test_buckets_run_from_one_to_k_plus_one() -> None:
    assert tokens_per_step_buckets(0) == (1.0,)
    assert tokens_per_step_buckets(2) == (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0)
    assert tokens_per_step_buckets(6)[-1] == 7.0


def test_request_figures() -> None:
    assert request_figures(_req(0)) is None  # no output: no step
    assert request_figures(_req(5)) == (1.0, None)  # nothing drafted: one token per step
    assert request_figures(_req(12, drafted=10, accepted=8, steps=4)) == (3.0, 0.8)


def test_histograms_observe_finished_requests() -> None:
    metrics = Metrics(spec_draft_tokens=4)
    for req in (_req(12, drafted=10, accepted=8, steps=4), _req(5), _req(0)):
        metrics.observe_finished(req, 1.0)
    got = _hist(metrics)
    assert got["radixrt_spec_request_tokens_per_step_count"] == 2
    assert got["radixrt_spec_request_tokens_per_step_sum"] == 4.0
    assert got['radixrt_spec_request_tokens_per_step_bucket{le="1.0"}'] == 1
    assert got['radixrt_spec_request_tokens_per_step_bucket{le="2.5"}'] == 1
    assert got['radixrt_spec_request_tokens_per_step_bucket{le="3.0"}'] == 2
    assert got["radixrt_spec_request_acceptance_rate_count"] == 1
    assert got['radixrt_spec_request_acceptance_rate_bucket{le="0.7"}'] == 0
    assert got['radixrt_spec_request_acceptance_rate_bucket{le="0.8"}'] == 1


def test_histograms_are_present_and_empty_when_off() -> None:
    metrics = Metrics()  # speculation off
    metrics.observe_finished(_req(12, drafted=10, accepted=8, steps=4), 1.0)
    got = _hist(metrics)
    for name in ("radixrt_spec_request_tokens_per_step", "radixrt_spec_request_acceptance_rate"):
        assert got[f"{name}_count"] == 0 == got[f"{name}_sum"]
        assert got[f'{name}_bucket{{le="+Inf"}}'] == 0


def test_the_recorder_sums_the_last_minute() -> None:
    now = [1000.0]
    recorder = DashboardRecorder(clock=lambda: now[0], spec_draft_tokens=4)
    recorder.observe_finished(_req(12, drafted=10, accepted=8, steps=4), 1.0)
    recorder.observe_finished(_req(6, drafted=4, accepted=0, steps=6), 1.0)
    now[0] += 10
    recorder.observe_finished(_req(6), 1.0)  # drafted nothing: 6 steps
    spec = recorder.recent()["spec"]
    assert spec["requests"] == 3 and spec["draft_tokens"] == 4
    assert spec["acceptance_rate"] == 8 / 14
    assert spec["tokens_per_step"] == 24 / 16
    dist = {b["le"]: b["requests"] for b in spec["distribution"]}
    assert dist[1.0] == 2 and dist[3.0] == 1 and dist[None] == 0
    assert sum(dist.values()) == 3
    points = recorder.series()
    assert [p["spec_tokens_per_step"] for p in points] == [18 / 10, 1.0]
    now[0] += 120  # the window moved on
    assert recorder.recent()["spec"]["tokens_per_step"] is None
    off = DashboardRecorder()
    off.observe_finished(_req(12, drafted=10, accepted=8, steps=4), 1.0)
    assert off.recent()["spec"] is None and off.series()[0]["spec_tokens_per_step"] is None
