"""Where one prefill goes, by op: each CPU kernel call (linear per shape, the fused gate_up
and SiLU, attention, the element-wise ops) and the rest (Python, embedding, sampling), beside
the machine's matmul probe in the model's dtype.

    OMP_NUM_THREADS=1 python -m benchmarks prefill_ops [--prefill-lens 256 1024]
        [--dtype bfloat16] [--kv-cache-dtype bfloat16] [--repeats 5]

With OMP_NUM_THREADS=1 every time is the thread's CPU time (time.thread_time), which other
processes on a shared machine disturb far less than wall time (a descheduled thread's wait is
not counted); otherwise wall time. A prefill is one scheduler step of a random prompt (radix
cache off), best of --repeats; the probe is best of 5 before and after. fraction = tokens/s
over the probe's rate / (2 x params), as `engine` reports it. A prefill runs each decoder layer
as one C call where the layer is fused (radixrt/model/cpu/fused_layer.py): those calls are one
row; `--unfused` runs the layers' modules instead, each kernel call its own row.
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from collections.abc import Callable
from typing import Any

from benchmarks.micro.engine_rows import radixrt_prefill, random_prompts, warm_up
from benchmarks.micro.roofline import arithmetic_dtype, measure_matmul_gflops
from radixrt.core.config import KV_CACHE_DTYPES, CacheConfig, ModelConfig, SchedulerConfig

# The kernel entry points timed, each named by a function of its arguments.
OPS: dict[str, Callable[..., str]] = {
    "linear": lambda x, packed, n, *a, **k: f"linear {x.shape[1]}->{n}",
    "linear_silu": lambda x, packed, n, *a, **k: f"linear+silu {x.shape[1]}->{n}->{n // 2}",
    "extend_attention": lambda *a, **k: "extend attention",
    "rmsnorm_": lambda *a, **k: "rmsnorm",
    "rotary_": lambda *a, **k: "rotary",
    "silu_mul": lambda *a, **k: "silu_mul",
}


def clock() -> Callable[[], float]:
    return time.thread_time if os.environ.get("OMP_NUM_THREADS") == "1" else time.perf_counter


def instrument(times: dict[str, float]) -> Callable[[], None]:
    """Wrap the kernels module's entry points to add their time into `times`; returns undo."""
    from radixrt.model.cpu import kernels as ck

    now, saved = clock(), {}
    for name, label in OPS.items():
        fn = getattr(ck, name, None)
        if fn is None:
            continue
        saved[name] = fn

        def timed(*a: Any, _fn: Callable = fn, _label: Callable = label, **k: Any) -> Any:
            t = now()
            out = _fn(*a, **k)
            times[_label(*a, **k)] += now() - t
            return out

        setattr(ck, name, timed)

    def undo() -> None:
        for name, fn in saved.items():
            setattr(ck, name, fn)

    return undo


FUSED_ROW = "decoder layers, one C call each (linears, attention, element-wise)"


def time_fused_layers(layers: Any, times: dict[str, float]) -> Callable[[], None]:
    """Time the fused layers' calls (their kernels run inside C, out of `instrument`'s
    reach) as FUSED_ROW; returns undo."""
    now, wrapped = clock(), []
    for layer in layers:
        if not getattr(layer, "fuse_extend", False):
            continue
        fn = layer.forward

        def timed(*a: Any, _fn: Callable = fn, **k: Any) -> Any:
            t = now()
            out = _fn(*a, **k)
            times[FUSED_ROW] += now() - t
            return out

        layer.forward = timed
        wrapped.append(layer)

    def undo() -> None:
        for layer in wrapped:
            del layer.forward

    return undo


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from radixrt.scheduler.builder import build_scheduler

    sched, _ = build_scheduler(
        ModelConfig(args.model_path, dtype=args.dtype, device="cpu"),
        CacheConfig(
            max_total_tokens=max(args.prefill_lens) + 256,
            disable_radix_cache=True,
            kv_cache_dtype=args.kv_cache_dtype,
        ),
        SchedulerConfig(max_running_requests=8, chunked_prefill_size=max(args.prefill_lens)),
    )
    layers = sched.runner.model.model.layers
    for layer in layers if args.unfused else ():
        if hasattr(layer, "fuse_extend"):
            layer.fuse_extend = False
    try:
        print(f"radixrt {sched.runner.cpu_kernels.summary()}", flush=True)
        params, vocab = sched.runner.num_params, sched.runner.arch.vocab_size
        warm_up(sched, None, vocab)
        dtype, now, rows = arithmetic_dtype(args.dtype), clock(), []
        for n in args.prefill_lens:
            ids = random_prompts(1, n, vocab, args.seed)[0]
            probe = measure_matmul_gflops(dtype=dtype)
            best, split = float("inf"), {}
            for _ in range(args.repeats):
                times: dict[str, float] = collections.defaultdict(float)
                undo, undo_layers = instrument(times), time_fused_layers(layers, times)
                t = now()
                radixrt_prefill(sched, ids)
                elapsed = now() - t
                undo_layers()
                undo()
                if elapsed < best:
                    best, split = elapsed, dict(times)
            probe = max(probe, measure_matmul_gflops(dtype=dtype))
            rows.append({"tokens": n, "seconds": best, "probe_gflops": probe, "ops": split})
            print(report(n, best, probe, params, split, args.dtype), flush=True)
        return rows
    finally:
        sched.runner.shutdown()


def report(
    n: int, best: float, probe: float, params: int, split: dict[str, float], dtype: str
) -> str:
    """One prefill's line and its table of ops, largest first."""
    fraction = n / best / (probe * 1e9 / (2 * params))
    lines = [
        f"\nprefill {n} tokens: {best * 1e3:.1f} ms, {n / best:.0f} tok/s; {dtype} matmul "
        f"probe {probe:.0f} GFLOP/s; fraction {fraction:.2f}",
        "",
        "| op | ms | share |",
        "|---|---:|---:|",
    ]
    for op, s in sorted(split.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {op} | {s * 1e3:.1f} | {s / best:.1%} |")
    rest = best - sum(split.values())
    lines.append(
        f"| the rest (Python, embedding, sampling) | {rest * 1e3:.1f} | {rest / best:.1%} |"
    )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model-path", default=None, help="default: SmolLM2-135M-Instruct")
    p.add_argument("--prefill-lens", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    p.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="bfloat16")
    p.add_argument("--repeats", type=int, default=5, help="best of this many prefills")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--unfused", action="store_true", help="the layers' modules, op by op")
    return p


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
