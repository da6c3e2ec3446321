"""The guard's measurements (guard.py): each C kernel against the torch op it replaces, on a
model's shapes, with the model's own weights for the linear layers.

Kernel and torch runs alternate over ROUNDS rounds and each side keeps its fastest: noise
from other processes only ever adds time, and alternating puts both sides in the same stretch
of the machine's drift. Per op the figures are sums over the sizes it is judged at.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from radixrt.cache.kv_layout import from_rows, to_rows, write_rows
from radixrt.model.attention.decode_cascade import attend_decode, build_decode_plan
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import weight_pack as wp
from radixrt.model.layers.activation import GatedActivation
from radixrt.model.layers.norm import RMSNorm
from radixrt.model.layers.rotary import QKVRotary

ROUNDS = 3
MIN_SECONDS = 0.01  # each timed run repeats its op for at least this long
ROW_SIZES = (1, 16, 256)  # rows of the element-wise ops' timings (decode and prefill sizes)
PREFILL_ROWS = 256
DECODE_BATCH, DECODE_KEYS = 8, 256  # a decode batch: requests x keys each
DECODE_SHARED = (0, 224)  # keys all requests share: none, and most (a common system prompt)
EXTEND_ROWS = 256


@dataclass(frozen=True)
class Shapes:
    """What the guard times a model at: its linear layers (in, out, count, is the LM head),
    RMSNorm widths, MLP widths and attention heads (q heads, KV heads, head dim)."""

    linears: tuple[tuple[int, int, int, bool], ...]
    norms: tuple[int, ...]
    mlps: tuple[int, ...]
    heads: tuple[tuple[int, int, int], ...]
    weights: dict[tuple[int, int], torch.Tensor]  # one (out, in) weight per linear shape
    bf16_weights: bool = False  # the linear layers will hold bfloat16 weights
    kv_dtype: torch.dtype = torch.float32  # the KV pool's (attention is timed over it)

    def key(self) -> list:
        key = [list(self.linears), list(self.norms), list(self.mlps), list(self.heads)]
        key += ["bf16 weights"] if self.bf16_weights else []
        kv = {torch.bfloat16: "bf16", torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}
        return key + [f"{kv[self.kv_dtype]} kv"] if self.kv_dtype in kv else key  # own plans

    @staticmethod
    def of(
        model: nn.Module, bf16_weights: bool = False, kv_dtype: torch.dtype = torch.float32
    ) -> Shapes:
        linears: dict[tuple[int, int, bool], int] = {}
        weights: dict[tuple[int, int], torch.Tensor] = {}
        norms, mlps, heads = set(), set(), set()
        for name, m in model.named_modules():
            kind = type(m)
            if kind is nn.Linear:
                shape = (m.in_features, m.out_features, name.split(".")[-1] == "lm_head")
                linears[shape] = linears.get(shape, 0) + 1
                weights.setdefault(shape[:2], m.weight.detach())
            elif kind is RMSNorm:
                norms.add(m.weight.numel())
            elif kind is QKVRotary:
                hq, hk = m.sizes[0] // m.head_dim, m.sizes[1] // m.head_dim
                heads.add((hq, hk, m.head_dim))
            act, down = getattr(m, "act_fn", None), getattr(m, "down_proj", None)
            if type(act) is GatedActivation and act.name == "silu" and down is not None:
                mlps.add(down.weight.shape[1])  # this rank's part under tensor parallelism
        return Shapes(
            tuple(sorted((i, o, n, head) for (i, o, head), n in linears.items())),
            tuple(sorted(norms)),
            tuple(sorted(mlps)),
            tuple(sorted(heads)),
            weights,
            bf16_weights,
            kv_dtype,
        )


def _best(fn: Callable[[], object]) -> float:
    """Seconds per call of fn: repeated for MIN_SECONDS after one warm-up call, the mean."""
    fn()
    reps, t0 = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= MIN_SECONDS:
            return elapsed / reps


Pair = tuple[Callable[[], object], Callable[[], object], int]  # kernel, torch, weight


def _race(pairs: list[Pair]) -> tuple[float, float]:
    """(kernel, torch) seconds summed over the pairs (each times its weight), each side's
    best of ROUNDS alternating rounds."""
    best_k, best_t = [float("inf")] * len(pairs), [float("inf")] * len(pairs)
    for _ in range(ROUNDS):
        for i, (kern, ref, _) in enumerate(pairs):
            best_k[i] = min(best_k[i], _best(kern))
            best_t[i] = min(best_t[i], _best(ref))
    weights = [w for _, _, w in pairs]
    return (
        sum(w * t for w, t in zip(weights, best_k)),
        sum(w * t for w, t in zip(weights, best_t)),
    )


def _linear_pair(w: torch.Tensor, m: int, count: int, bf16: bool) -> Pair:
    """The kernel on packed panels against F.linear, both in the model's weight type (with
    bfloat16 weights torch multiplies PackedLinear's torch copy, `wp.torch_weight`, by x in that
    copy's dtype, as PackedLinear's torch path)."""
    n, k = w.shape
    x = torch.randn(m, k)
    if bf16:
        packed, wb = wp.pack_weight_bf16(w), wp.torch_weight(w, "bfloat16")

        def ref() -> torch.Tensor:
            return F.linear(x.to(wb.dtype), wb).float()

        return (lambda: ck.linear(x, packed, n), ref, count)
    packed = wp.pack_weight(w)
    return (lambda: ck.linear(x, packed, n), lambda: F.linear(x, w), count)


def _linears(shapes: Shapes, rows: tuple[int, ...], heads: bool) -> list[Pair]:
    """Each linear shape at each row count, weighted by how many layers have it."""
    return [
        _linear_pair(shapes.weights[(k, n)], m, count, shapes.bf16_weights)
        for k, n, count, is_head in shapes.linears
        if heads or not is_head
        for m in rows
    ]


def _linear_decode(shapes: Shapes, decode_rows: int) -> list[Pair]:
    return _linears(shapes, (1, decode_rows), heads=True)


def _linear_prefill(shapes: Shapes, decode_rows: int) -> list[Pair]:
    return _linears(shapes, (PREFILL_ROWS,), heads=False)  # prompts' LM head is one row each


def _rmsnorm_pair(h: int, t: int) -> Pair:
    norm = RMSNorm(h, 1e-5)
    w, x, res = norm.weight.detach(), torch.randn(t, h), torch.randn(t, h)
    return (lambda: ck.rmsnorm_(x, w, 1e-5, res), lambda: norm(x, res), 1)


def _silu_mul_pair(inter: int, t: int) -> Pair:
    act, gu = GatedActivation("silu"), torch.randn(t, 2 * inter)
    return (lambda: ck.silu_mul(gu), lambda: act(gu), 1)


def _rotary_pair(hq: int, hk: int, d: int, t: int) -> Pair:
    rot = QKVRotary(hq, hk, d)
    qkv, angles = torch.randn(t, (hq + 2 * hk) * d), torch.randn(t, d // 2)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    q, k, _ = qkv.split(rot.sizes, dim=-1)
    return (lambda: ck.rotary_(q, k, cos, sin, d), lambda: rot(qkv, cos, sin), 1)


def decode_attention_pair(
    hq: int,
    hk: int,
    d: int,
    shared: int,
    b: int = DECODE_BATCH,
    n: int = DECODE_KEYS,
    kv_dtype: torch.dtype = torch.float32,
    bf16: bool | None = None,
) -> Pair:
    """A decode batch of b requests over n keys each: store each request's new K/V, attend
    over its keys (scattered slots, the first `shared` the same in every request); torch
    stores with index_copy_ and attends as the torch_native backend does (with its cascade
    plan where rows share slots); the kernel with bfloat16 products where `bf16`, by default
    the arithmetic the model's decode runs over this pool here (kernels.bf16_extend_takes)."""
    scale = d**-0.5
    own = n - shared
    k_buf = to_rows(torch.randn(shared + b * own, hk, d), kv_dtype)
    v_buf = to_rows(torch.randn(shared + b * own, hk, d), kv_dtype)
    perm = torch.randperm(shared + b * own).int()
    table = torch.cat([perm[:shared].expand(b, shared), perm[shared:].view(b, own)], dim=1)
    rows, lens, out_loc = torch.arange(b), torch.full((b,), n), table[:, -1].long()
    q, k, v = torch.randn(b, (hq + 2 * hk) * d).split([hq * d, hk * d, hk * d], dim=-1)
    plan = build_decode_plan(table.long(), [n] * b)

    def ref() -> None:
        write_rows(k_buf, out_loc, to_rows(k.reshape(-1, hk, d), kv_dtype))
        write_rows(v_buf, out_loc, to_rows(v.reshape(-1, hk, d), kv_dtype))
        attend_decode(q.reshape(b, -1, d), plan, k_buf, v_buf, hk, scale)

    if bf16 is None:
        bf16 = ck.bf16_extend_takes(kv_dtype, d)

    def kern() -> None:
        ck.decode_attention(q, k, v, k_buf, v_buf, out_loc, table, rows, lens, scale, bf16)

    return (kern, ref, 1)


def _extend_attention_pair(hq: int, hk: int, d: int, kv_dtype: torch.dtype) -> Pair:
    """One prompt of EXTEND_ROWS new tokens, causal, no cached prefix (SDPA for torch, over
    the pool's K/V widened as torch_native reads them)."""
    e, scale = EXTEND_ROWS, d**-0.5
    k_buf, v_buf = (
        to_rows(torch.randn(e, hk, d), kv_dtype),
        to_rows(torch.randn(e, hk, d), kv_dtype),
    )
    slots = torch.arange(e, dtype=torch.int32)
    q, out = torch.randn(e, hq, d), torch.empty(e, hq * d)

    def ref() -> None:
        F.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0),
            from_rows(k_buf, q.dtype).transpose(0, 1).unsqueeze(0),
            from_rows(v_buf, q.dtype).transpose(0, 1).unsqueeze(0),
            is_causal=True,
            scale=scale,
            enable_gqa=hq != hk,
        )

    return (lambda: ck.extend_attention(q, k_buf, v_buf, slots, 0, scale, out), ref, 1)


_PAIRS: dict[str, Callable[[Shapes, int], list[Pair]]] = {
    "linear_decode": _linear_decode,
    "linear_prefill": _linear_prefill,
    "rmsnorm": lambda s, _: [_rmsnorm_pair(h, t) for h in s.norms for t in ROW_SIZES],
    "silu_mul": lambda s, _: [_silu_mul_pair(i, t) for i in s.mlps for t in ROW_SIZES],
    "rotary": lambda s, _: [_rotary_pair(*h, t) for h in s.heads for t in ROW_SIZES],
    "decode_attention": lambda s, _: [
        decode_attention_pair(*h, shared, kv_dtype=s.kv_dtype)
        for h in s.heads
        for shared in DECODE_SHARED
    ],
    "extend_attention": lambda s, _: [_extend_attention_pair(*h, s.kv_dtype) for h in s.heads],
}


def time_ops(
    shapes: Shapes, ops: frozenset[str], decode_rows: int
) -> dict[str, tuple[float, float]]:
    """(kernel, torch) seconds for each op of `ops` the model has (an op with no shapes, e.g.
    rotary in a model without QKVRotary, is left out)."""
    out: dict[str, tuple[float, float]] = {}
    with torch.inference_mode():
        for op in sorted(ops):
            pairs = _PAIRS[op](shapes, decode_rows)
            if pairs:
                out[op] = _race(pairs)
    return out
