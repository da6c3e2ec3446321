"""`radixrt cost`: the report over a scenario and over a request log, self-hosted rows, plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radixrt.economics.cost import CostReport, estimate_costs, format_report, prefix_sweep
from radixrt.economics.cost_cli import main
from radixrt.economics.prices import load_prices
from radixrt.economics.self_hosted import Throughput, load_bench_json, self_hosted_rows
from radixrt.economics.workload import Scenario

SMALL = ["--requests-per-day", "2000", "--days", "2", "--shared-prefix-tokens", "8000"]


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_scenario_report_has_every_provider_and_caching_saves(capsys) -> None:
    out = run_json(SMALL, capsys)
    rows = out["providers"]
    assert {r["provider"] for r in rows} == {"anthropic", "openai", "gemini"}
    assert {r["rules"] for r in rows if r["provider"] == "gemini"} == {
        "gemini implicit",
        "gemini explicit caches",
    }
    for r in rows:
        assert r["cached_usd"] < r["uncached_usd"] and r["hit_rate"] > 0.9, r
        assert r["saving_usd"] == pytest.approx(r["uncached_usd"] - r["cached_usd"])
    assert out["num_requests"] == 4000 and out["span_days"] == 2 and out["month_scale"] == 15


def test_text_report_tables(capsys) -> None:
    assert main([*SMALL, "--providers", "openai", "--models", "gpt-5.1"]) == 0
    text = capsys.readouterr().out
    assert "| gpt-5.1 | openai automatic |" in text and "anthropic" not in text
    assert "x15.00 for 30 days" in text


def test_unknown_provider_or_model_exits_2(capsys) -> None:
    for argv in (["--providers", "acme"], ["--models", "gpt-99"]):
        with pytest.raises(SystemExit) as e:
            main([*SMALL, *argv])
        assert e.value.code == 2
    assert "gpt-99" in capsys.readouterr().err


def test_self_hosted_cost_per_million_requests(capsys) -> None:
    rows = self_hosted_rows(3.6, Throughput(2.0, 0.5), 7200)
    on, off = rows
    assert on.usd_per_million_requests == pytest.approx(3.6 / 7200 * 1e6)
    assert on.gpu_hours == pytest.approx(1.0) and off.cost_usd == pytest.approx(4 * 3.6)
    argv = [*SMALL, "--gpu-hour-usd", "3.6", "--requests-per-second-cached", "2",
            "--requests-per-second-uncached", "0.5"]  # fmt: skip
    out = run_json(argv, capsys)
    assert [r["label"] for r in out["self_hosted"]] == ["radix cache on", "radix cache off"]
    assert out["self_hosted"][0]["cost_usd"] == pytest.approx(4000 / 2 / 3600 * 3.6)
    with pytest.raises(SystemExit):
        main([*SMALL, "--gpu-hour-usd", "3.6"])  # no throughput


def test_bench_json_from_shared_prefix_benchmark(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    results = [
        {"label": "radixrt, radix cache on", "req_s": 3.0, "mean_ttft_s": 0.4},
        {"label": "radixrt, radix cache off", "req_s": 1.0, "mean_ttft_s": 2.5},
        {"label": "transformers generate, batch 8", "req_s": 0.2, "mean_ttft_s": 9.0},
    ]
    path.write_text(json.dumps({"workload": {"groups": 8}, "results": results}))
    tp = load_bench_json(path)
    assert (tp.requests_per_s_cached, tp.requests_per_s_uncached) == (3.0, 1.0)
    assert (tp.ttft_s_cached, tp.ttft_s_uncached) == (0.4, 2.5)
    assert (tp.kv_dtype, tp.kv_bytes_per_token) == (None, None)  # an older benchmark's file
    path.write_text(json.dumps({"results": results[2:]}))
    with pytest.raises(ValueError, match="radix cache on/off"):
        load_bench_json(path)


def test_cost_reports_kv_bytes_at_the_pools_width(tmp_path: Path, capsys) -> None:
    """The benchmark records the pool it measured (bfloat16 where `auto` chose it); the
    report gives its bytes per token and tokens per GiB at that width."""
    path = tmp_path / "bench.json"
    on = {"label": "radixrt, radix cache on", "req_s": 3.0, "mean_ttft_s": 0.4,
          "kv_dtype": "bfloat16", "kv_bytes_per_token": 23040}  # fmt: skip
    off = {**on, "label": "radixrt, radix cache off", "req_s": 1.0}
    path.write_text(json.dumps({"results": [on, off]}))
    argv = [*SMALL, "--gpu-hour-usd", "2", "--bench-json", str(path)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "23,040 bytes per token (bfloat16 pool): 46,603 tokens per GiB" in text
    out = run_json(argv, capsys)
    assert (out["kv_dtype"], out["kv_bytes_per_token"]) == ("bfloat16", 23040)
    on["kv_bytes_per_token"] = -1
    path.write_text(json.dumps({"results": [on, off]}))
    with pytest.raises(SystemExit):
        main(argv)


def test_request_log_replay_with_radixrt_hit_rate(tmp_path: Path, capsys) -> None:
    log = tmp_path / "requests.jsonl"
    lines = []
    for i in range(6):  # a 40-block system prompt shared by all, one unique block each
        hashes = [f"sys{b}" for b in range(40)] + [f"q{i}"]
        lines.append(json.dumps({
            "time": 1796160000.0 + 30 * i, "tenant": None, "endpoint": "/v1/chat/completions",
            "prompt_tokens": 41 * 128 + 20, "cached_tokens": 0 if i == 0 else 40 * 128,
            "output_tokens": 64, "block": 128, "prefix_hashes": hashes, "pins": [],
            "ttft_s": 0.2, "e2e_s": 1.0,
        }))  # fmt: skip
    log.write_text("\n".join(lines) + "\n")
    out = run_json(["--request-log", str(log)], capsys)
    assert out["num_requests"] == 6 and out["span_days"] == pytest.approx(150 / 86400)
    assert out["radixrt_hit_rate"] == pytest.approx(5 * 40 * 128 / (6 * (41 * 128 + 20)))
    by = {(r["model"], r["rules"]): r for r in out["providers"]}
    gpt = by["gpt-5.1", "openai automatic"]
    assert gpt["bill"]["cache_read_tokens"] == 5 * 40 * 128
    claude = by["claude-sonnet-4.5", "anthropic breakpoints"]
    # the assumed breakpoint: request 2 writes the 40 shared blocks, requests 3-6 read them
    assert claude["bill"]["cache_write_tokens"] == 40 * 128
    assert claude["bill"]["cache_read_tokens"] == 4 * 40 * 128
    assert any("assumed 5m breakpoint" in n for n in claude["notes"])


def test_plot_writes_a_png(tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "cost.png"
    argv = ["--requests-per-day", "500", "--days", "1", "--plot", str(path)]
    assert main([*argv, "--providers", "gemini"]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_and_report_functions() -> None:
    book = load_prices()
    models = [book.model("openai", "gpt-5.1")]
    s = Scenario(requests_per_day=200, days=1)
    rows = estimate_costs(book, s.requests(), models, 300.0)
    report = CostReport(s.describe(), 200, s.duration_s, book.as_of, rows)
    assert "| gpt-5.1 | openai automatic |" in format_report(report)
    sweep = prefix_sweep(book, s, models, lengths=(0, 2000, 8000))
    (points,) = sweep.values()
    assert [p[0] for p in points] == [0, 2000, 8000]
    assert points[0][1] == pytest.approx(points[0][2])  # nothing to cache without a prefix
    assert points[2][2] < points[2][1]
