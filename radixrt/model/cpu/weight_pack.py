"""Linear weights in the layouts the CPU kernels read (csrc/cpu/gemm*.c), and the copy
torch's path multiplies in the kernels' arithmetic.

Packed layouts, made once at load by the loaded library (use a packed weight only with the
library that packed it):
- float32 and int8: panels (ceil(N/32), K, 32), PANEL output columns each, zero-padded;
  int8 with one float32 scale per output column;
- bfloat16: 1-D, panels as above on the widening variants (avx2, avx512, portable), k pairs
  as AMX tiles and VDPBF16PS read them on the BF16_DOT_ISAS.
"""

from __future__ import annotations

import torch

from radixrt.model.cpu.kernels import bf16_dot, lib

__all__ = [
    "PANEL",
    "pack_weight",
    "pack_weight_bf16",
    "pack_weight_int8",
    "torch_weight",
    "unpack_weight",
    "unpack_weight_bf16",
]

PANEL = 32  # output columns per packed panel (NR in gemm.c)


def pack_weight(w: torch.Tensor) -> torch.Tensor:
    """(ceil(N/32), K, 32) packed copy of a float32 weight w (N, K); see gemm.c."""
    w = w.detach().to(torch.float32).contiguous()
    n, k = w.shape
    out = torch.empty((n + PANEL - 1) // PANEL, k, PANEL, dtype=torch.float32)
    lib().rt_pack_f32(w.data_ptr(), n, k, out.data_ptr())
    return out


def pack_weight_bf16(w: torch.Tensor) -> torch.Tensor:
    """A weight w (N, K) rounded to bfloat16 (nearest even, as `w.bfloat16()` rounds) and
    packed, 1-D, in the loaded variant's layout: panels as pack_weight's, or k pairs as AMX
    tiles read them (the BF16_DOT_ISAS; see gemm.c and gemm_amx.c). Use it only with the
    library that packed it."""
    w = w.detach().to(torch.float32).contiguous()
    n, k = w.shape
    out = torch.empty(lib().rt_bf16_packed_size(n, k), dtype=torch.bfloat16)
    lib().rt_pack_bf16(w.data_ptr(), n, k, out.data_ptr())
    return out


def unpack_weight_bf16(packed: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """The (n, k) float32 values of a pack_weight_bf16 weight."""
    if packed.dtype != torch.bfloat16 or packed.numel() != lib().rt_bf16_packed_size(n, k):
        raise ValueError(f"not a bfloat16 weight of ({n}, {k}) packed by this library")
    w = torch.empty(n, k, dtype=torch.float32)
    lib().rt_unpack_bf16(packed.data_ptr(), n, k, w.data_ptr())
    return w


def pack_weight_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight-only int8 of a float weight w (N, K): the packed int8 values (ceil(N/32), K, 32)
    and one float32 scale per output column (ceil(N/32) * 32,), max |w[n]| / 127, so that
    w[n, k] ~= q[n, k] * scale[n] with q = round(w / scale) in [-127, 127]; see gemm.c."""
    w = w.detach().to(torch.float32).contiguous()
    n, k = w.shape
    panels = (n + PANEL - 1) // PANEL
    out = torch.empty(panels, k, PANEL, dtype=torch.int8)
    scale = torch.empty(panels * PANEL, dtype=torch.float32)
    lib().rt_pack_q8(w.data_ptr(), n, k, out.data_ptr(), scale.data_ptr())
    return out, scale


def unpack_weight(packed: torch.Tensor, n: int, scale: torch.Tensor | None = None) -> torch.Tensor:
    """The (n, K) float32 weight a packed one stands for (int8 values times their scales)."""
    w = packed.permute(0, 2, 1).reshape(-1, packed.shape[1])[:n].to(torch.float32)
    return w if scale is None else w * scale[:n, None]


def torch_weight(w: torch.Tensor, weights: str) -> torch.Tensor:
    """The (out, in) copy of W that PackedLinear's torch path multiplies, in the kernels'
    arithmetic: float32 for float32 panels; for bfloat16 panels W rounded to bfloat16, kept
    bfloat16 where the kernel variant multiplies bfloat16 pairs (ck.bf16_dot: x is rounded
    too, and torch's matmul then runs on AMX tiles or avx512_bf16), else widened back to
    float32 (x not rounded, as the widening kernels; torch's bfloat16 matmul is emulated on
    such CPUs, about 1 GFLOP/s on an AVX2 EPYC, where its float32 one runs at MKL's rate)."""
    if weights != "bfloat16":
        return w.float()
    rounded = w.to(torch.bfloat16)
    return rounded if bf16_dot() else rounded.float()
