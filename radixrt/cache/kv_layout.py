"""The KV pool's row layout per element type: float32/bfloat16 rows are the head's D values;
an fp8 row (e4m3 or e5m2) is D one-byte values then a float32 scale (4 bytes), one per
(token slot, KV head), so every copy of a pool row (tiers, disk blocks) carries its scale.

fp8 write: s = amax(|x|) / the format's max finite (1 where amax is 0), each value x / s
clamped to +-max finite and rounded to nearest even; read: value * s, in float32. So a row
never overflows and needs no calibration. The C kernels (csrc/cpu/kv.h) write the same bits.
"""

from __future__ import annotations

import torch

FP8_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
SCALE_BYTES = 4  # a float32 after each fp8 head row


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in (torch.float8_e4m3fn, torch.float8_e5m2)


def row_width(head_dim: int, dtype: torch.dtype) -> int:
    """Elements of `dtype` per (slot, KV head) row: D, or D + 4 for fp8 (the scale's bytes)."""
    return head_dim + SCALE_BYTES if is_fp8(dtype) else head_dim


def head_dim_of(buf: torch.Tensor) -> int:
    """The head dim of a pool buffer (rows, Hkv, row_width)."""
    return buf.shape[-1] - SCALE_BYTES if is_fp8(buf.dtype) else buf.shape[-1]


def bytes_per_head_row(head_dim: int, dtype: torch.dtype) -> int:
    """Bytes of one (slot, KV head) row of K (or of V): fp8 counts its scale."""
    return row_width(head_dim, dtype) * torch.empty((), dtype=dtype).element_size()


def to_rows(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x (..., D) as pool rows of `dtype` (..., row_width): rounded, and for fp8 scaled."""
    if not is_fp8(dtype):
        return x.to(dtype)
    x = x.float()
    fmax = torch.finfo(dtype).max
    amax = x.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / fmax)  # NaN stays NaN
    d = x.shape[-1]
    out = torch.empty((*x.shape[:-1], d + SCALE_BYTES), dtype=dtype, device=x.device)
    out[..., :d] = (x / scale).clamp_(-fmax, fmax).to(dtype)
    out[..., d:] = scale.view(dtype)  # the float32's 4 bytes, whatever the head dim
    return out


def from_rows(rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Pool rows (..., row_width) read as (..., D) of `dtype` (an fp8 row times its scale,
    computed in float32)."""
    if not is_fp8(rows.dtype):
        return rows.to(dtype)
    d = rows.shape[-1] - SCALE_BYTES
    scale = rows[..., d:].contiguous().view(torch.float32)  # (..., 1)
    return (rows[..., :d].to(torch.float32) * scale).to(dtype)


def write_rows(buf: torch.Tensor, loc: torch.Tensor, rows: torch.Tensor) -> None:
    """buf[loc] = rows, as index_copy_ (torch has no fp8 index_copy_ on the CPU: fp8 rows are
    copied as their bytes)."""
    if is_fp8(buf.dtype):
        buf, rows = buf.view(torch.uint8), rows.view(torch.uint8)
    buf.index_copy_(0, loc, rows)


def as_stored(x: torch.Tensor, pool_dtype: torch.dtype) -> torch.Tensor:
    """x as a pool of `pool_dtype` holds it, back in x's dtype (x itself when they agree)."""
    return x if x.dtype == pool_dtype else from_rows(to_rows(x, pool_dtype), x.dtype)
