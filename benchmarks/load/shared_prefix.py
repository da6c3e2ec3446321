"""Shared-prefix workload on the offline Engine: radix cache on against off, and transformers.

    python -m benchmarks shared_prefix [-G 8] [-P 16] [-S 1024] [-Q 64] [-O 32]

G groups of P requests; a request is its group's S-token system prompt plus Q unique tokens,
and asks for O greedy tokens (EOS ignored). All requests are submitted at once, in a shuffled
order, each from its own client thread streaming its output (for the time to first token).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from benchmarks.load.shared_prefix_passes import (
    HF_BATCH_SIZE,
    HF_REQUESTS,
    RunResult,
    Workload,
    build_prompts,
    run_engine,
    run_hf,
    timed_pass,
)
from benchmarks.micro.roofline import close_machine_info, machine_info
from radixrt.core.config import CacheConfig, SchedulerConfig
from radixrt.core.other_load import OtherLoad


def format_report(w: Workload, results: list[RunResult], prompt_tokens: int) -> str:
    """The table and the comparisons under it."""
    lines = [
        f"workload: {w.groups} groups x {w.per_group} prompts = {w.num_requests} requests; "
        f"system {w.system_len} + question {w.question_len} tokens, {w.output_len} output "
        f"tokens each; {prompt_tokens} prompt tokens in all",
        "",
        "| run | requests measured | wall s | requests/s | output tok/s | mean TTFT s | hit rate "
        "| others' CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        star = " *" if r.extrapolated else ""
        hit = "-" if r.hit_rate is None else f"{r.hit_rate:.3f}"
        other = "-" if r.other_cpu is None else f"{100 * r.other_cpu:.0f}%"
        lines.append(
            f"| {r.label}{star} | {r.num_requests} | {r.wall_s:.1f} | {r.req_s:.3f} "
            f"| {r.out_tok_s:.1f} | {r.mean_ttft_s:.2f} | {hit} | {other} |"
        )
    if any(r.extrapolated for r in results):
        lines.append(
            f"\n* measured on the first requests only; wall time, throughput and mean "
            f"TTFT extrapolated to all {w.num_requests} arriving at once, served batch "
            "after batch"
        )
    by = {r.label.split(",")[-1].strip(): r for r in results}
    on, off = by.get("radix cache on"), by.get("radix cache off")
    hf = next((r for r in results if r.label.startswith("transformers")), None)
    lines.append("")
    if on is not None:
        lines.append(
            f"hit rate: measured {on.hit_rate:.3f}, optimal {w.optimal_hit_rate:.3f} "
            f"(difference {on.hit_rate - w.optimal_hit_rate:+.3f})"
        )
    if on is not None:
        lines.append(_prefix_hits(on.cached_tokens, w))
    if on is not None and off is not None:
        same = sum(a == b for a, b in zip(on.output_ids, off.output_ids, strict=True))
        lines.append(
            f"cache on / off: throughput x{on.req_s / off.req_s:.2f}, mean TTFT "
            f"x{on.mean_ttft_s / off.mean_ttft_s:.2f}; greedy outputs identical for "
            f"{same}/{len(on.output_ids)} requests"
        )
    for r in (on, off):
        if r is not None and hf is not None:
            pairs = zip(r.output_ids[: hf.num_requests], hf.output_ids, strict=True)
            same = sum(a == b for a, b in pairs)
            lines.append(
                f"{r.label} / transformers: throughput x{r.req_s / hf.req_s:.2f}; "
                f"greedy outputs identical for {same}/{hf.num_requests} measured requests"
            )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the configured passes; print the report and return it as a dict."""
    from radixrt.model.families.loader import load_hf_config, resolve_model_path

    w = Workload(args.groups, args.per_group, args.system_len, args.question_len, args.output_len)
    path = resolve_model_path(args.model_path)
    vocab = load_hf_config(path)["vocab_size"]
    prompts = build_prompts(w, vocab, args.seed)
    machine, load = machine_info(), OtherLoad()
    print(f"machine: {machine}", flush=True)
    results = [timed_pass(lambda: run_engine(args, prompts, w.output_len, radix_cache=True))]
    if not args.skip_cache_off:
        results.append(
            timed_pass(lambda: run_engine(args, prompts, w.output_len, radix_cache=False))
        )
    if not args.skip_hf:
        n = min(args.hf_requests or w.num_requests, w.num_requests)
        results.append(
            timed_pass(
                lambda: run_hf(path, prompts[:n], w.output_len, args.hf_batch_size, len(prompts))
            )
        )
    print(format_report(w, results, sum(len(p) for p in prompts)))
    print(close_machine_info(machine, load))
    return {
        "machine": machine,
        "workload": asdict(w),
        "optimal_hit_rate": w.optimal_hit_rate,
        "results": [{k: v for k, v in asdict(r).items() if k != "output_ids"} for r in results],
    }


def _prefix_hits(cached: list[int], w: Workload) -> str:
    """Which requests got their whole system prompt from the cache, part of it, or none."""
    full = sum(c >= w.system_len for c in cached)
    partial = sorted(c for c in cached if 0 < c < w.system_len)
    none = sum(c == 0 for c in cached)
    return (
        f"prefix hits: {full} requests got the whole system prompt from the cache, "
        f"{len(partial)} part of it {partial if partial else ''}, {none} none "
        f"(optimal: {w.num_requests - w.groups}, 0, {w.groups})"
    )


def build_parser() -> argparse.ArgumentParser:
    sched, cache = SchedulerConfig(), CacheConfig()
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-path", default=None, help="default: SmolLM2-135M-Instruct")
    p.add_argument("-G", "--groups", type=int, default=8)
    p.add_argument("-P", "--per-group", type=int, default=16, help="prompts per group")
    p.add_argument("-S", "--system-len", type=int, default=1024, help="shared prefix tokens")
    p.add_argument("-Q", "--question-len", type=int, default=64, help="unique tokens")
    p.add_argument("-O", "--output-len", type=int, default=32, help="output tokens")
    p.add_argument("--concurrency", type=int, default=0, help="client threads; 0: all at once")
    p.add_argument("--max-running-requests", type=int, default=sched.max_running_requests)
    p.add_argument("--chunked-prefill-size", type=int, default=sched.chunked_prefill_size)
    p.add_argument("--max-total-tokens", type=int, default=cache.max_total_tokens)
    p.add_argument("--page-size", type=int, default=cache.page_size, help="tokens per KV page")
    p.add_argument("--hf-batch-size", type=int, default=HF_BATCH_SIZE)
    p.add_argument(
        "--hf-requests",
        type=int,
        default=HF_REQUESTS,
        help="run transformers on this many requests and extrapolate; 0: all",
    )
    p.add_argument("--skip-hf", action="store_true")
    p.add_argument("--skip-cache-off", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT", default=None, help="also write the results here")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    results = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
