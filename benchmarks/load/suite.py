"""`python -m benchmarks suite` (`make bench`): every benchmark against every peer,
one run.

Each system (radixrt, radixrt with the cache off, llama.cpp, transformers) is started in turn
as a server and gets the same seeded workloads: the four serving datasets, a shared-prefix
sweep over the system-prompt length, the program workloads and the long-context TTFT study;
then radixrt is restarted at other page sizes for the granularity study. Results go to a JSON
lines file and the generated part of docs/benchmarks.md, with PNG plots beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.load import loadgen as serving
from benchmarks.load.clients import make_client
from benchmarks.load.datasets import DATASETS, WordSource
from benchmarks.load.metrics import RequestRecord
from benchmarks.peers import systems as peers
from benchmarks.scenarios import programs

SHARING = ("shared-prefix", "multi-turn", "agent")
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


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks suite", description=__doc__)
    p.add_argument("--systems", nargs="*", default=list(peers.SYSTEMS), choices=list(peers.SYSTEMS))
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks that it all runs")
    p.add_argument("--model-path", default=None, help="default: the bundled SmolLM2")
    p.add_argument("--gguf", default=None, help="llama.cpp's model; default: the bundled GGUF")
    p.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    p.add_argument("--out-dir", default="docs/bench", help="results.jsonl, plots, server logs")
    p.add_argument("--doc", default="docs/benchmarks.md", help="markdown to update; '' = none")
    p.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["serving", "sweep", "programs", "long-context", "granularity"],
    )
    return p


def run_suite(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every study for every system; returns all result rows (also in results.jsonl)."""
    sizes = QUICK if args.quick else Sizes()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    words = serving.load_words(args.model_path, 0).words
    gguf = Path(args.gguf) if args.gguf else _default_gguf()
    systems = [peers.SYSTEMS[n] for n in args.systems]
    if peers.LLAMA_CPP in systems and not peers.llama_cpp_available():
        print("llama.cpp skipped: llama-cpp-python is not installed (make bench-peers)")
        systems.remove(peers.LLAMA_CPP)
    rows: list[dict[str, Any]] = []
    results = out / "results.jsonl"
    results.write_text("")

    def keep(row: dict[str, Any]) -> None:
        rows.append(row)
        with results.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")

    for system in systems:
        _run_system(system, args, sizes, words, gguf, out, keep)
    if "granularity" not in args.skip and peers.RADIXRT in systems:
        for ps in sizes.page_sizes:
            system = peers.page_size_system(ps)
            _run_system(
                system, args, sizes, words, gguf, out, keep, only=("serving",), datasets=SHARING
            )
    return rows


def _run_system(
    system: peers.System,
    args: argparse.Namespace,
    sizes: Sizes,
    words: list[str],
    gguf: Path,
    out: Path,
    keep: Any,
    only: tuple[str, ...] | None = None,
    datasets: tuple[str, ...] = DATASETS,
) -> None:
    studies = [
        s
        for s in ("serving", "sweep", "programs", "long-context")
        if s not in args.skip and (only is None or s in only)
    ]
    cmd = peers.launch_command(system, peers.free_port(), args.model_path, gguf, args.threads)
    log = out / f"server-{system.name.replace(' ', '-').replace('.', '')}.log"
    print(f"=== {system.name}: {shlex.join(cmd)}", flush=True)
    extra = peers.eos_logit_bias(args.model_path) if system.kind == "llama.cpp" else {}
    if system.kind == "transformers":
        extra = {"ignore_eos": True}
    with peers.ManagedServer(cmd, log) as url:
        base = {
            "study": "serving",
            "system": system.name,
            "kind": system.kind,
            "page_size": _page_size(system),
        }
        for study in studies:
            t0 = time.perf_counter()
            for row in _STUDIES[study](system, url, sizes, words, extra, datasets):
                keep({**base, "study": study, **row})
            print(f"--- {system.name} {study}: {time.perf_counter() - t0:.1f} s", flush=True)


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


_STUDIES = {
    "serving": _serving,
    "sweep": _sweep,
    "programs": _programs,
    "long-context": _long_context,
}


def _page_size(system: peers.System) -> int | None:
    if not system.is_radixrt:
        return None
    return int(system.flags[1]) if system.flags[:1] == ("--page-size",) else 1


def _default_gguf() -> Path:
    from radixrt.model.families.loader import default_gguf_path

    return default_gguf_path()


def main(argv: list[str] | None = None) -> None:
    args = make_parser().parse_args(argv)
    t0 = time.time()
    rows = run_suite(args)
    elapsed = time.time() - t0
    from benchmarks.load import plots as bench_plots
    from benchmarks.load import report

    args_line = shlex.join(sys.argv[1:] if argv is None else argv)
    command = "python -m benchmarks suite " + args_line
    plots = bench_plots.make_plots(rows, Path(args.out_dir))
    text = report.render(
        rows,
        command=command.strip(),
        elapsed_s=elapsed,
        plots=plots,
        doc_dir=Path(args.doc).parent if args.doc else Path(args.out_dir),
    )
    if args.doc:
        report.write_section(Path(args.doc), text)
        print(f"wrote {args.doc} and {args.out_dir}/ in {elapsed / 60:.1f} min")
    else:
        print(text)


if __name__ == "__main__":
    main()
