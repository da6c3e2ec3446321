"""Per-step wall times on /metrics (core/step_times.py, serve/http/metrics_steps.py): a step's
kind from its rows, the scheduler's counts, their merge over --dp replicas, the histograms as
rendered (cumulative buckets, every kind present), and on a tiny-model server
(test_dashboard.py runs `check_server_counts_every_pass` on its own) one observation per
forward pass with the scheduler's own totals as sums."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from radixrt.core.messages import InfoReplyMsg
from radixrt.core.step_times import (
    STEP_KINDS,
    STEP_TIME_BUCKETS,
    StepTimes,
    merge_step_times,
    step_kind,
)
from radixrt.serve.http.metrics_steps import StepTimesCollector

NAMES = ("radixrt_step_forward_seconds", "radixrt_step_seconds")


def _row(extend_len: int, kv_len: int, draft: int = 0) -> Any:
    return SimpleNamespace(extend_len=extend_len, kv_len=kv_len, draft_ids=[7] * draft)


def test_step_kind() -> None:
    assert step_kind([_row(1, 5), _row(1, 9)]) == "decode"
    assert step_kind([_row(12, 0), _row(3, 40)]) == "extend"  # a fresh prompt, a chunk
    assert step_kind([_row(1, 0)]) == "extend"  # a one-token prompt: nothing cached before
    assert step_kind([_row(12, 0), _row(1, 9)]) == "mixed"
    assert step_kind([_row(5, 9, draft=4), _row(1, 9)]) == "verify"


def test_counts_merge_and_render() -> None:
    times = StepTimes()
    times.observe("decode", 0.004, 0.005)  # on a bound: counted in that bucket
    times.observe("decode", 0.02, 30.0)  # past the last bound: +Inf only
    times.observe("extend", 0.3, 0.4)
    rows = merge_step_times([times.rows(), times.rows()])  # two replicas, the same figures
    info = InfoReplyMsg(1, 100, 50, 30, 20, 0, 0, 70, 30, 90, 0.4, 40, 0, step_times=rows)
    registry = CollectorRegistry()
    collector = StepTimesCollector()
    registry.register(collector)
    collector.info = info
    text = generate_latest(registry).decode()

    def series(name: str, kind: str, le: str | None = None) -> float:
        labels = f'kind="{kind}"' + (f',le="{le}"' if le else "")
        match = re.search(rf"^{name}{{{re.escape(labels)}}} (\S+)$", text, re.M)
        assert match, f"{name} {labels} not rendered"
        return float(match[1])

    step, forward = "radixrt_step_seconds", "radixrt_step_forward_seconds"
    assert series(f"{step}_count", "decode") == 4
    assert series(f"{step}_bucket", "decode", "0.005") == 2  # cumulative: the on-bound one
    assert series(f"{step}_bucket", "decode", "10.0") == 2
    assert series(f"{step}_bucket", "decode", "+Inf") == 4
    assert series(f"{step}_sum", "decode") == pytest.approx(2 * 30.005)
    assert series(f"{forward}_bucket", "decode", "0.025") == 4
    assert series(f"{forward}_bucket", "decode", "0.01") == 2
    assert series(f"{forward}_sum", "extend") == pytest.approx(0.6)
    for kind in STEP_KINDS:  # present before any step of that kind ran
        for name in NAMES:
            assert series(f"{name}_bucket", kind, "+Inf") == series(f"{name}_count", kind)
    assert series(f"{step}_count", "verify") == 0 and series(f"{step}_count", "mixed") == 0
    assert len(STEP_TIME_BUCKETS) + 1 == len(rows[0].counts)


def _total(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}{{kind=\"\w+\"}} (\S+)$", text, re.M))


def check_server_counts_every_pass(server: Any) -> None:
    """On a tiny-model server with --enable-metrics (test_dashboard.py's, already started):
    one observation per forward pass, of the right kinds, summing to the scheduler's totals."""
    before = server.get("/metrics").text
    for name in NAMES:  # no speculation: its kind present and empty
        assert re.search(rf'^{name}_bucket{{kind="verify",le="\+Inf"}} 0\.0$', before, re.M)
    body = {"text": "one two three four five", "sampling_params": {"max_new_tokens": 6,
                                                                   "temperature": 0}}  # fmt: skip
    r = server.post("/generate", json=body)
    assert r.status_code == 200, r.text
    server.wait_idle_and_whole()
    text = server.get("/metrics").text
    info = server.get("/get_server_info").json()
    decode = re.search(r'^radixrt_step_seconds_count{kind="decode"} (\S+)$', text, re.M)
    extend = re.search(r'^radixrt_step_seconds_count{kind="extend"} (\S+)$', text, re.M)
    assert decode and float(decode[1]) >= 5 and extend and float(extend[1]) >= 1
    assert _total(text, "radixrt_step_seconds_count") == info["forward_passes"]
    assert _total(text, "radixrt_step_forward_seconds_count") == info["forward_passes"]
    assert _total(text, "radixrt_step_seconds_sum") == pytest.approx(info["step_time_s"])
    assert _total(text, "radixrt_step_forward_seconds_sum") == pytest.approx(info["forward_time_s"])
