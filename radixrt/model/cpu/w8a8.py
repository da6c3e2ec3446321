"""W8A8 int8 linear layers on radixrt's CPU kernels (csrc/cpu/gemm_q8a8.c): the int8 weights
of `pack_weight_int8` re-laid for AMX-INT8 tiles and AVX-512 VNNI, activations quantized per
row (symmetric int8, scale max |x| / 127) in the call, int32 sums rescaled to float32.

PATHS names the kernel's paths; `best_path()` is the best one this library runs here (None
where neither does: int8 layers keep the weight-only kernel). $RADIXRT_Q8A8_PATH ("amx",
"vnni" or "none") pins one (tests force each path the CPU has).
"""

from __future__ import annotations

import os

import torch

from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import weight_pack as wp

PATHS = {"vnni": 1, "amx": 2}  # the kernel's path numbers (rt_linear_q8a8)
PATH_ENV = "RADIXRT_Q8A8_PATH"


def paths() -> tuple[str, ...]:
    """The paths this library runs on this CPU, best first (AMX runs VNNI too)."""
    if not ck.available():
        return ()
    best = int(ck.lib().rt_q8a8_path())
    return tuple(name for name, num in sorted(PATHS.items(), key=lambda p: -p[1]) if num <= best)


def best_path() -> str | None:
    """$RADIXRT_Q8A8_PATH when set (ValueError when this CPU cannot run it), else the best of
    `paths()`; None: no W8A8 here (or "none" asked for)."""
    name = os.environ.get(PATH_ENV, "").strip().lower()
    have = paths()
    if name in ("", "auto"):
        return have[0] if have else None
    if name == "none":
        return None
    if name not in PATHS:
        raise ValueError(f"${PATH_ENV} must be auto, none, amx or vnni, got {name!r}")
    if name not in have:
        raise ValueError(f"${PATH_ENV}={name}: this CPU and library run {have or 'neither'}")
    return name


def pack(q8: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """The W8A8 layout (1-D int8) of pack_weight_int8's panels `q8` of an (n, k) weight."""
    if q8.dtype != torch.int8 or q8.shape[1] != k or q8.shape[0] * wp.PANEL < n:
        raise ValueError(f"not int8 panels of an ({n}, {k}) weight: {tuple(q8.shape)}")
    out = torch.empty(int(ck.lib().rt_q8a8_packed_size(n, k)), dtype=torch.int8)
    ck.lib().rt_pack_q8a8(q8.contiguous().data_ptr(), n, k, out.data_ptr())
    return out


def linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    scale: torch.Tensor,
    n: int,
    bias: torch.Tensor | None = None,
    path: str = "amx",
    planes: int = 1,
) -> torch.Tensor:
    """x (M, K) float32 quantized per row to int8, @ (q8 * scale)^T + bias -> (M, n) float32,
    `packed` from `pack` and `scale` pack_weight_int8's; on `path` (one of `paths()`). With
    `planes` 2 x's rounding residual is quantized and multiplied too (about 14 bits of x, at
    twice the int8 products)."""
    if x.dtype != torch.float32 or x.stride(-1) != 1:
        raise ValueError("x must be float32 with contiguous rows")
    m, k = x.shape
    if packed.dtype != torch.int8 or packed.numel() != ck.lib().rt_q8a8_packed_size(n, k):
        raise ValueError(f"not a W8A8 weight of ({n}, {k})")
    y = torch.empty(m, n, dtype=torch.float32)
    rc = ck.lib().rt_linear_q8a8(
        x.data_ptr(), x.stride(0), m, k, packed.data_ptr(), scale.data_ptr(), n,
        None if bias is None else bias.data_ptr(), y.data_ptr(), n, PATHS.get(path, 0), planes,
    )  # fmt: skip
    if rc == -1:
        raise ValueError(f"W8A8 path {path!r} with {planes} planes does not run here ({paths()})")
    if rc != 0:
        raise MemoryError("rt_linear_q8a8: no memory for the quantized rows")
    return y


def _quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 values as float, scale per row) of x as the kernel rounds it."""
    amax = x.abs().amax(1, keepdim=True)
    q = torch.where(amax > 0, (x * (127 / amax)).round(), 0)
    return q, (amax / 127)[:, 0]


def linear_ref(
    x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, planes: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """(W8A8 result, float32 result) in torch for x (M, K) and a float weight w (N, K): the
    weight quantized per column and x per row (and its residual, with two planes) as the
    kernel does, products summed exactly (in float64: |sums| < 2^53), scaled; the second is
    plain float32 x @ w^T + bias."""
    ws = w.abs().amax(1).clamp_min(0) / 127
    wq = torch.where(ws[:, None] > 0, (w / ws[:, None]).round().clamp(-127, 127), 0)
    ws = torch.where(ws > 0, ws, 1.0)
    xq, xs = _quantize(x)
    y = (xq.double() @ wq.double().t()).float() * xs[:, None]
    if planes == 2:
        rq, rs = _quantize(torch.addcmul(x, xq, xs[:, None], value=-1))
        y = y + (rq.double() @ wq.double().t()).float() * rs[:, None]
    y = y * ws
    ref = x @ w.t()
    if bias is not None:
        y, ref = y + bias, ref + bias
    return y, ref
