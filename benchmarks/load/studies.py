"""The suite's studies: workload sizes (the defaults and --quick's), a seed per workload, and one
function per study that runs it against one started server and returns its result rows."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from benchmarks.load import loadgen as serving
from benchmarks.load.clients import make_client
from benchmarks.load.datasets import WordSource
from benchmarks.load.metrics import RequestRecord
from benchmarks.peers import systems as peers
from benchmarks.scenarios import programs

# A seed per workload, so no two workloads share words (llama.cpp's cache cannot be flushed).
SEEDS = {
    "random": 1,
    "shared-prefix": 2,
    "multi-turn": 3,
    "agent": 4,
    "long-context": 5,
    "programs": 6,
    "sweep": 10,
}


@dataclass(frozen=True)
class Sizes:
    """Workload sizes; the defaults are meant to finish within 20 minutes on 2 quiet cores."""

    random: tuple[int, int, int] = (24, 256, 16)  # prompts, input, output
    shared_prefix: tuple[int, int, int, int, int] = (4, 6, 512, 32, 16)  # G, P, S, Q, O
    multi_turn: tuple[int, int, int, int] = (4, 4, 64, 24)  # C, T, turn, output
    agent: tuple[int, int, int, int] = (4, 4, 1024, 16)  # agents, steps, tools, output
    sweep_system_lens: tuple[int, ...] = (128, 1024)  # besides shared_prefix's S
    num_programs: int = 6
    long_doc_len: int = 7800
    page_sizes: tuple[int, ...] = (16, 32)  # besides 1


QUICK = Sizes(
    random=(3, 16, 4),
    shared_prefix=(2, 2, 32, 8, 4),
    multi_turn=(2, 2, 16, 4),
    agent=(2, 2, 48, 4),
    sweep_system_lens=(16,),
    num_programs=1,
    long_doc_len=128,
    page_sizes=(16,),
)


def _serving(
    system: peers.System,
    url: str,
    sizes: Sizes,
    words: list[str],
    extra: dict[str, Any],
    datasets: tuple[str, ...],
) -> list[dict[str, Any]]:
    flags = {
        "random": ["--num-prompts", "--random-input-len", "--random-output-len"],
        "shared-prefix": [
            "--num-groups",
            "--prompts-per-group",
            "--system-len",
            "--question-len",
            "--sp-output-len",
        ],
        "multi-turn": ["--num-conversations", "--num-turns", "--turn-len", "--mt-output-len"],
        "agent": ["--num-agents", "--num-steps", "--tools-len", "--agent-output-len"],
    }
    rows = []
    for ds in datasets:
        values = getattr(sizes, ds.replace("-", "_"))
        argv = [x for f, v in zip(flags[ds], values) for x in (f, str(v))]
        rows.append(_serve(system, url, ds, argv, SEEDS[ds], words, extra))
    return rows


def _sweep(
    system: peers.System,
    url: str,
    sizes: Sizes,
    words: list[str],
    extra: dict[str, Any],
    datasets: tuple[str, ...],
) -> list[dict[str, Any]]:
    g, p, _, q, o = sizes.shared_prefix
    rows = []
    for i, s in enumerate(sizes.sweep_system_lens):
        argv = [
            "--num-groups",
            str(g),
            "--prompts-per-group",
            str(p),
            "--system-len",
            str(s),
            "--question-len",
            str(q),
            "--sp-output-len",
            str(o),
        ]
        rows.append(_serve(system, url, "shared-prefix", argv, SEEDS["sweep"] + i, words, extra))
    return rows


def _serve(
    system: peers.System,
    url: str,
    ds: str,
    argv: list[str],
    seed: int,
    words: list[str],
    extra: dict[str, Any],
) -> dict[str, Any]:
    ns = serving.make_parser().parse_args(
        [
            "--backend",
            system.backend,
            "--base-url",
            url,
            "--dataset",
            ds,
            "--seed",
            str(seed),
            "--extra-request-body",
            json.dumps(extra),
            "--label",
            system.name,
            *(["--flush-cache"] if system.is_radixrt else []),
            *argv,
        ]
    )
    summary = asyncio.run(serving.run_benchmark(ns, WordSource(words, seed)))
    hit = summary["hit_rate"]
    print(
        f"{system.name:>20} {ds:<14} {summary['completed']}/{summary['num_requests']} req, "
        f"{summary['request_throughput']:.3f} req/s, {summary['output_throughput']:.1f} out "
        f"tok/s, mean TTFT {(summary['mean_ttft_s'] or 0) * 1000:.0f} ms"
        + (
            f", hit rate {hit:.3f} (optimal {summary['optimal_hit_rate']:.3f})"
            if hit is not None
            else ""
        )
        + (f"; {summary['short_outputs']} SHORT outputs" if summary["short_outputs"] else ""),
        flush=True,
    )
    return {**summary, "args": argv}


def _programs(
    system: peers.System,
    url: str,
    sizes: Sizes,
    words: list[str],
    extra: dict[str, Any],
    datasets: tuple[str, ...],
) -> list[dict[str, Any]]:
    ns = programs.make_parser().parse_args(
        [
            "--backend",
            system.backend,
            "--base-url",
            url,
            "--label",
            system.name,
            "--num-programs",
            str(sizes.num_programs),
            *(["--flush-cache"] if system.is_radixrt else []),
        ]
    )
    return programs.run_programs(ns, WordSource(words, SEEDS["programs"]))


def _long_context(
    system: peers.System,
    url: str,
    sizes: Sizes,
    words: list[str],
    extra: dict[str, Any],
    datasets: tuple[str, ...],
) -> list[dict[str, Any]]:
    return [asyncio.run(long_context_ttft(system, url, sizes.long_doc_len, words, extra))]


async def long_context_ttft(
    system: peers.System, url: str, doc_len: int, words: list[str], extra: dict[str, Any]
) -> dict[str, Any]:
    """TTFT of a document + question, cold, then again with another question (cached)."""
    w = WordSource(words, SEEDS["long-context"])
    doc = w.text(doc_len)
    async with httpx.AsyncClient(timeout=httpx.Timeout(3600.0, connect=30.0)) as http:
        client = await make_client(system.backend, http, url, extra)
        if system.is_radixrt:
            await client.flush_cache()
        recs = []
        for k in range(2):
            rec = RequestRecord(0, k, time.perf_counter())
            await client.send(doc + " question:" + w.text(16), 1, rec)
            recs.append(rec)
    cold, warm = recs
    row = {
        "doc_len": doc_len,
        "prompt_tokens": warm.prompt_tokens,
        "cold_ttft_s": cold.ttft,
        "cached_ttft_s": warm.ttft,
        "cached_tokens": warm.cached_tokens,
        "error": cold.error or warm.error,
    }
    print(
        f"{system.name:>20} long context {warm.prompt_tokens} tokens: TTFT cold "
        f"{(cold.ttft or 0) * 1000:.0f} ms, cached {(warm.ttft or 0) * 1000:.0f} ms",
        flush=True,
    )
    return row


STUDIES = {  # a study's name -> the function that runs it on one server
    "serving": _serving,
    "sweep": _sweep,
    "programs": _programs,
    "long-context": _long_context,
}
