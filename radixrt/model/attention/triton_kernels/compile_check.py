"""Compile every Triton attention kernel to a cubin for sm_90 and sm_80 without a GPU, so CI
catches what the CPU interpreter cannot (layout, dot-shape and type errors of real codegen).

`python -m radixrt.model.attention.triton_kernels.compile_check` (needs TRITON_INTERPRET unset and
triton >= 3.4, whose ASTSource takes `constexprs`).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from radixrt.model.attention.triton_kernels import INTERPRETED
from radixrt.model.attention.triton_kernels import decode_attention as da
from radixrt.model.attention.triton_kernels import extend_attention as ea

ARCHS = (90, 80)
_DTYPES = {"bf16": "*bf16", "fp16": "*fp16", "fp32": "*fp32"}
_EXTEND_STRIDES = ("qt", "qh", "kt", "kh", "vt", "vh", "ot", "oh")
_SPLIT_STRIDES = ("qb", "qh", "kt", "kh", "vt", "vh")
# (KV dtype, head_dim, GQA group, sliding window, soft cap)
_SHAPES = (
    ("bf16", 128, 4, 0, 0.0),
    ("fp16", 80, 1, 0, 0.0),
    ("fp32", 64, 2, 0, 0.0),
    ("bf16", 256, 2, 4096, 50.0),
)


def kernel_variants() -> list[tuple[str, Any, dict[str, str], dict[str, Any], int]]:
    """(label, kernel, signature, constexprs, num_warps) covering the shapes served: 16- and
    32-bit KV, head_dim 64/80/128/256, MHA and GQA groups up to 8, full attention and a
    sliding window with a soft cap (Gemma 2's)."""
    out = []
    for dt, d, group, window, cap in _SHAPES:
        layer = dict(WINDOW=window, SOFTCAP=cap)
        tag = f" w{window} cap{cap:g}" if window or cap else ""
        bd = max(16, triton.next_power_of_2(d))
        prec = ea.dot_precision_name(dt == "fp32")
        ptr = _DTYPES[dt]
        sig = {"Q": ptr, "K_buf": ptr, "V_buf": ptr, "Out": ptr}
        sig |= {"qo_indptr": "*i32", "kv_indptr": "*i32", "kv_indices": "*i32", "sm_scale": "fp32"}
        sig |= {f"stride_{s}": "i32" for s in _EXTEND_STRIDES}
        consts = dict(
            GROUP=group,
            HEAD_DIM=d,
            BLOCK_D=bd,
            BLOCK_M=ea.BLOCK_M,
            BLOCK_N=ea.BLOCK_N,
            DOT_PRECISION=prec,
            **layer,
        )
        out.append((f"extend {dt} d{d} g{group}{tag}", ea._extend_kernel, sig, consts, 8))

        sig = {"Q": ptr, "K_buf": ptr, "V_buf": ptr, "Mid_O": "*fp32", "Mid_LSE": "*fp32"}
        sig |= {"kv_indptr": "*i32", "kv_indices": "*i32", "sm_scale": "fp32"}
        sig |= {f"stride_{s}": "i32" for s in _SPLIT_STRIDES}
        consts = dict(
            GROUP=group,
            NUM_HEADS=8 * group,
            HEAD_DIM=d,
            BLOCK_D=bd,
            BLOCK_H=max(16, triton.next_power_of_2(group)),
            BLOCK_N=da.BLOCK_N,
            NUM_SPLITS=8,
            DOT_PRECISION=prec,
            **layer,
        )
        label = f"decode split {dt} d{d} g{group}{tag}"
        out.append((label, da._decode_split_kernel, sig, consts, 4))

        sig = {"Mid_O": "*fp32", "Mid_LSE": "*fp32", "Out": ptr, "kv_indptr": "*i32"}
        sig |= {"stride_ob": "i32", "stride_oh": "i32"}
        consts = dict(NUM_HEADS=8 * group, HEAD_DIM=d, BLOCK_D=bd, BLOCK_N=da.BLOCK_N,
                      NUM_SPLITS=6, BLOCK_S=8, WINDOW=window)  # fmt: skip
        out.append((f"decode merge {dt} d{d}{tag}", da._decode_merge_kernel, sig, consts, 4))
    return out


def compile_all(arch: int) -> list[str]:
    """Compile every variant for sm_{arch}; returns their labels; raises on the first error."""
    if INTERPRETED:
        raise RuntimeError("TRITON_INTERPRET is set: the kernels were not built for codegen")
    done = []
    for label, kernel, sig, consts, num_warps in kernel_variants():
        full_sig = {**sig, **{k: "constexpr" for k in consts}}
        src = ASTSource(fn=kernel, signature=full_sig, constexprs=consts)
        compiled = triton.compile(
            src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps}
        )
        if not compiled.asm.get("cubin"):
            raise RuntimeError(f"{label}: no cubin for sm_{arch}")
        done.append(label)
    return done


def main() -> int:
    for arch in ARCHS:
        t0 = time.perf_counter()
        labels = compile_all(arch)
        print(f"sm_{arch}: compiled {len(labels)} kernels in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
