"""Each benchmark's code path end to end at tiny sizes, on the tiny random Llama."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from benchmarks.load import shared_prefix
from benchmarks.micro import engine as engine_bench
from benchmarks.micro import engine_rows, roofline

SMALL_ROOFLINE = "--copy-mib 8 --matmul-n 128".split()
TINY_ENGINE = "--decode-prompt-len 12 --repeats 1 --retries 0".split() + SMALL_ROOFLINE


def test_roofline_measures_positive_rates() -> None:
    r = roofline.main([*SMALL_ROOFLINE, "--repeats", "2"])
    assert r.copy_gbs > 0 and r.read_gbs > 0 and r.matmul_gflops > 0
    assert r.prefill_tok_s(10**8) == pytest.approx(r.matmul_gflops * 1e9 / 2e8)
    one = r.decode_step_s(4 * 10**8, 10**8)
    assert one == pytest.approx(max(4e8 / (r.copy_gbs * 1e9), 2e8 / (r.matmul_gflops * 1e9)))
    assert r.decode_step_s(4 * 10**8, 10**8, batch_size=10**4) > one  # compute-bound at last


def test_engine_bench_matches_hf_on_tiny_model(tiny_llama_path, tmp_path, capsys) -> None:
    out = tmp_path / "engine.json"
    sizes = "--prefill-lens 16 40 --batch-sizes 1 3 --decode-steps 3".split()
    engine_bench.main(["--model-path", str(tiny_llama_path), *sizes, *TINY_ENGINE,
                       "--json", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert "| prompt tokens |" in printed and "| batch |" in printed
    data = json.loads(out.read_text())
    assert [r["prompt_len"] for r in data["prefill"]] == [16, 40]
    assert all(r["radixrt_tok_s"] > 0 and r["hf_tok_s"] > 0 for r in data["prefill"])
    assert all(r["first_token_match"] for r in data["prefill"])
    for row, batch in zip(data["decode"], [1, 3], strict=True):
        assert row["batch_size"] == batch and row["radixrt_tok_s"] > 0 and row["hf_tok_s"] > 0
        assert row["greedy_match"] == batch


def test_engine_bench_skip_hf(tiny_llama_path) -> None:
    sizes = "--prefill-lens 8 --batch-sizes 2 --decode-steps 2 --skip-hf".split()
    data = engine_bench.main(["--model-path", str(tiny_llama_path), *sizes, *TINY_ENGINE])
    assert data["prefill"][0]["hf_tok_s"] is None and data["decode"][0]["hf_tok_s"] is None


def test_disturbed_rows_are_measured_again(monkeypatch) -> None:
    monkeypatch.setattr(engine_rows, "_RETRY_WAIT_S", 0.0)
    shares = iter([0.5, 0.3, 0.05, 0.0])
    rows = []

    def measure() -> engine_rows.PrefillRow:
        rows.append(engine_rows.PrefillRow(8, 1.0, None, 0.0, None, next(shares)))
        return rows[-1]

    args = engine_bench.build_parser().parse_args(["--retries", "5", "--max-other-cpu", "0.1"])
    assert engine_rows.quietest(measure, args).other_cpu == 0.05
    assert len(rows) == 3  # stopped once quiet enough


def test_shared_prefix_bench_on_tiny_model(tiny_llama_path, tmp_path, capsys) -> None:
    out = tmp_path / "shared.json"
    sizes = "-G 2 -P 3 -S 40 -Q 4 -O 2 --hf-requests 2 --hf-batch-size 2".split()
    shared_prefix.main(["--model-path", str(tiny_llama_path), *sizes,
                        "--max-total-tokens", "1024", "--json", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert "optimal 0.606" in printed  # (6 - 2) * 40 / (6 * 44)
    assert "identical for 6/6 requests" in printed
    assert "prefix hits:" in printed
    data = json.loads(out.read_text())
    on, off, hf = data["results"]
    assert on["num_requests"] == off["num_requests"] == 6 and hf["num_requests"] == 2
    assert hf["extrapolated"] and hf["hit_rate"] is None
    assert 0 < on["hit_rate"] <= data["optimal_hit_rate"] + 1e-9
    assert off["hit_rate"] == 0
    assert all(r["req_s"] > 0 and r["mean_ttft_s"] > 0 for r in data["results"])
    # the pool's width for `radixrt cost`: the tiny model's 2 layers x 2 KV heads x 16 x 4 x 2
    assert (on["kv_dtype"], on["kv_bytes_per_token"]) == ("float32", 512)


def test_optimal_hit_rate_formula() -> None:
    w = shared_prefix.Workload(
        groups=8, per_group=16, system_len=1024, question_len=64, output_len=32
    )
    assert w.optimal_hit_rate == pytest.approx(120 * 1024 / (128 * 1088))
    prompts = shared_prefix.build_prompts(w, 49152, seed=0)
    assert len(prompts) == 128 and all(len(p) == 1088 for p in prompts)
    assert len({tuple(p[:1024]) for p in prompts}) == 8
    assert len({tuple(p) for p in prompts}) == 128


def test_engine_bench_with_two_ranks(tiny_llama_path) -> None:
    sizes = "--prefill-lens 16 --batch-sizes 2 --decode-steps 3 --tp 2".split()
    data = engine_bench.main(["--model-path", str(tiny_llama_path), *sizes, *TINY_ENGINE])
    assert data["tp_size"] == 2
    assert data["prefill"][0]["first_token_match"] and data["decode"][0]["greedy_match"] == 2


def test_dp_routing_bench_on_tiny_model(tiny_llama_path, tmp_path) -> None:
    from benchmarks.scenarios import dp_routing

    out = tmp_path / "dp.json"
    rows = dp_routing.main(
        [
            "--dp",
            "2",
            "--policies",
            "cache_aware",
            "round_robin",
            "-G",
            "2",
            "-P",
            "2",
            "-S",
            "64",
            "-Q",
            "8",
            "-O",
            "2",
            "--max-total-tokens",
            "2048",
            "--model-path",
            str(tiny_llama_path),
            "--json",
            str(out),
        ]
    )
    assert [r["policy"] for r in rows] == ["cache_aware", "round_robin"]
    for r in rows:
        assert r["requests"] == 4 and sum(r["routed_per_replica"]) == 4
        assert 0 <= r["hit_rate"] <= r["optimal_hit_rate"] + 1e-9
    assert rows[0]["hit_rate"] == pytest.approx(rows[0]["optimal_hit_rate"])
    assert json.loads(out.read_text()) == rows


def test_exact_prefill_flops_counts_layers_causal_attention_and_one_head() -> None:
    arch = SimpleNamespace(hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                           head_dim=64, intermediate_size=1536, num_hidden_layers=30,
                           vocab_size=49152)  # fmt: skip
    layer = 576 * 960 + 576 * 576 + 3 * 576 * 1536  # q/k/v, o, gate/up/down weights
    assert layer == 3538944
    for n in (1, 256):
        pairs = n * (n + 1) // 2
        expect = 30 * (2 * layer * n + 4 * 576 * pairs) + 2 * 576 * 49152
        assert engine_rows.exact_prefill_flops(arch, n) == pytest.approx(expect)
        assert engine_rows.exact_prefill_flops(arch, n, tp=3) == pytest.approx(expect / 3)


def test_kv_dtype_bench_on_tiny_model(tiny_llama_path, tmp_path) -> None:
    from benchmarks.micro import kv_dtype

    out = tmp_path / "kv.json"
    data = kv_dtype.main(["--model-path", str(tiny_llama_path), "--context", "40",
                          "--batch-sizes", "1", "3", "--steps", "2", "--rounds", "2",
                          "--json", str(out)])  # fmt: skip
    assert json.loads(out.read_text()) == data
    tokens = data["pool_tokens"]
    assert tokens["float32"] == tokens["bfloat16"]  # one size asked for: half the bytes
    assert data["pool_bytes"]["bfloat16"] * 2 == data["pool_bytes"]["float32"]
    d = 16  # the tiny model's head dim: an fp8 row is 16 bytes and a 4-byte scale
    assert data["pool_bytes"]["fp8_e4m3"] * 4 * d == data["pool_bytes"]["float32"] * (d + 4)
    assert data["pool_bytes"]["fp8_e5m2"] == data["pool_bytes"]["fp8_e4m3"]
    assert all(v > 0 for v in data["prefill_tok_s"].values())
    kinds = [(r["batch"], r["kind"]) for r in data["decode_ms_per_step"]]
    assert kinds == [(1, "own contexts"), (3, "own contexts"), (3, "shared prefix")]
    kvs = ("float32", "bfloat16", "fp8_e4m3", "fp8_e5m2")
    assert all(r[kv] > 0 for r in data["decode_ms_per_step"] for kv in kvs)


def test_perplexity_agreement_counts_tokens_before_the_first_difference() -> None:
    from benchmarks.micro.perplexity import SETTINGS, agreement

    assert agreement([[1, 2, 3, 4], [5, 6]], [[1, 2, 9, 4], [5, 6]]) == (5 / 6, 4 / 6)
    assert SETTINGS["kv-fp8-e5m2"]["kv_cache_dtype"] == "fp8_e5m2"
