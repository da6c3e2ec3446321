"""The CPU attention kernels over fp8 KV pools (e4m3, e5m2: a byte per value and a float32
scale per (slot, KV head) row), for every ISA variant this CPU runs: new K/V stored with the
bits torch writes (kv_layout.to_rows: scaled by amax / max finite, nearest even, saturating),
every byte read as torch reads it, and float32 arithmetic, so the outputs equal SDPA over the
widened pool as closely as float32 pools do."""

from __future__ import annotations

import pytest
import torch
from cpu_variants import variants

from radixrt.cache.kv_layout import FP8_DTYPES, from_rows, to_rows
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import reference as ref

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")
TOL = {"rtol": 2e-5, "atol": 2e-5}  # the scale applied after the sum, not per element


@pytest.fixture(autouse=True, params=variants())
def isa(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("RADIXRT_CPU_ISA", request.param)
    assert ck.isa() == request.param
    return request.param


@pytest.fixture(params=sorted(FP8_DTYPES))
def fp8(request: pytest.FixtureRequest) -> torch.dtype:
    return FP8_DTYPES[request.param]


def _pool(slots: int, hkv: int, d: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    # rows of different magnitudes, so the scales differ row to row
    mag = torch.rand(slots, hkv, 1) * 4
    k, v = torch.randn(slots, hkv, d) * mag, torch.randn(slots, hkv, d) * mag
    return to_rows(k, dtype), to_rows(v, dtype)


def _bits(buf: torch.Tensor) -> torch.Tensor:
    return buf.view(torch.uint8)


@pytest.mark.parametrize(("hq", "hkv", "d"), [(9, 3, 64), (2, 1, 128), (12, 2, 128), (8, 2, 24)])
@pytest.mark.parametrize(("batch", "max_len"), [(1, 250), (7, 250), (1, 3000)])
def test_decode_attention_over_fp8_kv(
    fp8: torch.dtype, hq: int, hkv: int, d: int, batch: int, max_len: int
) -> None:
    torch.manual_seed(4)
    slots = batch * max_len + 10
    k_buf, v_buf = _pool(slots, hkv, d, fp8)
    table = torch.zeros(batch + 1, max_len + 5, dtype=torch.int32)
    lens = torch.randint(1, max_len, (batch,))
    lens[0] = max_len
    order, start = torch.randperm(slots), 0
    rows = torch.arange(1, batch + 1)
    for i, n in enumerate(lens.tolist()):
        table[rows[i], :n] = order[start : start + n].int()
        start += n
    out_loc = torch.stack([table[rows[i], n - 1].long() for i, n in enumerate(lens.tolist())])
    qkv = torch.randn(batch, (hq + 2 * hkv) * d) * 3
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    kb, vb = k_buf.clone(), v_buf.clone()
    got = ck.decode_attention(q, k, v, k_buf, v_buf, out_loc, table, rows, lens, d**-0.5)
    want = ref.decode_attention_ref(q, k, v, kb, vb, out_loc, table, rows, lens, d**-0.5)
    # The new rows stored as torch stores them: values and scales bit for bit.
    assert torch.equal(_bits(k_buf), _bits(kb)) and torch.equal(_bits(v_buf), _bits(vb))
    # Float32 sums in another order: their rounding grows with the head size.
    torch.testing.assert_close(got, want, rtol=TOL["rtol"], atol=TOL["atol"] * max(1, d // 64))


@pytest.mark.parametrize(("hq", "hkv", "d"), [(9, 3, 64), (16, 2, 64), (8, 2, 24)])
def test_decode_attention_over_shared_fp8_prefixes(
    fp8: torch.dtype, hq: int, hkv: int, d: int
) -> None:
    """Requests sharing their first slots attend over them once (cascade, and with 16 query
    heads per KV head pair the group's transposed keys)."""
    torch.manual_seed(8)
    prefix, own = 300, [1, 20, 90, 5, 40]
    slots = prefix + sum(own) + 10
    k_buf, v_buf = _pool(slots, hkv, d, fp8)
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
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize(("hq", "hkv", "d"), [(9, 3, 64), (6, 2, 20)])
@pytest.mark.parametrize(("prefix", "new", "window"), [(0, 37, 0), (100, 77, 0), (40, 70, 16)])
def test_extend_attention_over_fp8_kv(
    fp8: torch.dtype, hq: int, hkv: int, d: int, prefix: int, new: int, window: int
) -> None:
    if not ck.has_extend_attention():
        pytest.skip("the portable variant leaves extends to torch")
    torch.manual_seed(5)
    k_buf, v_buf = _pool(300, hkv, d, fp8)
    slots = torch.randperm(300)[: prefix + new].int()
    q = torch.randn(new, hq * d)
    out = torch.full((new, hq * d), float("nan"))
    ck.extend_attention(q, k_buf, v_buf, slots, prefix, d**-0.5, out, window)
    want = ref.extend_attention_ref(q, k_buf, v_buf, slots, prefix, d**-0.5, window)
    torch.testing.assert_close(out, want, **TOL)


def test_every_byte_reads_as_torch_reads_it(fp8: torch.dtype) -> None:
    """One key: the output is its V row. V rows holding all 256 byte values (NaN codes aside)
    with scale 1 read back exactly torch's values."""
    hkv, d = 4, 64
    v_buf = torch.zeros(2, hkv, d + 4, dtype=torch.uint8)
    v_buf[1, :, :d] = torch.arange(256, dtype=torch.uint8).view(hkv, d)
    v_buf[1, :, d:].view(torch.float32).fill_(1.0)
    v_buf = v_buf.view(fp8)
    k_buf = to_rows(torch.zeros(2, hkv, d), fp8)
    table = torch.tensor([[1]], dtype=torch.int32)
    args = (table, torch.tensor([0]), torch.tensor([1]), 1.0)
    got = ck.decode_attention(torch.zeros(1, hkv * d), None, None, k_buf, v_buf, None, *args)
    want = v_buf[1, :, :d].float().reshape(-1)
    finite = want.isfinite()
    assert torch.equal(got[0][finite], want[finite])
    assert got[0][~want.isfinite()].isfinite().sum() <= 2  # e4m3's NaN codes (S.1111.111)


def test_store_rounds_as_torch_does(fp8: torch.dtype) -> None:
    """Values straddling the format's steps (ties, subnormals, the saturating top), an
    all-zero row and a row with one huge value: the kernel's bytes and scale are to_rows'."""
    hkv, d = 3, 32
    fmax = torch.finfo(fp8).max
    grid = from_rows(to_rows(torch.linspace(-fmax, fmax, d).view(1, 1, d), fp8), torch.float32)
    ties = (grid[0, 0, 1:] + grid[0, 0, :-1]) / 2  # halfway between neighbours (scale 1 rows)
    row0 = torch.cat([ties[: d - 1], torch.tensor([fmax])])  # amax = fmax: scale exactly 1
    tiny = torch.finfo(fp8).smallest_normal
    row1 = torch.cat([torch.linspace(-2 * tiny, 2 * tiny, d - 1), torch.tensor([fmax])])
    row2 = torch.zeros(d)
    k = torch.stack([row0, row1, row2]).view(1, hkv * d)
    k_buf, v_buf = to_rows(torch.zeros(2, hkv, d), fp8), to_rows(torch.zeros(2, hkv, d), fp8)
    table = torch.tensor([[0, 1]], dtype=torch.int32)
    ck.decode_attention(torch.zeros(1, hkv * d), k, k.clone(), k_buf, v_buf, torch.tensor([1]),
                        table, torch.tensor([0]), torch.tensor([2]), 1.0)  # fmt: skip
    want = to_rows(k.view(1, hkv, d), fp8)
    assert torch.equal(_bits(k_buf[1:]), _bits(want))
    assert from_rows(k_buf[1:2], torch.float32)[0, 2].abs().sum() == 0  # zero row, scale 1
    big = torch.randn(1, hkv * d) * 1e30  # past every format's range: scaled, never inf
    one = (torch.tensor([1]), table, torch.tensor([0]), torch.tensor([2]), 1.0)
    ck.decode_attention(torch.zeros(1, hkv * d), big, big.clone(), k_buf, v_buf, *one)
    back = from_rows(k_buf[1:2], torch.float32).view(1, -1)
    assert back.isfinite().all()
    half_step = 2.0 ** -(4 if fp8 == torch.float8_e4m3fn else 3)  # relative, of a normal value
    assert ((back - big).abs() <= half_step * big.abs() * 1.0001 + 1e30 * 2**-16).all()
