"""The CPU attention kernels over a bfloat16 KV pool, for every ISA variant this CPU runs: new
K/V rounded to nearest even as they are stored, every element widened as it is read, float32
arithmetic, so the outputs equal SDPA over the widened pool as closely as float32 pools do."""

from __future__ import annotations

import pytest
import torch
from cpu_variants import variants

from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import reference as ref

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")


@pytest.fixture(autouse=True, params=variants())
def isa(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("RADIXRT_CPU_ISA", request.param)
    assert ck.isa() == request.param
    return request.param


def _pool(slots: int, hkv: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(slots, hkv, d).bfloat16(), torch.randn(slots, hkv, d).bfloat16()


# (9, 3, 64), (2, 1, 128): weighted rows in registers; (12, 2, 128): six query heads per KV
# head, in passes of as many as the registers hold; (8, 2, 24): the generic loops;
# (1, 3000) split-key ranges; (7, 250) one item per request.
@pytest.mark.parametrize(("hq", "hkv", "d"), [(9, 3, 64), (2, 1, 128), (12, 2, 128), (8, 2, 24)])
@pytest.mark.parametrize(("batch", "max_len"), [(1, 250), (7, 250), (1, 3000), (3, 2100)])
def test_decode_attention_over_bf16_kv(hq: int, hkv: int, d: int, batch: int, max_len: int) -> None:
    torch.manual_seed(4)
    slots = batch * max_len + 10
    k_buf, v_buf = _pool(slots, hkv, d)
    table = torch.zeros(batch + 1, max_len + 5, dtype=torch.int32)
    lens = torch.randint(1, max_len, (batch,))
    lens[0] = max_len
    order, start = torch.randperm(slots), 0
    rows = torch.arange(1, batch + 1)
    for i, n in enumerate(lens.tolist()):
        table[rows[i], :n] = order[start : start + n].int()
        start += n
    out_loc = torch.stack([table[rows[i], n - 1].long() for i, n in enumerate(lens.tolist())])
    qkv = torch.randn(batch, (hq + 2 * hkv) * d)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    kb, vb = k_buf.clone(), v_buf.clone()
    got = ck.decode_attention(q, k, v, k_buf, v_buf, out_loc, table, rows, lens, d**-0.5)
    want = ref.decode_attention_ref(q, k, v, kb, vb, out_loc, table, rows, lens, d**-0.5)
    # Stored rounded to nearest even, as torch rounds: bit for bit.
    assert torch.equal(k_buf.view(torch.int16), kb.view(torch.int16))
    assert torch.equal(v_buf.view(torch.int16), vb.view(torch.int16))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("hq", "hkv", "d"), [(9, 3, 64), (16, 2, 64), (8, 2, 24)])
def test_decode_attention_over_shared_bf16_prefixes(hq: int, hkv: int, d: int) -> None:
    """Requests sharing their first slots attend over them once (cascade; with 16 query
    heads per KV head pair the group's scores are a small matrix product)."""
    torch.manual_seed(8)
    prefix, own = 300, [1, 20, 90, 5, 40]
    slots = prefix + sum(own) + 10
    k_buf, v_buf = _pool(slots, hkv, d)
    order = torch.randperm(slots).int()
    shared, rest = order[:prefix], order[prefix:]
    table = torch.zeros(len(own) + 1, prefix + max(own) + 1, dtype=torch.int32)
    at = 0
    for i, n in enumerate(own):
        table[i + 1, :prefix] = shared
        table[i + 1, prefix : prefix + n] = rest[at : at + n]
        at += n
    rows = torch.arange(1, len(own) + 1)
    lens = torch.tensor([prefix + n for n in own])
    out_loc = torch.stack([table[r, n - 1].long() for r, n in zip(rows.tolist(), lens.tolist())])
    qkv = torch.randn(len(own), (hq + 2 * hkv) * d)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    kb, vb = k_buf.clone(), v_buf.clone()
    got = ck.decode_attention(q, k, v, k_buf, v_buf, out_loc, table, rows, lens, d**-0.5)
    want = ref.decode_attention_ref(q, k, v, kb, vb, out_loc, table, rows, lens, d**-0.5)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("hq", "hkv", "d"), [(9, 3, 64), (6, 2, 20)])
@pytest.mark.parametrize(("prefix", "new", "window"), [(0, 37, 0), (100, 77, 0), (40, 70, 16)])
def test_extend_attention_over_bf16_kv(
    hq: int, hkv: int, d: int, prefix: int, new: int, window: int
) -> None:
    if not ck.has_extend_attention():
        pytest.skip("the portable variant leaves extends to torch")
    torch.manual_seed(5)
    k_buf, v_buf = _pool(300, hkv, d)
    slots = torch.randperm(300)[: prefix + new].int()
    q = torch.randn(new, hq * d)
    out = torch.full((new, hq * d), float("nan"))
    # The float32-arithmetic kernel (the amx variant's AMX one: test_cpu_extend_amx.py).
    ck.extend_attention(q, k_buf, v_buf, slots, prefix, d**-0.5, out, window, path="f32")
    want = ref.extend_attention_ref(q, k_buf, v_buf, slots, prefix, d**-0.5, window)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


def test_store_rounds_to_nearest_even() -> None:
    """Ties go to the even bfloat16 (one below and one above), others to the nearest; a NaN
    stays NaN, infinities stay infinite."""
    hkv, d = 1, 16
    k_buf, v_buf = (
        torch.zeros(4, hkv, d, dtype=torch.bfloat16),
        torch.zeros(4, hkv, d, dtype=torch.bfloat16),
    )
    bits = torch.tensor(
        [0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x7F7FFFFF, 0x7FC00001, 0xFF800000]
        + [0x40490FDB] * 9,
        dtype=torch.int64,
    ).to(torch.int32)
    k = bits.view(torch.float32).view(1, d)
    table = torch.tensor([[0, 1]], dtype=torch.int32)
    q = torch.zeros(1, d)
    ck.decode_attention(q, k, k.clone(), k_buf, v_buf, torch.tensor([1]), table,
                        torch.tensor([0]), torch.tensor([2]), 1.0)  # fmt: skip
    got = k_buf[1, 0].view(torch.int16).to(torch.int32) & 0xFFFF
    assert got[:4].tolist() == [0x3F80, 0x3F82, 0x3F81, 0x3F80]
    assert got[4].item() == 0x7F80  # the largest float rounds up to infinity, as torch does
    assert torch.isnan(k_buf[1, 0, 5]) and k_buf[1, 0, 6].item() == float("-inf")
    finite = torch.isfinite(k[0])
    assert torch.equal(k_buf[1, 0][finite], k[0][finite].bfloat16())


def test_other_pool_dtypes_are_refused() -> None:
    k_buf = torch.zeros(4, 1, 16, dtype=torch.float16)
    table = torch.tensor([[0, 1]], dtype=torch.int32)
    with pytest.raises(ValueError, match="float32, bfloat16 or fp8"):
        ck.decode_attention(torch.zeros(1, 16), None, None, k_buf, k_buf, None, table,
                            torch.tensor([0]), torch.tensor([2]), 1.0)  # fmt: skip
