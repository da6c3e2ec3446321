"""Shared-prefix workload on the offline Engine: radix cache on against off, and transformers.

    python -m benchmarks shared_prefix [-G 8] [-P 16] [-S 1024] [-Q 64] [-O 32]

G groups of P requests; a request is its group's S-token system prompt plus Q unique tokens,
and asks for O greedy tokens (EOS ignored). All requests are submitted at once, in a shuffled
order, each from its own client thread streaming its output (for the time to first token).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.micro.engine_rows import random_prompts
from benchmarks.micro.roofline import OtherLoad, close_machine_info, machine_info
from benchmarks.peers.hf_peer import hf_generate, load_hf_model
from radixrt.core.config import CacheConfig, SchedulerConfig

HF_REQUESTS = 16  # transformers runs on this many requests and is extrapolated to all
HF_BATCH_SIZE = 8


@dataclass(slots=True)
class Workload:
    groups: int
    per_group: int
    system_len: int
    question_len: int
    output_len: int

    @property
    def num_requests(self) -> int:
        return self.groups * self.per_group

    @property
    def optimal_hit_rate(self) -> float:
        """Shared fraction of prompt tokens when each group's first request computes its prefix."""
        n = self.num_requests
        return (n - self.groups) * self.system_len / (n * (self.system_len + self.question_len))


@dataclass(slots=True)
class RunResult:
    """One pass of the workload: throughput, mean time to first token and prefix-cache hits."""

    label: str
    num_requests: int  # measured
    wall_s: float  # first submission to last completion (extrapolated for a subset)
    req_s: float
    out_tok_s: float
    mean_ttft_s: float
    hit_rate: float | None
    extrapolated: bool = False
    other_cpu: float | None = None  # CPU share of other processes during this pass
    cached_tokens: list[int] = field(default_factory=list, repr=False)  # per request
    output_ids: list[list[int]] = field(default_factory=list, repr=False)


def build_prompts(w: Workload, vocab_size: int, seed: int) -> list[list[int]]:
    """All requests' token ids in submission order (shuffled with `seed`)."""
    systems = random_prompts(w.groups, w.system_len, vocab_size, seed)
    questions = random_prompts(w.num_requests, w.question_len, vocab_size, seed + 1)
    prompts = [systems[i // w.per_group] + questions[i] for i in range(w.num_requests)]
    random.Random(seed + 2).shuffle(prompts)
    return prompts


def run_engine(
    args: argparse.Namespace, prompts: list[list[int]], output_len: int, radix_cache: bool
) -> RunResult:
    """The whole workload through a fresh Engine; warm-up excluded from the figures."""
    from radixrt.serve.engine import Engine

    params = {"max_new_tokens": output_len, "temperature": 0, "ignore_eos": True}
    with Engine(
        args.model_path,
        dtype="float32",
        device="cpu",
        disable_radix_cache=not radix_cache,
        max_total_tokens=args.max_total_tokens,
        page_size=args.page_size,
        max_running_requests=args.max_running_requests,
        chunked_prefill_size=args.chunked_prefill_size,
    ) as engine:
        engine.generate(input_ids=prompts[0][:16], sampling_params={**params, "max_new_tokens": 2})
        engine.flush_cache()
        before = engine.get_stats()
        workers = args.concurrency or len(prompts)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            outs = list(pool.map(lambda ids: _stream_one(engine, ids, params), prompts))
        wall = time.perf_counter() - t0
        after = engine.get_stats()
    prompt_tokens = after["prompt_tokens"] - before["prompt_tokens"]
    cached = after["cached_tokens"] - before["cached_tokens"]
    completion = sum(len(out["output_ids"]) for _, out in outs)
    page = f" page {args.page_size}" if args.page_size > 1 else ""
    label = f"radixrt{page}, radix cache {'on' if radix_cache else 'off'}"
    return RunResult(
        label,
        len(prompts),
        wall,
        len(prompts) / wall,
        completion / wall,
        sum(t for t, _ in outs) / len(outs),
        cached / max(prompt_tokens, 1),
        output_ids=[out["output_ids"] for _, out in outs],
        cached_tokens=[out["meta_info"]["cached_tokens"] for _, out in outs],
    )


def run_hf(
    model_path: Any, prompts: list[list[int]], output_len: int, batch_size: int, total_requests: int
) -> RunResult:
    """transformers `generate` over `prompts` in batches, one batch after another; figures are
    extrapolated to `total_requests` all arriving at once (batch k waits for batches < k)."""
    model = load_hf_model(model_path)
    hf_generate(model, [prompts[0][:16]], 2)  # warm-up
    runs = [
        hf_generate(model, prompts[i : i + batch_size], output_len)
        for i in range(0, len(prompts), batch_size)
    ]
    del model
    gc.collect()
    wall = sum(r.total_s for r in runs)
    per_req_s = wall / len(prompts)
    total_wall = per_req_s * total_requests
    num_batches = math.ceil(total_requests / batch_size)
    batch_s = wall / len(runs)
    prefill_s = sum(r.ttft_s for r in runs) / len(runs)
    mean_ttft = (num_batches - 1) / 2 * batch_s + prefill_s
    outputs = [ids for r in runs for ids in r.output_ids]
    return RunResult(
        f"transformers generate, batch {batch_size}",
        len(prompts),
        total_wall,
        total_requests / total_wall,
        total_requests * output_len / total_wall,
        mean_ttft,
        None,
        extrapolated=len(prompts) < total_requests,
        output_ids=outputs,
    )


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
    results = [_pass(lambda: run_engine(args, prompts, w.output_len, radix_cache=True))]
    if not args.skip_cache_off:
        results.append(_pass(lambda: run_engine(args, prompts, w.output_len, radix_cache=False)))
    if not args.skip_hf:
        n = min(args.hf_requests or w.num_requests, w.num_requests)
        results.append(
            _pass(lambda: run_hf(path, prompts[:n], w.output_len, args.hf_batch_size, len(prompts)))
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


def _pass(fn: Callable[[], RunResult]) -> RunResult:
    """Run one pass, noting other processes' CPU share; print a progress line."""
    load = OtherLoad()
    result = fn()
    result.other_cpu = load.fraction()
    print(f"done: {result.label}, {result.wall_s:.1f} s", flush=True)
    return result


def _stream_one(
    engine: Any, ids: list[int], params: dict[str, Any]
) -> tuple[float, dict[str, Any]]:
    """(time to first token, final result) of one request, as its client sees them."""
    t0 = time.perf_counter()
    ttft, last = None, None
    for last in engine.generate(input_ids=ids, sampling_params=params, stream=True):
        if ttft is None and last["output_ids"]:
            ttft = time.perf_counter() - t0
    assert last is not None
    return (ttft if ttft is not None else time.perf_counter() - t0), last


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
