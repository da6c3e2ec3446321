"""The guard's measurements for int8 linear layers (guard.py): the W8A8 kernel (w8a8.py, on
one path: AMX-INT8 tiles or VNNI) against the weight-only int8 kernel it would replace, on a
model's own weights, at decode sizes (1 and DECODE_ROWS rows, LM head included) and at
prefill sizes (PREFILL_ROWS rows, LM head left out).

Each side's time is its fastest single call over CALLS alternating calls, not timing.py's mean
over a window: on a loaded machine a short call's mean is mostly waiting for a core (measured
at 256 x 576 -> 3072 under others' load: int8 x int8 fastest 0.5 ms against weight-only 3.6
ms, medians 20 against 16 ms), and noise only ever adds time.
"""

from __future__ import annotations

import time

import torch

from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import w8a8
from radixrt.model.cpu import weight_pack as wp
from radixrt.model.cpu.timing import PREFILL_ROWS, Pair, Shapes

INT8_OPS = ("w8a8_decode", "w8a8_prefill")
CALLS = 20


def _fastest(pairs: list[Pair]) -> tuple[float, float]:
    """(int8 x int8, weight-only) seconds summed over the pairs (each times its weight), each
    call's fastest of CALLS, the two sides alternating call by call."""
    total_a = total_w = 0.0
    for fa, fw, weight in pairs:
        fa(), fw()  # warm-up: packing buffers, tiles
        best_a = best_w = float("inf")
        for _ in range(CALLS):
            t0 = time.perf_counter()
            fa()
            t1 = time.perf_counter()
            fw()
            t2 = time.perf_counter()
            best_a, best_w = min(best_a, t1 - t0), min(best_w, t2 - t1)
        total_a += weight * best_a
        total_w += weight * best_w
    return total_a, total_w


def _pair(w: torch.Tensor, m: int, count: int, path: str, planes: int) -> Pair:
    n, k = w.shape
    x = torch.randn(m, k)
    q8, scale = wp.pack_weight_int8(w)
    packed = w8a8.pack(q8, n, k)
    return (
        lambda: w8a8.linear(x, packed, scale, n, None, path, planes),
        lambda: ck.linear(x, q8, n, None, scale),
        count,
    )


def time_w8a8(
    shapes: Shapes, ops: frozenset[str], path: str, planes: int, decode_rows: int
) -> dict[str, tuple[float, float]]:
    """(W8A8, weight-only) seconds for each op of `ops` among INT8_OPS."""
    rows = {"w8a8_decode": ((1, decode_rows), True), "w8a8_prefill": ((PREFILL_ROWS,), False)}
    out: dict[str, tuple[float, float]] = {}
    with torch.inference_mode():
        for op in INT8_OPS:
            if op not in ops:
                continue
            sizes, heads = rows[op]
            pairs = [
                _pair(shapes.weights[(k, n)], m, count, path, planes)
                for k, n, count, is_head in shapes.linears
                if heads or not is_head
                for m in sizes
            ]
            if pairs:
                out[op] = _fastest(pairs)
    return out
