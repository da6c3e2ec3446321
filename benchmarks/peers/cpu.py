"""`python -m benchmarks cpu_peers` (`make bench-peers`): radixrt against the CPU
engines a user would pick instead, on the same machine, in one run.

Peers, each at its best: vLLM's CPU build (its own OpenAI server, prefix caching on, both
cores, run in bfloat16 and in float32, the faster per workload being the reference: bfloat16
where the CPU has AMX tiles, float32 often elsewhere; `--vllm-dtype` runs one), llama.cpp's own
`llama-server` (continuous batching over `--parallel` slots, on the GGUF the default model
ships), transformers (`generate`, one request at a time: it has no batching server of its own).
radixrt runs with its defaults (`--dtype auto`: bfloat16 weights where the CPU has
avx512_bf16, float32 elsewhere), in float32, in bfloat16 weights and with `--quantization
int8`. Every system is started fresh for every workload, gets one warm-up request that is not
timed, then the same seeded requests through the same load generator (streamed
/v1/completions, greedy, EOS ignored so that every request produces its full output).
Workloads:

- chat: 32 requests over 4 interleaved ~530-token system prompts, 8 clients, 32 output tokens;
- unique: 16 unrelated ~330-token prompts, 16 clients, 64 output tokens;
- one-prompt: 16 requests sharing one ~530-token system prompt, 16 clients, 32 output tokens;
- single: 4 requests of 64 tokens one after another, 128 output tokens (single-stream decode).

The report names the CPU and its ISA flags and prints, per workload and system, requests/s,
output tokens/s, median TTFT and per-stream TPOT, and output tokens per request (a system that
stops early cannot look faster), with radixrt's ratios to vLLM. `--rounds N` runs everything N
times, the systems' order reversed every other round, and reports medians and the ratios'
range: the machine's speed drifts within the hour, and one run's ratio can be off by 20%.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import time
from pathlib import Path
from typing import Any

from benchmarks.load import loadgen
from benchmarks.peers import systems as peers
from benchmarks.peers.cpu_commands import RADIXRT_RUNS, Peer, available, make_peers
from benchmarks.peers.cpu_report import format_report

PEERS_DIR = Path(".peers")
# (dataset, loadgen size flags, clients)
WORKLOADS: dict[str, tuple[str, list[str], int]] = {
    "chat": (
        "shared-prefix",
        ["--num-groups", "4", "--prompts-per-group", "8", "--system-len", "530"]
        + ["--question-len", "24", "--sp-output-len", "32"],
        8,
    ),
    "unique": (
        "random",
        ["--num-prompts", "16", "--random-input-len", "330", "--random-output-len", "64"],
        16,
    ),
    "one-prompt": (
        "shared-prefix",
        ["--num-groups", "1", "--prompts-per-group", "16", "--system-len", "530"]
        + ["--question-len", "24", "--sp-output-len", "32"],
        16,
    ),
    # one stream at a time: its TPOT is single-stream decode ms/token
    "single": (
        "random",
        ["--num-prompts", "4", "--random-input-len", "64", "--random-output-len", "128"],
        1,
    ),
}
QUICK = {
    name: (ds, [x if not x.isdigit() else str(max(2, int(x) // 8)) for x in flags], 2)
    for name, (ds, flags, _) in WORKLOADS.items()
}


def cpu_description() -> dict[str, Any]:
    from radixrt.model.cpu import build as cpu_build

    flags = set(cpu_build.cpu_flags().split())
    isa = sorted(f for f in flags if f.startswith("avx") or f in ("fma", "f16c", "amx_tile"))
    return {
        "cpu": cpu_build.cpu_model(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "isa_flags": isa,
        "radixrt_isa": cpu_build.requested_isa(),  # $RADIXRT_CPU_ISA where set
    }


def run_one(peer: Peer, workload: str, spec: tuple, args: argparse.Namespace, rnd: int = 0) -> dict:
    dataset, flags, clients = spec
    port = peers.free_port()
    cmd = peer.cmd(port)
    suffix = f"-r{rnd}" if rnd else ""
    log = args.out_dir / f"server-{peer.name.replace(' ', '-')}-{workload}{suffix}.log"
    print(f"=== {workload} / {peer.name}: {shlex.join(cmd)}", flush=True)
    with peers.ManagedServer(cmd, log, peer.env) as url:
        ns = loadgen.make_parser().parse_args(
            [
                "--backend", peer.backend, "--base-url", url, "--dataset", dataset,
                "--seed", "7", "--max-concurrency", str(clients), "--warmup", "1",
                "--extra-request-body", json.dumps(peer.extra), "--label", peer.name,
                "--no-progress", *(["--flush-cache"] if peer.flush else []), *flags,
            ]
        )  # fmt: skip
        summary = asyncio.run(loadgen.run_benchmark(ns))
    summary.update({"system": peer.name, "workload": workload})
    return summary


def _timed_run(
    peer: Peer, workload: str, spec: tuple, args: argparse.Namespace, rnd: int
) -> dict | None:
    t0 = time.perf_counter()
    try:
        r = run_one(peer, workload, spec, args, rnd)
    except RuntimeError as e:  # a peer that fails to start is reported, not fatal
        print(f"{peer.name} failed on {workload}: {e}", flush=True)
        return None
    print(
        f"{workload} / {peer.name}: {r['request_throughput']:.2f} req/s, "
        f"{r['output_throughput']:.1f} out tok/s, TTFT median "
        f"{r.get('median_ttft_s') or 0:.2f} s ({time.perf_counter() - t0:.0f} s)",
        flush=True,
    )
    return r


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks cpu_peers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    names = [*RADIXRT_RUNS, "vllm-cpu", "llama-server", "transformers"]
    p.add_argument("--systems", nargs="+", default=names, choices=names)
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks that it all runs")
    p.add_argument("--model-path", default=None, help="float folder; default: the bundled SmolLM2")
    p.add_argument(
        "--gguf", type=Path, default=None, help="llama-server's model (default: bundled)"
    )
    p.add_argument("--vllm-python", type=Path, default=PEERS_DIR / "vllm" / "bin" / "python")
    p.add_argument(
        "--vllm-dtype",
        choices=["both", "bfloat16", "float32"],
        default="both",
        help="both (the default): vLLM in each dtype, the faster per workload is the reference",
    )
    p.add_argument(
        "--llama-server", type=Path, default=PEERS_DIR / "llama" / "bin" / "llama-cpp-server"
    )
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--slots", type=int, default=16, help="llama-server's parallel slots")
    p.add_argument(
        "--radixrt-args", default="", help="more flags for radixrt's servers, one string"
    )
    p.add_argument("--rounds", type=int, default=1, help="runs of everything; medians reported")
    p.add_argument("--out-dir", type=Path, default=Path("docs/bench/cpu-peers"))
    args = p.parse_args(argv)
    if args.gguf is None:
        from radixrt.model.families.loader import default_gguf_path

        args.gguf = default_gguf_path()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    cpu = cpu_description()
    cpu["vllm_dtype"] = args.vllm_dtype
    print(json.dumps(cpu), flush=True)
    systems = make_peers(args)
    for name, peer in list(systems.items()):
        if (why := available(peer)) is not None:
            print(f"{name} skipped: {why}", flush=True)
            del systems[name]
    rows: list[dict] = []
    specs = QUICK if args.quick else WORKLOADS
    for rnd in range(args.rounds):
        order = list(systems.values())[:: -1 if rnd % 2 else 1]  # drift falls on both
        for workload in args.workloads:
            for peer in order:
                if (row := _timed_run(peer, workload, specs[workload], args, rnd)) is not None:
                    rows.append({**row, "round": rnd})
    report = format_report(rows, cpu)
    print(report)
    (args.out_dir / "results.json").write_text(json.dumps({"cpu": cpu, "rows": rows}, indent=1))
    (args.out_dir / "report.md").write_text(report + "\n")
    return rows


if __name__ == "__main__":
    main()
