"""gpu_check's model stages: greedy agreement of two attention backends, and throughput.

`stage_smollm2` runs the converted SmolLM2 through Engine when a folder is available (.gpu/ or
--smollm2), a random-weight SmolLM2-shaped model through a plain greedy loop with
`--smollm2 random`, and is skipped otherwise (gpu_correctness.py covers random weights).
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.gpu.check import Check

REPO_ROOT = Path(__file__).resolve().parents[2]
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "List three primary colors:",
    "Once upon a time, in a small village,",
]
# The trained model's greedy tokens must agree this far (bf16 backends may part ways later on
# near-ties); random weights have near-ties everywhere, so there only the logits are compared.
MIN_AGREEING_TOKENS = 4
MAX_RANDOM_LOGITS_ERR = 0.1
B1_TARGET = 0.5  # decode at batch 1 within 2x of the bandwidth roofline


def stage_smollm2(c: Check, d: dict[str, Any], args: argparse.Namespace) -> str:
    """Greedy outputs of the same prompts with flashinfer and torch_native must agree."""
    backends = ("torch_native", "torch_native") if c.dry_run else ("flashinfer", "torch_native")
    max_new = 4 if c.dry_run else 32
    if args.smollm2 == "random":
        path = None
    else:
        path = Path(args.smollm2) if args.smollm2 else _find_model(REPO_ROOT / ".gpu")
        if path is None:
            return "skipped: no converted SmolLM2 under .gpu/ (random weights: see correctness)"
    if path is not None:
        d["model"] = str(path)
        outputs = [_engine_greedy(c, d, path, name, max_new) for name in backends]
    else:
        d["model"] = "random-weight SmolLM2-135M shape (no converted folder found)"
        outputs = _random_greedy(c, d, backends, max_new)
    prefixes = [_common_prefix(a, b) for a, b in zip(*outputs, strict=True)]
    same = sum(a == b for a, b in zip(*outputs, strict=True))
    d["common_prefix_lens"] = prefixes
    summary = (
        f"{d['model'][:40]}: {same}/{len(prefixes)} identical over {max_new} tokens; "
        f"common prefixes {prefixes}"
    )
    if path is not None and min(prefixes) < min(MIN_AGREEING_TOKENS, max_new):
        raise AssertionError(f"{backends[0]} and {backends[1]} disagree early: {summary}")
    err = d.get("first_logits_rel_err", 0.0)
    if err > MAX_RANDOM_LOGITS_ERR:  # a wrong page table gives O(1) errors, bf16 noise ~1e-2
        raise AssertionError(f"first-step logits differ by {err:.2e} (relative): {summary}")
    return summary


def stage_bench(c: Check, d: dict[str, Any], args: argparse.Namespace) -> str:
    """Prefill 2k/8k and decode b1/b32/b128 at context 512 on a Llama-3-8B-shaped model."""
    import torch

    from tests.gpu import common as gb

    if c.dry_run:
        device, dtype, arch = torch.device("cpu"), torch.float32, gb.TINY_LLAMA
        prefills, batches, ctx, iters, copy_mib, mm_n = (32, 64), (1, 4), 16, 2, 8, 128
    else:
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        device, dtype, arch = torch.device("cuda"), torch.bfloat16, gb.LLAMA3_8B
        prefills, batches, ctx, iters, copy_mib, mm_n = (
            (2048, 8192),
            (1, 32, 128),
            512,
            10,
            2048,
            8192,
        )
    roof = gb.measure_roofline(device, dtype, copy_mib, mm_n)
    d["roofline"] = {"bytes_per_s": roof.bytes_per_s, "flops_per_s": roof.flops_per_s}
    c.log(
        f"  roofline: copy {roof.bytes_per_s / 1e9:.0f} GB/s, "
        f"matmul {roof.flops_per_s / 1e12:.1f} TFLOP/s"
    )
    model = gb.random_llama(arch, device, dtype, max_position=max(prefills) + ctx + 16)
    pools = _pools(
        arch,
        dtype,
        device,
        max(max(prefills), max(batches) * (ctx + 1)) + 64,
        max(batches) + 1,
        max(max(prefills), ctx + 1) + 8,
    )
    names = [
        n
        for n in args.bench_backends.split(",")
        if device.type == "cuda" or not n.startswith(("flashinfer", "triton"))
    ]
    rows: list[dict[str, Any]] = []
    for name in names:
        backend, graphs = name.removesuffix("+graph"), name.endswith("+graph")
        try:
            bench = gb.LlamaBench(arch, model, backend, roof, pools, batches if graphs else ())
        except Exception as e:
            c.log(f"  {name}: cannot run: {type(e).__name__}: {e}")
            continue
        jobs: list[tuple[str, Any, tuple]] = []
        if not graphs:  # graphs change decode only
            jobs += [(f"prefill {n}", bench.prefill, (n, max(1, iters // 3))) for n in prefills]
        jobs += [(f"decode b{b}", bench.decode, (b, ctx, iters)) for b in batches]
        rows += _measure(c, name, jobs)
        bench = None
        free_memory()
    d["bench"] = rows
    if not rows:
        raise RuntimeError("no measurement succeeded")
    return (
        f"{len(rows)} measurements; {_b1_target(rows)}; copy {roof.bytes_per_s / 1e12:.2f} TB/s, "
        f"matmul {roof.flops_per_s / 1e12:.1f} TFLOP/s"
    )


def free_memory() -> None:
    """Collect garbage and hand cached CUDA blocks back, between stages that load models."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---- helpers ----------------------------------------------------------------------------


def _b1_target(rows: list[dict[str, Any]]) -> str:
    """How the best batch-1 decode compares with B1_TARGET of its bandwidth roofline."""
    b1 = [r for r in rows if r["name"].startswith("decode b1 ")]
    if not b1:
        return "no decode b1 row"
    best = max(b1, key=lambda r: r["fraction"])
    met = "met" if best["fraction"] >= B1_TARGET else "MISSED"
    return (
        f"decode b1 best {best['backend']} {100 * best['fraction']:.0f}% of roofline "
        f"(target {100 * B1_TARGET:.0f}%: {met})"
    )


def _measure(c: Check, backend: str, jobs: list[tuple[str, Any, tuple]]) -> list[dict[str, Any]]:
    """Run (label, fn, args) jobs while time allows; a failing one is logged and skipped."""
    rows: list[dict[str, Any]] = []
    for label, fn, fn_args in jobs:
        if c.seconds_left() < 15:
            c.log("  out of time: remaining measurements skipped")
            break
        try:
            r = fn(*fn_args)
        except Exception as e:  # one failed measurement must not lose the others
            c.log(f"  {backend} {label}: {type(e).__name__}: {e}")
            continue
        rows.append(
            {
                "name": r.name,
                "backend": r.backend,
                "tokens_per_s": r.tokens_per_s,
                "roofline_tokens_per_s": r.roofline_tokens_per_s,
                "fraction": r.fraction_of_roofline,
                "ms_per_step": r.ms_per_step,
            }
        )
        c.log(
            f"  {r.name:<20} {backend:<17} {r.tokens_per_s:>10.1f} tok/s "
            f"({100 * r.fraction_of_roofline:.1f}% of {r.roofline_tokens_per_s:.0f})"
        )
    return rows


def _engine_greedy(c: Check, d: dict[str, Any], path: Path, backend: str, max_new: int) -> list:
    from radixrt.serve.engine import Engine

    t0 = time.perf_counter()
    with Engine(
        str(path),
        device="cpu" if c.dry_run else "cuda",
        attention_backend=backend,
        max_total_tokens=16384,
        context_length=2048,
        max_running_requests=8,
    ) as eng:
        res = eng.generate(PROMPTS, {"max_new_tokens": max_new, "temperature": 0.0})
    texts = [r["text"] for r in res]
    d.setdefault("texts", {})[backend] = texts
    c.log(f"  {backend} via Engine: {time.perf_counter() - t0:.1f}s {texts}")
    del eng
    free_memory()
    return [r["output_ids"] for r in res]


def _random_greedy(c: Check, d: dict[str, Any], backends: tuple[str, str], max_new: int) -> list:
    import torch

    from tests.gpu import common as gb

    dev = torch.device("cpu" if c.dry_run else "cuda")
    dtype = torch.float32 if c.dry_run else torch.bfloat16
    arch = gb.TINY_LLAMA if c.dry_run else gb.SMOLLM2_135M
    torch.manual_seed(0)
    model = gb.random_llama(arch, dev, dtype, max_position=512, std=0.08)
    pools = _pools(arch, dtype, dev, capacity=4096, max_reqs=len(PROMPTS) + 1, max_context=512)
    gen = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(0, arch.vocab_size, (n,), generator=gen).tolist() for n in (5, 17, 64, 9)
    ]
    outputs, logits = [], []
    for name in backends:
        backend = gb.make_backend(name, arch, dev)
        toks, first = gb.greedy_tokens(model, backend, pools, prompts, max_new)
        outputs.append(toks)
        logits.append(first)
        c.log(f"  {name} (random weights): {toks}")
    err = float((logits[0] - logits[1]).norm() / logits[1].norm())
    d["first_logits_rel_err"] = err
    c.log(f"  first-step logits relative error: {err:.2e}")
    del model, pools
    free_memory()
    return outputs


def _pools(
    arch: Any, dtype: Any, device: Any, capacity: int, max_reqs: int, max_context: int
) -> Any:
    from benchmarks.fixtures.synthetic import SyntheticPools

    return SyntheticPools(
        num_layers=arch.num_hidden_layers,
        num_kv_heads=arch.num_key_value_heads,
        head_dim=arch.head_dim,
        capacity=capacity,
        max_reqs=max_reqs,
        max_context_len=max_context,
        dtype=dtype,
        device=device,
    )


def _find_model(root: Path) -> Path | None:
    """The first folder under `root` with a config.json and safetensors weights."""
    for cfg in sorted(root.glob("**/config.json")):
        if any(cfg.parent.glob("*.safetensors")):
            return cfg.parent
    return None


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
