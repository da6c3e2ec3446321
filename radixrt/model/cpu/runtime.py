"""Process set-up for a model on the CPU: radixrt's C kernels and the C heap's reuse policy.

A CPU forward pass allocates its activations fresh every layer: at 2048 tokens a layer's
outputs are 5-25 MB each. glibc serves blocks above its mmap threshold (dynamic, from 128
KiB) with fresh mappings and returns them on free, so every pass page-faults and zeroes its
activations again: 10^4-10^5 page faults and 5-35% of a prefill's time measured here.
`keep_freed_memory` raises the threshold to glibc's maximum so those blocks come from the
heap (or the model thread's arena) and are reused; the heap keeps up to TRIM_THRESHOLD of
free memory at its top. Measured on a 2048-token prefill: 2-30 x 10^4 page faults per
request before, none after, whether the model runs in the main thread (the scheduler
process) or in an Engine's scheduler thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from torch import nn

from radixrt.cache.kv_dtype import kv_dtype_name
from radixrt.core.config import ModelConfig

if TYPE_CHECKING:
    from radixrt.model.cpu.guard import KernelPlan

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit
TRIM_THRESHOLD = 256 << 20

_kept = False


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds for this process (once); False where the C
    library has no `mallopt` (not glibc) or refuses a value."""
    global _kept
    if _kept:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settings = ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    _kept = all([bool(mallopt(param, value)) for param, value in settings])
    return _kept


# `dtype auto` on the CPU: bfloat16 linear weights wherever radixrt's kernels run a vector
# variant (`bf16_weights_pay`), float32 on the portable one. Setting this variable to
# "float32" pins float32 (the reference; the test suite sets it).
AUTO_DTYPE_ENV = "RADIXRT_CPU_AUTO_DTYPE"


def native_bf16() -> bool:
    """Whether this CPU has a bfloat16 dot product (the avx512_bf16 flag: Xeons with AMX,
    where the amx kernel variant runs bfloat16 weights on tiles, Cooper Lake, AMD EPYC Zen 4
    and Zen 5, where torch's oneDNN matmul uses it). Without it torch's bfloat16 matmul is
    emulated (about 1 GFLOP/s on an AVX2 EPYC)."""
    from radixrt.model.cpu import build as cpu_build

    return "avx512_bf16" in cpu_build.cpu_flags().split()


def bf16_weights_pay() -> bool:
    """Whether bfloat16 linear weights beat float32 on the loaded kernel variant: every vector
    variant. With a bfloat16 dot product (amx, avx512bf16) they are multiplied as bfloat16;
    on avx512 and avx2 each weight is widened to float32 in registers, so a decode step reads
    half the bytes with float32 arithmetic, and prefill-sized calls may run torch's float32
    matmul on a float32 copy of the rounded weights where the guard times it faster
    (weight_pack.torch_weight). Measured (docs/benchmarks.md sections 13, 8 and 19): on an AMX
    Xeon prefill 2x and decode batches 2-4x float32's speed; on an AMD EPYC Zen 5 prefill
    1.5x, decode steps 2.4x (batch 1) and 1.6x (batch 8); on an AVX2-only EPYC Zen 3 prefill
    at float32's rate (both on MKL) and decode steps in 0.56x (batch 1) to 0.67x (batch 16)
    of float32's time. AVX-512 without avx512_bf16 is not measured (the avx2 case's reasons
    hold there too). The portable variant (no vectors) keeps float32: not measured."""
    from radixrt.model.cpu import kernels as ck

    return ck.isa() != "portable"


def bf16_on_kernels(config: ModelConfig) -> bool:
    """Whether the model's dtype on the CPU means bfloat16 linear weights on radixrt's kernels
    (activations, norms and attention in float32; the model loads in float32 and its
    linear layers are converted by `init_cpu_kernels`): `bfloat16` with the kernels on, or
    `auto` where they pay (`bf16_weights_pay`; see AUTO_DTYPE_ENV). `bfloat16` with the
    kernels off or unavailable is a whole bfloat16 model on torch ops instead."""
    from radixrt.model.cpu import kernels as ck

    if config.cpu_kernels == "off" or config.quantization or not ck.available():
        return False
    if config.dtype == "auto":
        pinned = _auto_pin()
        return pinned == "bfloat16" or (pinned in ("", "auto") and bf16_weights_pay())
    return config.dtype == "bfloat16"


def auto_kv_dtype(bf16_weights: bool, windowed: bool) -> torch.dtype:
    """`--kv-cache-dtype auto` on radixrt's kernels: bfloat16 where the linear weights are
    bfloat16 (where `dtype auto` already goes bfloat16) and no layer has a sliding window or
    a soft cap; float32 elsewhere and under AUTO_DTYPE_ENV=float32 (the tests' reference).
    Twice the tokens per GiB, attention still in float32 arithmetic (each K/V rounded once as
    it is stored). Chosen on measurement (`python -m benchmarks kv_dtype`, the default model
    with bfloat16 weights, both pools in one process; docs/benchmarks.md sections 15 and 18):
    on an AMX Xeon, where the extend attention runs on AMX tiles over a bfloat16 pool
    (kernels.bf16_extend_takes), prefill 1.75-1.85x float32's tok/s and decode steps in
    0.76-0.97x its time; on an AMD EPYC Zen 5 (no AMX), where the float32 extend kernel
    then widened the bfloat16 rows as it read them, prefill at float32's rate (1.01x) and
    decode steps in 0.70x (batch 8) to 0.94x (shared prefix) its time (its extends now run
    on VDPBF16PS over a bfloat16 pool, as the AMX ones on tiles).
    `init_cpu_kernels` keeps float32 where the plan leaves an attention pass to torch."""
    if _auto_pin() == "float32" or not bf16_weights or windowed:
        return torch.float32
    return torch.bfloat16


def _auto_pin() -> str:
    """AUTO_DTYPE_ENV, lower-cased ("" when unset); ValueError for another value."""
    pinned = os.environ.get(AUTO_DTYPE_ENV, "").strip().lower()
    if pinned not in ("", "auto", "float32", "bfloat16"):
        raise ValueError(f"${AUTO_DTYPE_ENV} must be float32 or bfloat16, got {pinned!r}")
    return pinned


SWAPPED_ATTR = "radixrt_cpu_kernels"  # on a swapped model: (the settings asked, the plan)


def init_cpu_kernels(
    model: nn.Module,
    config: ModelConfig,
    dtype: torch.dtype,
    bf16_weights: bool = False,
    kv_dtype: torch.dtype | None = torch.float32,
) -> KernelPlan:
    """Swap a float32 CPU model's layers for radixrt's C kernels (radixrt/model/cpu/layers.py) as
    config.cpu_kernels plans them (radixrt/model/cpu/guard.py); returns the plan (`KernelPlan()`,
    all torch, for other dtypes, "off", or a library that does not build). With
    config.quantization "int8" every linear layer is quantized and runs the int8 kernel
    (ValueError where the kernels cannot run), at the sizes where the guard measures it
    faster the int8 x int8 kernel (w8a8.py: two activation planes for "int8", one for
    "w8a8"); with `bf16_weights` (see `bf16_on_kernels`)
    every linear layer holds bfloat16 weights, on the kernel or on torch's bfloat16 matmul
    per size as the plan says; the attention kernels are timed over a `kv_dtype` pool (None:
    `--kv-cache-dtype auto`, chosen by `auto_kv_dtype`), which the plan names (`kv_dtype`).
    Logs one line: the ISA, which ops run on which path and the attention's dtypes."""
    from radixrt.model.cpu import kernels as ck
    from radixrt.model.cpu import w8a8
    from radixrt.model.cpu.guard import LINEAR_OPS, KernelPlan, plan_for
    from radixrt.model.cpu.layers import use_cpu_kernels
    from radixrt.model.cpu.timing import Shapes

    int8 = config.quantization in ("int8", "w8a8")
    if int8 and (dtype != torch.float32 or not ck.available()):
        raise ValueError(
            f"--quantization int8 runs on radixrt's CPU kernels, which need float32 "
            f"(got {dtype}) and a C compiler (kernels: {ck.build_error() or 'ok'})"
        )
    # A model given to a second runner (benchmarks, tests) has its layers swapped already:
    # its plan is the one they were swapped for, which other settings cannot change.
    asked = (config.cpu_kernels, config.quantization, bf16_weights, kv_dtype)
    done: tuple[tuple[object, ...], KernelPlan] | None = getattr(model, SWAPPED_ATTR, None)
    if done is not None:
        if done[0] != asked:
            raise ValueError(
                f"this model's layers already run radixrt's CPU kernels as planned for "
                f"(cpu_kernels, quantization, bfloat16 weights, KV dtype) = {done[0]}; "
                f"{asked} needs a freshly loaded model"
            )
        return done[1]
    if dtype != torch.float32 or config.cpu_kernels == "off":
        return KernelPlan()
    if not ck.available():
        logger.info("radixrt CPU kernels unavailable (%s): running torch ops", ck.build_error())
        return KernelPlan()
    fixed = LINEAR_OPS if int8 else frozenset()
    weights = "int8" if int8 else "bfloat16" if bf16_weights else "float32"
    head_dim, windowed = _attention_shape(model)  # windowed: a window or a soft cap
    auto = kv_dtype is None
    kv = auto_kv_dtype(bf16_weights, windowed) if kv_dtype is None else kv_dtype
    shapes = Shapes.of(model, bf16_weights, kv)
    # int8 x int8 where the library runs it here: int8 with two activation planes (x and its
    # rounding residual: weight-only's precision), w8a8 with one
    a8_path = w8a8.best_path() if int8 else None
    if int8 and a8_path is None:
        logger.info("no AMX-INT8 or VNNI int8 path here: int8 linear layers weight-only")
    planes = 2 if config.quantization == "int8" else 1
    plan = plan_for(config.cpu_kernels, shapes, fixed=fixed, w8a8=a8_path, a8_planes=planes)
    attention = plan.uses("decode_attention") and plan.uses("extend_attention")
    if auto and kv != torch.float32 and not attention:  # a torch pass: the reference pool
        kv = torch.float32
    plan = replace(
        plan,
        kv_dtype=kv_dtype_name(kv),  # fp8_e4m3 / fp8_e5m2: with a scale per (token, KV head)
        extend_bf16=plan.uses("extend_attention")
        and ck.bf16_extend_takes(kv, head_dim, int(windowed)),
        decode_bf16=plan.uses("decode_attention")
        and ck.bf16_extend_takes(kv, head_dim, int(windowed)),
    )
    swapped = use_cpu_kernels(model, plan, weights)
    setattr(model, SWAPPED_ATTR, (asked, plan))
    dot = {"amx": " (AMX tiles where on the kernels)", "avx512bf16": " (VDPBF16PS on the kernels)"}
    logger.info(
        "%s; activations float32, linear weights %s%s, KV %s%s; %d modules swapped",
        plan.summary(),
        weights,
        dot.get(plan.isa, "") if weights == "bfloat16" else "",
        plan.kv_dtype,
        " (--kv-cache-dtype auto)" if auto else "",
        swapped,
    )
    return plan


def _attention_shape(model: nn.Module) -> tuple[int, bool]:
    """(head dim, whether any layer has a sliding window or a soft cap) of the model's
    attention layers."""
    from radixrt.model.attention.base import layer_features
    from radixrt.model.layers.attention import RadixAttention

    layers = [m.layer for m in model.modules() if isinstance(m, RadixAttention)]
    head_dim = layers[0].head_dim if layers else 0
    return head_dim, any(layer_features(layer) for layer in layers)


def fuse_cpu_decode_layers(model: nn.Module) -> int:
    """Run each decoder layer's steps as one C call where the model can (its
    `fuse_cpu_decode_layers`); returns how many layers."""
    fuse = getattr(model, "fuse_cpu_decode_layers", None)
    fused = fuse() if fuse is not None else 0
    layers = getattr(getattr(model, "model", None), "layers", ())
    from radixrt.model.cpu.fused_layer import FUSED_EXTEND_ROWS

    extend = [m for m in layers if getattr(m, "fuse_extend", False)]
    bounded = any(m.fuse_extend_rows == FUSED_EXTEND_ROWS for m in extend)
    logger.info(
        "CPU kernels: %d decoder layers fused for decode batches, %d for extend batches%s",
        fused,
        len(extend),
        f" of at most {FUSED_EXTEND_ROWS} rows (larger ones: prefill-sized linears on torch)"
        if bounded
        else "",
    )
    return fused
