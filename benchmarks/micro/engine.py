"""Prefill and decode throughput of radixrt against transformers, beside this machine's roofline.

    python -m benchmarks engine [--prefill-lens 256 1024 2048] [--batch-sizes 1 8 32]
        [--tp 2]

radixrt runs on a scheduler stepped in this thread (no engine thread, radix cache off), so the
timings are of steps alone: prefill = the one step that computes a prompt and samples its first
token (best of --repeats); decode = steps in which every request of the batch decodes one token
(median step; interference from other processes only ever adds time, in spikes).
With --tp N the steps run on N tensor-parallel ranks (their CPU time counts as the benchmark's
own), and the parameter and weight-byte counts are rank 0's shard.

A shared machine's speed drifts from minute to minute, so each row runs in --rounds rounds,
each of which measures the roofline, then radixrt, then transformers: every figure of a row
(and its roofline) is taken over the same stretch of time, interleaved.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from benchmarks.micro.engine_rows import Rows, quietest, warm_up
from benchmarks.micro.engine_tables import format_tables
from benchmarks.micro.roofline import (
    OtherLoad,
    add_roofline_args,
    close_machine_info,
    format_roofline,
    machine_info,
)
from benchmarks.peers.hf_peer import load_hf_model
from radixrt.core.config import (
    CPU_KERNEL_MODES,
    KV_CACHE_DTYPES,
    QUANTIZATIONS,
    CacheConfig,
    ModelConfig,
    SchedulerConfig,
)

PREFILL_LENS = (256, 1024, 2048)
BATCH_SIZES = (1, 8, 32)
DECODE_STEPS = 32
DECODE_PROMPT_LEN = 128
REPEATS = 2
ROUNDS = 2
SEED = 0
RETRIES = 2
MAX_OTHER_CPU = 0.1


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure everything; print the tables and return them as a dict."""
    from radixrt.scheduler.builder import build_scheduler

    machine = machine_info()
    print(f"machine: {machine}", flush=True)
    max_batch, max_len = max(args.batch_sizes), max(args.prefill_lens)
    pool = max(max_len + 64, max_batch * (args.decode_prompt_len + args.decode_steps + 64))
    sched, _ = build_scheduler(
        ModelConfig(
            args.model_path,
            dtype=args.dtype,
            device="cpu",
            tp_size=args.tp,
            cpu_kernels=args.cpu_kernels,
            quantization=args.quantization,
        ),
        CacheConfig(
            max_total_tokens=pool, disable_radix_cache=True, kv_cache_dtype=args.kv_cache_dtype
        ),
        SchedulerConfig(
            max_running_requests=max(max_batch, 64), chunked_prefill_size=max(max_len, 2048)
        ),
    )
    try:
        return _run(sched, machine, args)
    finally:
        sched.runner.shutdown()


def _run(sched: Any, machine: dict[str, Any], args: argparse.Namespace) -> dict:
    load = OtherLoad(sched.runner.tp_group.pids)
    print(f"radixrt {sched.runner.cpu_kernels.summary()}", flush=True)
    # Counted at load, before the CPU kernels repack the linear weights (the tied LM head
    # then has its own packed copy, which a step reads instead of the embedding table).
    num_params, weight_bytes = sched.runner.num_params, sched.runner.weight_bytes
    plan = sched.runner.cpu_kernels
    vocab = sched.runner.arch.vocab_size
    import torch

    hf_dtype = getattr(torch, args.dtype)
    hf = None if args.skip_hf else load_hf_model(sched.runner.model_path, hf_dtype)

    warm_up(sched, hf, vocab)
    rows = Rows(sched, hf, vocab, num_params, weight_bytes, args)
    prefill = [quietest(lambda n=n: rows.prefill(n), args) for n in args.prefill_lens]
    decode = [quietest(lambda b=b: rows.decode(b), args) for b in args.batch_sizes]
    sched.check_pool_whole()
    roof = rows.best_probe  # the run-wide line: every row's probes, best of each rate
    print(format_roofline(roof, num_params, weight_bytes))
    print(format_tables(prefill, decode, args))
    print(close_machine_info(machine, load))
    return {
        "machine": machine,
        "roofline": roof.to_dict(),
        "num_params": num_params,
        "weight_bytes": weight_bytes,
        "tp_size": args.tp,
        "cpu_kernels": {"isa": plan.isa, "kernels": sorted(plan.kernels)},
        "quantization": args.quantization,
        "dtype": args.dtype,
        "kv_cache_dtype": str(sched.runner.token_to_kv_pool.dtype).removeprefix("torch."),
        "repeats": args.repeats,
        "rounds": args.rounds,
        "decode_prompt_len": args.decode_prompt_len,
        "decode_steps": args.decode_steps,
        "prefill": [asdict(r) for r in prefill],
        "decode": [r.to_dict() for r in decode],
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-path", default=None, help="default: SmolLM2-135M-Instruct")
    p.add_argument("--prefill-lens", type=int, nargs="+", default=list(PREFILL_LENS))
    p.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES))
    p.add_argument("--decode-steps", type=int, default=DECODE_STEPS, help="timed steps per batch")
    p.add_argument("--decode-prompt-len", type=int, default=DECODE_PROMPT_LEN)
    p.add_argument("--repeats", type=int, default=REPEATS, help="prefill: best of this many")
    p.add_argument(
        "--rounds",
        type=int,
        default=ROUNDS,
        help="each row alternates roofline, radixrt and transformers this many times",
    )
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument(
        "--retries",
        type=int,
        default=RETRIES,
        help="re-measure a row disturbed by other processes up to this many times",
    )
    p.add_argument(
        "--max-other-cpu",
        type=float,
        default=MAX_OTHER_CPU,
        help="a row is disturbed when other processes used more than this share of the cores",
    )
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (gloo on CPU)")
    p.add_argument("--skip-hf", action="store_true", help="radixrt and the roofline only")
    p.add_argument(
        "--cpu-kernels",
        choices=CPU_KERNEL_MODES,
        default=ModelConfig.cpu_kernels,
        help="radixrt's C kernels (csrc/cpu): on, off (torch ops) or auto (the faster per op)",
    )
    p.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="int8: weight-only int8 linear layers, w8a8: with int8 activations where the "
        "guard measures it faster (the roofline counts the weights' bytes)",
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="the model's dtype in both engines (and the roofline's matmul)",
    )
    p.add_argument(
        "--kv-cache-dtype",
        choices=KV_CACHE_DTYPES,
        default=CacheConfig.kv_cache_dtype,
        help="radixrt's KV pool (transformers keeps the model's dtype)",
    )
    p.add_argument("--json", metavar="OUT", default=None, help="also write the results here")
    add_roofline_args(p)
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
