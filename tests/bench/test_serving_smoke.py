"""Serving, program and suite benchmarks end to end against real servers on the tiny model."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import httpx
import pytest

from benchmarks.load import loadgen as serving
from benchmarks.load import report, suite
from benchmarks.load.datasets import DATASETS, WordSource
from benchmarks.peers import systems as peers
from benchmarks.scenarios import programs

WORDS = [f"w{i}" for i in range(300)]
TINY = {
    "random": "--num-prompts 3 --random-input-len 12 --random-output-len 3",
    "shared-prefix": "--num-groups 2 --prompts-per-group 2 --system-len 40 --question-len 4 "
    "--sp-output-len 3",
    "multi-turn": "--num-conversations 2 --num-turns 2 --turn-len 8 --mt-output-len 3",
    "agent": "--num-agents 2 --num-steps 2 --tools-len 40 --agent-output-len 3",
}


def _pool_whole(url: str) -> None:
    info = httpx.get(url + "/get_server_info", timeout=30).json()
    assert info["num_running_reqs"] == 0 and info["num_queued_reqs"] == 0
    total = info["free_tokens"] + info["evictable_tokens"] + info["protected_tokens"]
    assert total == info["max_total_tokens"], info


@pytest.fixture(scope="module")
def tiny_chat_path(
    tiny_llama_path: Path, smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The tiny model plus SmolLM2's chat template (the language asks every model for one)."""
    path = tmp_path_factory.mktemp("tiny_chat") / "model"
    shutil.copytree(tiny_llama_path, path)
    shutil.copy(smollm2_path / "chat_template.jinja", path / "chat_template.jinja")
    return path


@pytest.fixture(scope="module")
def radixrt_url(tiny_chat_path: Path, tmp_path_factory: pytest.TempPathFactory):
    cmd = peers.launch_command(
        peers.RADIXRT, peers.free_port(), str(tiny_chat_path), Path("unused.gguf"), 1
    ) + ["--max-total-tokens", "4096"]
    with peers.ManagedServer(cmd, tmp_path_factory.mktemp("srv") / "server.log") as url:
        yield url
        _pool_whole(url)


@pytest.mark.parametrize("dataset", DATASETS)
def test_serving_each_dataset(radixrt_url: str, dataset: str, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    args = serving.make_parser().parse_args(
        [
            "--base-url",
            radixrt_url,
            "--dataset",
            dataset,
            "--flush-cache",
            "--no-progress",
            "--output-file",
            str(out),
            *TINY[dataset].split(),
        ]
    )
    s = asyncio.run(serving.run_benchmark(args, WordSource(WORDS, 0)))
    assert s["failed"] == 0 and s["completed"] == s["num_requests"] > 0
    assert s["mean_ttft_s"] > 0 and s["output_tokens"] == 3 * s["completed"]
    assert s["flushed"] is True and s["hit_rate"] is not None
    if dataset != "random":
        assert s["hit_rate"] > 0 and s["optimal_hit_rate"] > 0
    assert out.read_text().count("\n") == 1
    _pool_whole(radixrt_url)


def test_openai_backend_reports_usage(radixrt_url: str) -> None:
    args = serving.make_parser().parse_args(
        [
            "--backend",
            "openai",
            "--base-url",
            radixrt_url + "/v1",
            "--dataset",
            "multi-turn",
            "--no-progress",
            "--extra-request-body",
            '{"ignore_eos": true}',
            *TINY["multi-turn"].split(),
        ]
    )
    s = asyncio.run(serving.run_benchmark(args, WordSource(WORDS, 1)))
    assert s["failed"] == 0 and s["output_tokens"] == 3 * 4 and s["cached_tokens"] > 0
    assert set(s["ttft_by_turn_s"]) == {0, 1}
    _pool_whole(radixrt_url)


def test_programs_run_or_skip(
    radixrt_url: str, tiny_chat_path: Path, capsys: pytest.CaptureFixture
) -> None:
    args = programs.make_parser().parse_args(
        ["--base-url", radixrt_url, "--num-programs", "1", "--parallel", "2", "--flush-cache"]
    )
    rows = programs.run_programs(args, serving.load_words(str(tiny_chat_path), 0))
    assert len(rows) == 7
    for r in rows:
        if r["workload"] == "json-extraction" and r.get("skipped"):
            assert "skipped" in capsys.readouterr().out
            continue
        assert r["completed"] == 1 and r["programs_per_s"] > 0, r.get("error")
    _pool_whole(radixrt_url)


def test_transformers_peer(tiny_chat_path: Path, tmp_path: Path) -> None:
    cmd = peers.launch_command(
        peers.TRANSFORMERS, peers.free_port(), str(tiny_chat_path), Path("unused.gguf"), 1
    )
    with peers.ManagedServer(cmd, tmp_path / "hf.log") as url:
        args = serving.make_parser().parse_args(
            [
                "--backend",
                "openai",
                "--base-url",
                url,
                "--dataset",
                "random",
                "--no-progress",
                "--extra-request-body",
                '{"ignore_eos": true}',
                *TINY["random"].split(),
            ]
        )
        s = asyncio.run(serving.run_benchmark(args, WordSource(WORDS, 0)))
        assert s["failed"] == 0 and s["output_tokens"] == 9 and s["hit_rate"] == 0.0
        rows = programs.run_programs(
            programs.make_parser().parse_args(
                [
                    "--backend",
                    "openai",
                    "--base-url",
                    url,
                    "--num-programs",
                    "1",
                    "--workloads",
                    "few-shot",
                    "react-agent",
                    "json-extraction",
                ]
            ),
            serving.load_words(str(tiny_chat_path), 0),
        )
        assert [r["workload"] for r in rows] == ["few-shot", "react-agent"]
        assert all(r["completed"] == 1 for r in rows)


def test_suite_writes_its_section(tiny_llama_path: Path, tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nhand-written\n")
    argv = [
        "--quick",
        "--systems",
        "radixrt",
        "--model-path",
        str(tiny_llama_path),
        "--out-dir",
        str(tmp_path / "bench"),
        "--doc",
        str(doc),
        "--skip",
        "programs",
        "granularity",
    ]
    suite.main(argv)
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nhand-written\n")
    assert report.BEGIN in text and report.END in text
    for heading in (
        "### Targets",
        "### Serving: `agent`",
        "### Long-context TTFT",
        "### Throughput vs shared-prefix length",
        "### TTFT by turn",
    ):
        assert heading in text
    assert (tmp_path / "bench" / "shared_prefix_sweep.png").stat().st_size > 0
    report.write_section(doc, "again")
    again = doc.read_text()
    assert again.count(report.BEGIN) == 1 and "again" in again and "### Targets" not in again
