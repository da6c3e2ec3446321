"""KV pool dtypes on the CPU (float32, bfloat16, fp8 e4m3 and e5m2 with per-row scales),
interleaved in one process: prefill tok/s of one long prompt, and decode ms/step of batches
over long contexts (each request its own context, and a batch sharing one cached prefix).

    python -m benchmarks kv_dtype [--context 2048] [--batch-sizes 1 8] [--rounds 6]
                                  [--kv-dtypes float32 bfloat16 fp8_e4m3 fp8_e5m2]

One scheduler per KV dtype, stepped in this thread (as benchmarks.micro.engine does). Each
decode batch is prefilled once per scheduler and kept running; the rounds then alternate
`--steps` timed steps on each, so every dtype is measured over the same stretch of time on
a shared machine. Figures: prefill best of the rounds, decode the median step of all rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from benchmarks.micro.engine_rows import _req, radixrt_prefill, random_prompts, warm_up
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig

KV_DTYPES = ("float32", "bfloat16", "fp8_e4m3", "fp8_e5m2")


def _build(args: argparse.Namespace, kv: str) -> Any:
    from radixrt.scheduler.builder import build_scheduler

    pool = max(args.batch_sizes) * (args.context + args.rounds * args.steps + 64) + args.context
    sched, _ = build_scheduler(
        ModelConfig(args.model_path, dtype=args.dtype, device="cpu"),
        CacheConfig(max_total_tokens=pool, kv_cache_dtype=kv),
        SchedulerConfig(max_running_requests=64, chunked_prefill_size=args.context),
    )
    return sched


def _start(sched: Any, prompts: list[list[int]], steps: int) -> list[Any]:
    """Start a decode batch and step it until every request has its first token."""
    reqs = [_req(ids, max_new_tokens=steps + 64) for ids in prompts]
    for r in reqs:
        sched.add_request(r)
    while sched.waiting or any(not r.output_ids for r in reqs):
        sched.step()
    return reqs


def _timed_steps(sched: Any, reqs: list[Any], steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        touched = sched.step()
        times.append(time.perf_counter() - t0)
        if len(touched) != len(reqs):
            raise RuntimeError(f"a decode step touched {len(touched)} of {len(reqs)} requests")
    return times


def _decode_rows(scheds: dict, args: argparse.Namespace, vocab: int) -> list[dict]:
    rows = []
    for b in args.batch_sizes:
        cases = [("own contexts", random_prompts(b, args.context, vocab, args.seed + b))]
        if b > 1:  # one prefix of context - 16 tokens, then 16 of each request's own
            prefix = random_prompts(1, args.context - 16, vocab, args.seed)[0]
            own = random_prompts(b, 16, vocab, args.seed + 100 + b)
            cases.append(("shared prefix", [prefix + o for o in own]))
        for kind, prompts in cases:
            steps = args.rounds * args.steps
            reqs = {kv: _start(s, prompts, steps) for kv, s in scheds.items()}
            times: dict[str, list[float]] = {kv: [] for kv in scheds}
            for _ in range(args.rounds):
                for kv, s in scheds.items():
                    times[kv] += _timed_steps(s, reqs[kv], args.steps)
            for kv, s in scheds.items():
                for r in reqs[kv]:
                    s.abort(r.rid)
                s.step()
            row = {"batch": b, "kind": kind}
            row.update({kv: statistics.median(t) * 1e3 for kv, t in times.items()})
            rows.append(row)
            print(f"decode batch {b} ({kind}): " + ", ".join(
                f"{kv} {row[kv]:.1f} ms/step" for kv in scheds), flush=True)  # fmt: skip
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    scheds = {kv: _build(args, kv) for kv in args.kv_dtypes}
    try:
        first = next(iter(scheds.values())).runner
        vocab = first.arch.vocab_size
        for s in scheds.values():
            warm_up(s, None, vocab)
        tokens = {kv: s.runner.max_total_tokens for kv, s in scheds.items()}
        pool_bytes = {kv: s.runner.token_to_kv_pool.size_bytes for kv, s in scheds.items()}
        prompt = random_prompts(1, args.context, vocab, args.seed)[0]
        best = {kv: float("inf") for kv in scheds}
        for i in range(args.rounds):
            for kv, s in scheds.items():
                salted = [prompt[0] + i + 1] + prompt[1:]  # no prefix hit across rounds
                best[kv] = min(best[kv], radixrt_prefill(s, salted)[0])
        prefill = {kv: args.context / t for kv, t in best.items()}
        print("prefill " + ", ".join(f"{kv} {v:.0f} tok/s" for kv, v in prefill.items()))
        decode = _decode_rows(scheds, args, vocab)
        for s in scheds.values():
            s.check_pool_whole()
    finally:
        for s in scheds.values():
            s.runner.shutdown()
    return {
        "cpu_kernels": first.cpu_kernels.summary(),
        "context": args.context,
        "pool_tokens": tokens,
        "pool_bytes": pool_bytes,
        "prefill_tok_s": prefill,
        "decode_ms_per_step": decode,
        "load_avg_1m": [load_before, os.getloadavg()[0]],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model-path", default=None, help="default: SmolLM2-135M-Instruct")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--context", type=int, default=2048, help="prompt tokens per request")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    p.add_argument("--kv-dtypes", nargs="+", choices=KV_DTYPES, default=list(KV_DTYPES))
    p.add_argument("--steps", type=int, default=8, help="timed decode steps per round")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT", default=None)
    args = p.parse_args(argv)
    results = run(args)
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
