"""`python -m benchmarks programs`: the SGLang paper's program workloads against one
server.

Runs each workload's programs `--parallel` at a time and reports programs/s and latency.
`--backend radixrt` talks to a radixrt server (RuntimeEndpoint); `--backend openai` to any
OpenAI-compatible server (OpenAICompatible), where only the gen-only workloads run. A workload
the server cannot serve (constrained decoding not available, select on an OpenAI API) is
skipped with a printed line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import radixrt.lang as rt
from benchmarks.load.datasets import WordSource
from benchmarks.scenarios.program_workloads import Workload, make_workloads

_UNSUPPORTED_MARKERS = ("not available", "not supported")


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks programs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--backend", choices=("radixrt", "openai"), default="radixrt")
    p.add_argument("--base-url", default="http://127.0.0.1:30000")
    p.add_argument("--model", default=None, help="OpenAI model name; default: /v1/models' first")
    p.add_argument("--model-path", default=None, help="tokenizer for the words; default SmolLM2")
    p.add_argument("--num-programs", type=int, default=8, help="runs per workload")
    p.add_argument("--parallel", type=int, default=8, help="programs in flight at once")
    p.add_argument("--workloads", nargs="*", default=None, help="names; default: all")
    p.add_argument("--flush-cache", action="store_true", help="POST /flush_cache per workload")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--label", default=None)
    p.add_argument("--output-file", default=None, help="append a JSON line per workload")
    return p


def make_backend(backend: str, base_url: str, model: str | None) -> Any:
    """RuntimeEndpoint or OpenAICompatible (model from /v1/models when not given)."""
    if backend == "radixrt":
        return rt.RuntimeEndpoint(base_url)
    if model is None:
        import httpx

        root = base_url.rstrip("/").removesuffix("/v1")
        model = httpx.get(root + "/v1/models", timeout=30).json()["data"][0]["id"]
    return rt.OpenAICompatible(base_url, model)


def run_workload(workload: Workload, backend: Any, parallel: int) -> dict[str, Any]:
    """Run every item; programs/s over the wall time, latency per program."""
    latencies: list[float] = []
    errors: list[str] = []

    def one(kwargs: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        try:
            workload.program.run(backend=backend, **kwargs)
        except Exception as e:  # noqa: BLE001  # each program's failure is reported, not raised
            errors.append(str(e))
            return
        latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(one, workload.items))
    duration = time.perf_counter() - start
    out: dict[str, Any] = {
        "workload": workload.name,
        "programs": len(workload.items),
        "completed": len(latencies),
        "duration_s": duration,
        "programs_per_s": len(latencies) / duration if latencies else 0.0,
        "mean_latency_s": statistics.fmean(latencies) if latencies else None,
        "max_latency_s": max(latencies) if latencies else None,
    }
    if errors:
        out["error"] = errors[0][:300]
        out["skipped"] = not latencies and any(m in errors[0] for m in _UNSUPPORTED_MARKERS)
    return out


def run_programs(args: argparse.Namespace, words: WordSource | None = None) -> list[dict[str, Any]]:
    """Every chosen workload in turn; prints one line each and returns the results."""
    if words is None:
        from benchmarks.load.loadgen import load_words

        words = load_words(args.model_path, args.seed)
    backend = make_backend(args.backend, args.base_url, args.model)
    results = []
    for workload in make_workloads(words, args.num_programs):
        if args.workloads and workload.name not in args.workloads:
            continue
        label = args.label or args.backend
        if args.backend == "openai" and not workload.gen_only:
            print(
                f"{label:>24} {workload.name:<20} skipped: uses select or a JSON schema, "
                "which the OpenAI API cannot serve"
            )
            continue
        if args.flush_cache:
            backend.flush_cache()
        r = {"label": label, **run_workload(workload, backend, args.parallel)}
        results.append(r)
        print(_line(r))
        if args.output_file:
            with open(args.output_file, "a") as f:
                f.write(json.dumps(r) + "\n")
    return results


def _line(r: dict[str, Any]) -> str:
    head = f"{r['label']:>24} {r['workload']:<20}"
    if r.get("skipped"):
        return f"{head} skipped: the server answered: {r['error']}"
    line = (
        f"{head} {r['completed']}/{r['programs']} programs in {r['duration_s']:.2f} s: "
        f"{r['programs_per_s']:.3f} programs/s"
    )
    if r["mean_latency_s"] is not None:
        line += f", latency mean {r['mean_latency_s']:.2f} s, max {r['max_latency_s']:.2f} s"
    return line + (f"; error: {r['error']}" if r.get("error") else "")


def main(argv: list[str] | None = None) -> None:
    run_programs(make_parser().parse_args(argv))


if __name__ == "__main__":
    main()
