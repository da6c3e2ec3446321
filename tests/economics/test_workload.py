"""Synthetic scenarios and the request-log reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radixrt.economics.workload import (
    DAY_S,
    Pin,
    Request,
    Scenario,
    log_record_to_request,
    read_request_log,
)

EXAMPLE = {
    "time": 1796160000.5, "tenant": "a", "endpoint": "/v1/messages", "prompt_tokens": 5210,
    "cached_tokens": 5120, "output_tokens": 64, "block": 128,
    "prefix_hashes": [f"h{i}" for i in range(40)],
    "pins": [{"offset": 5120, "ttl_s": 300.0, "sliding": True, "handle": False}],
    "ttft_s": 0.21, "e2e_s": 1.9,
}  # fmt: skip


def test_uniform_scenario_counts_and_spacing() -> None:
    s = Scenario(requests_per_day=100, days=2, prefixes=3, shared_prefix_tokens=2000)
    reqs = list(s.requests())
    assert len(reqs) == 200 and reqs[1].time - reqs[0].time == pytest.approx(DAY_S / 100)
    assert {r.marks for r in reqs} == {((2000, f"prefix-{p}"),) for p in range(3)}
    assert reqs[0].breakpoints == (Pin(2000, 300.0),)
    assert reqs[0].handles == (Pin(2000, 2 * DAY_S, sliding=False),)
    assert reqs[0].prompt_tokens == 2500 and reqs[0].retention == "in_memory"
    ttl = Scenario(days=1, requests_per_day=10, gemini_cache_ttl_s=600).requests()
    assert next(ttl).handles == (Pin(50_000, 600.0, sliding=True),)


def test_poisson_and_burst_arrivals() -> None:
    poisson = list(Scenario(requests_per_day=1000, days=3, arrival="poisson").requests())
    assert 2700 < len(poisson) < 3300
    assert all(a.time <= b.time for a, b in zip(poisson, poisson[1:]))
    burst = list(Scenario(requests_per_day=100, days=2, arrival="burst", burst_hours=2).requests())
    assert len(burst) == 200
    hours = {int(r.time % DAY_S // 3600) for r in burst}
    assert hours <= {9, 10}
    same = list(Scenario(requests_per_day=1000, days=1, arrival="poisson", seed=7).requests())
    assert same == list(
        Scenario(requests_per_day=1000, days=1, arrival="poisson", seed=7).requests()
    )


def test_scenario_validation() -> None:
    with pytest.raises(ValueError, match="arrival"):
        Scenario(arrival="weekly")
    with pytest.raises(ValueError, match="at least one token"):
        Scenario(shared_prefix_tokens=0, unique_tokens=0)


def test_key_at_names_prefixes_by_their_marks() -> None:
    r = Request(0.0, 1000, 0, marks=((128, "a"), (256, "b")))
    assert r.key_at(256) == "b" and r.key_at(300) == "b+300" and r.key_at(128) == "a"
    assert r.key_at(100) is None
    assert r.longest_mark_in({"a"}) == 128 and r.longest_mark_in({"zz"}) == 0


def test_log_record_anthropic_breakpoints_tenant_namespace() -> None:
    r = log_record_to_request(EXAMPLE)
    assert r.time == 1796160000.5 and r.prompt_tokens == 5210 and r.cached_tokens == 5120
    assert r.marks[0] == (128, "a:h0") and r.marks[-1] == (5120, "a:h39")
    assert r.breakpoints == (Pin(5120, 300.0, True),)
    assert r.handles is None and r.retention is None and r.ttft_s == 0.21


def test_log_record_openai_retention_and_handles() -> None:
    chat = {**EXAMPLE, "tenant": None, "endpoint": "/v1/chat/completions"}
    chat["pins"] = [{"offset": 5210, "ttl_s": 86400.0, "sliding": False, "handle": False}]
    r = log_record_to_request(chat)
    assert r.retention == "24h" and r.breakpoints is None and r.marks[0] == (128, "h0")
    chat["pins"][0]["ttl_s"] = 600.0
    assert log_record_to_request(chat).retention == "in_memory"
    native = {**EXAMPLE, "endpoint": "/generate"}
    native["pins"] = [{"offset": 4096, "ttl_s": 3600.0, "sliding": False, "handle": True}]
    r = log_record_to_request(native)
    assert r.handles == (Pin(4096, 3600.0, False),) and r.breakpoints is None


def test_read_request_log_sorts_and_names_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    later = {**EXAMPLE, "time": EXAMPLE["time"] + 10}
    path.write_text(json.dumps(later) + "\n\n" + json.dumps(EXAMPLE) + "\n")
    reqs = read_request_log(path)
    assert [r.time for r in reqs] == [EXAMPLE["time"], EXAMPLE["time"] + 10]
    path.write_text(json.dumps(EXAMPLE) + '\n{"time": 1}\n')
    with pytest.raises(ValueError, match="log.jsonl:2"):
        read_request_log(path)
