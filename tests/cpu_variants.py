"""The CPU kernel variants a test forces (RADIXRT_CPU_ISA), of those this CPU runs."""

from __future__ import annotations

from radixrt.model.cpu import build as cpu_build
from radixrt.model.cpu import kernels as ck

# avx512bf16 is avx512 plus VDPBF16PS kernels (csrc/cpu/gemm_bf16dot.c for bfloat16 linear
# layers, extend_attention_dot.c for extends over bfloat16 KV): every other kernel is built
# from the same sources at the same vector width, so only tests of those (bf16_linear) run it
# (elsewhere it would repeat avx512's tests).
GEMM_ONLY = frozenset({"avx512bf16"})


def variants(bf16_linear: bool = False) -> tuple[str, ...]:
    """The variants this CPU runs, best first; those in GEMM_ONLY only with `bf16_linear`."""
    if not ck.available():
        return ()
    return tuple(i for i in cpu_build.supported_isas() if bf16_linear or i not in GEMM_ONLY)
