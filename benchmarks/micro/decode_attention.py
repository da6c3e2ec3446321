"""Decode attention per ISA variant and KV dtype: radixrt's C kernel against the torch path it
replaces (the torch_native backend's gather with its own cascade plan), shared and unshared
batches.

    python -m benchmarks decode_attention [--isas avx512 avx2 portable]
        [--kv-dtypes float32 bfloat16] [--json OUT]

Each variant runs in its own child process (RADIXRT_CPU_ISA is read when the library loads);
kernel and torch alternate within it. Over a bfloat16 pool the kernel runs the arithmetic
the model's decode runs there: bfloat16 products on the amx and avx512bf16 variants
(kernels.bf16_extend_takes; the float32 arithmetic is timed beside it, in brackets), float32
on the others. Prints the median ms per layer of each case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# (label, requests, keys per request, of them shared by all requests)
CASES = (
    ("4 x 554 shared", 4, 554, 530),
    ("16 x 554 shared", 16, 554, 530),
    ("16 x 4000 shared", 16, 4000, 3976),
    ("8 x 256 shared", 8, 256, 232),
    ("16 x 554 unshared", 16, 554, 0),
    ("16 x 4000 unshared", 16, 4000, 0),
)
HEADS = (9, 3, 64)  # query heads, KV heads, head dim (SmolLM2-135M)
ROUNDS, CALLS = 9, 10


def _case(b: int, n: int, shared: int, kv_dtype: str = "float32") -> dict[str, float]:
    """Median ms per call of the kernel and of torch on one batch (this process's variant);
    where the kernel takes bfloat16 products, also its float32 arithmetic ("kernel_f32")."""
    import torch

    from radixrt.model.cpu import kernels as ck
    from radixrt.model.cpu.timing import decode_attention_pair

    dtype = getattr(torch, kv_dtype)
    kern, ref, _ = decode_attention_pair(*HEADS, shared, b, n, dtype)
    fns = {"kernel": kern, "torch": ref}
    if ck.bf16_extend_takes(dtype, HEADS[2]):
        fns["kernel_f32"] = decode_attention_pair(*HEADS, shared, b, n, dtype, bf16=False)[0]
    times: dict[str, list[float]] = {name: [] for name in fns}
    with torch.inference_mode():
        for fn in fns.values():
            fn()
        for _ in range(ROUNDS):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                for _ in range(CALLS):
                    fn()
                times[name].append((time.perf_counter() - t0) / CALLS * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _cell(t: dict[str, float]) -> str:
    """'kernel / torch', and the kernel's float32 arithmetic where it has bfloat16 products."""
    cell = f"{t['kernel']:.3g} / {t['torch']:.3g}"
    return cell + (f" (float32 arithmetic {t['kernel_f32']:.3g})" if "kernel_f32" in t else "")


def _child(kv_dtype: str) -> None:
    from radixrt.model.cpu import kernels as ck

    cases = {c[0]: _case(*c[1:], kv_dtype) for c in CASES}
    print(json.dumps({"isa": ck.isa(), "kv": kv_dtype, "cases": cases}))


def main(argv: list[str] | None = None) -> None:
    from radixrt.model.cpu import build

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isas", nargs="+", default=list(build.supported_isas()))
    ap.add_argument("--kv-dtypes", nargs="+", default=["float32", "bfloat16"],
                    choices=["float32", "bfloat16"])  # fmt: skip
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    results = []
    for isa in args.isas:
        for kv in args.kv_dtypes:
            env = {**os.environ, "RADIXRT_CPU_ISA": isa}
            cmd = [sys.executable, "-m", "benchmarks.micro.decode_attention", "--child", kv]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{build.cpu_model()}; ms per layer, {HEADS[0]}/{HEADS[1]} heads, d {HEADS[2]}")
    print("| variant | " + " | ".join(c[0] for c in CASES) + " |")
    print("|---|" + "---|" * len(CASES))
    for r in results:
        cells = [_cell(r["cases"][c[0]]) for c in CASES]
        print(f"| {r['isa']}, {r['kv']} KV: kernel / torch | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2])
    else:
        main()
