"""The decode-attention kernel of bfloat16 products over a bfloat16 KV pool
(rt_decode_attention_bf16_kvbf16, csrc/cpu/attention_pairs.h): the extend kernel's arithmetic
for decode rows. q * scale and the softmax probabilities are rounded to bfloat16, products
are exact, sums, max and softmax float32; on VDPBF16PS in the amx and avx512bf16 variants, in
float32 FMAs on the others (same values).

Checked on every variant this CPU runs:
- where a request attends in one part (no split key ranges, no shared prefix), against an
  emulation of that arithmetic in float64: 2e-4 (the kernel's exp differs from torch's in the
  last bit or two, which can move a probability across a bfloat16 rounding boundary: one
  step of 2^-8 of it; measured up to 3e-5);
- on every path (split ranges, cascades over shared prefixes, the group product), against
  the float32 kernel and SDPA with the extend kernel's bfloat16 tolerances
  (tests/kernels/test_cpu_extend_bf16.py): a part's probabilities are rounded against its own
  max, so a split request differs from one part by the probabilities' rounding only;
- the new K/V stored bit for bit as the float32-arithmetic kernel stores them."""

from __future__ import annotations

import pytest
import torch
from cpu_variants import variants

from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import reference as ref

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")
MAX_ERR, MEAN_ERR = 2e-2, 2e-3


@pytest.fixture(autouse=True, params=variants())
def isa(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("RADIXRT_CPU_ISA", request.param)
    assert ck.isa() == request.param
    return request.param


def _batch(hq: int, hkv: int, d: int, batch: int, max_len: int, prefix: int, seed: int = 0):
    """A bfloat16 pool (unused slots NaN: a read of one shows), `batch` requests of up to
    max_len keys whose first `prefix` slots are the same, q and the new K/V."""
    torch.manual_seed(seed)
    own = batch * max_len
    k_buf = torch.full((prefix + own + 10, hkv, d), float("nan")).bfloat16()
    v_buf = k_buf.clone()
    order = torch.randperm(prefix + own)
    k_buf[order] = torch.randn(prefix + own, hkv, d).bfloat16()
    v_buf[order] = torch.randn(prefix + own, hkv, d).bfloat16()
    table = torch.zeros(batch + 1, max_len + 5, dtype=torch.int32)
    lens = torch.randint(prefix + 1, max_len, (batch,))
    lens[0] = max_len
    rows, at = torch.arange(1, batch + 1), prefix
    for i, n in enumerate(lens.tolist()):
        table[rows[i], :prefix] = order[:prefix].int()
        table[rows[i], prefix:n] = order[at : at + n - prefix].int()
        at += n - prefix
    out_loc = torch.stack([table[rows[i], n - 1].long() for i, n in enumerate(lens.tolist())])
    qkv = torch.randn(batch, (hq + 2 * hkv) * d)  # as the extend tests draw them
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    return q, k, v, k_buf, v_buf, out_loc, table, rows, lens


def _emulated(q, k_buf, v_buf, table, rows, lens, scale: float, hkv: int) -> torch.Tensor:
    """The kernel's arithmetic for a request attended in one part, in float64."""
    b, d = q.shape[0], k_buf.shape[-1]
    hq = q.shape[1] // d
    outs = []
    for i in range(b):
        slots = table[rows[i], : lens[i]].long()
        kk = k_buf[slots].double().transpose(0, 1).repeat_interleave(hq // hkv, 0)
        vv = v_buf[slots].double().transpose(0, 1).repeat_interleave(hq // hkv, 0)
        qi = (q[i].view(hq, d) * scale).bfloat16().double()
        s = torch.einsum("hd,hnd->hn", qi, kk)
        p = torch.exp(s - s.max(-1, keepdim=True).values).float()
        o = torch.einsum("hn,hnd->hd", p.bfloat16().double(), vv) / p.double().sum(-1, True)
        outs.append(o.reshape(-1).float())
    return torch.stack(outs)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    err = (got - want).abs()
    assert err.max().item() <= MAX_ERR, err.max().item()
    assert err.mean().item() <= MEAN_ERR, err.mean().item()


# (9, 3, 64) SmolLM2; (2, 1, 128), (12, 2, 128): VDPBF16PS rows of 128, six query heads per
# KV head in passes; (4, 1, 96), (8, 2, 32): the float32 loops (96) and one pair vector (32);
# (14, 2, 64): seven query heads per KV head, a request's own scores as a matrix product
# (attention_pairs.h's scores_pairs_gemm, which the groups of a shared prefix take too).
# Batches: one per request (7 x 250: one part each), split key ranges (1 x 3000, 3 x 2100), a
# shared prefix (cascade: 5 x 400 over 300; group product: 8 x 600 over 530 at 9:3).
HEADS = [(9, 3, 64), (2, 1, 128), (12, 2, 128), (4, 1, 96), (8, 2, 32), (14, 2, 64)]
BATCHES = [(7, 250, 0), (1, 3000, 0), (3, 2100, 0), (5, 400, 300), (8, 600, 530)]


@pytest.mark.parametrize(("hq", "hkv", "d"), HEADS)
@pytest.mark.parametrize(("batch", "max_len", "prefix"), BATCHES)
def test_decode_bf16_products(
    hq: int, hkv: int, d: int, batch: int, max_len: int, prefix: int
) -> None:
    q, k, v, k_buf, v_buf, out_loc, table, rows, lens = _batch(hq, hkv, d, batch, max_len, prefix)
    scale = d**-0.5
    kb, vb = k_buf.clone(), v_buf.clone()
    got = ck.decode_attention(q, k, v, k_buf, v_buf, out_loc, table, rows, lens, scale, True)
    f32_pool = (kb.clone(), vb.clone())
    f32 = ck.decode_attention(q, k, v, *f32_pool, out_loc, table, rows, lens, scale)
    want = ref.decode_attention_ref(q, k, v, kb, vb, out_loc, table, rows, lens, scale)
    assert torch.equal(k_buf.view(torch.int16), f32_pool[0].view(torch.int16))  # stored alike
    assert torch.equal(v_buf.view(torch.int16), f32_pool[1].view(torch.int16))
    assert torch.isfinite(got).all()
    _close(got, f32)
    _close(got, want)
    if batch >= 4 and max_len < 1024 and not prefix:  # every request in one part
        exact = _emulated(q, k_buf, v_buf, table, rows, lens, scale, hkv)
        torch.testing.assert_close(got, exact, rtol=1e-3, atol=2e-4)


def test_every_variant_computes_the_same_products() -> None:
    """The pass with the new K/V already in the pool, one part per request: what the
    avx512bf16 / amx loops compute, the float32 loops of the other variants compute too."""
    q, _, _, k_buf, v_buf, _, table, rows, lens = _batch(9, 3, 64, 6, 300, 0, seed=3)
    got = ck.decode_attention(q, None, None, k_buf, v_buf, None, table, rows, lens, 0.125, True)
    exact = _emulated(q, k_buf, v_buf, table, rows, lens, 0.125, 3)
    torch.testing.assert_close(got, exact, rtol=1e-3, atol=2e-4)


def test_bf16_products_need_a_bfloat16_pool() -> None:
    q, k, v, k_buf, v_buf, out_loc, table, rows, lens = _batch(9, 3, 64, 2, 50, 0)
    with pytest.raises(ValueError, match="bfloat16 KV pool"):
        ck.decode_attention(q, k, v, k_buf.float(), v_buf.float(), out_loc, table, rows, lens,
                            0.125, True)  # fmt: skip
