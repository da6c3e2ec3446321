"""radixrt's CPU kernels (csrc/cpu) against their torch definitions, for every ISA variant this
CPU runs (avx512, avx2, portable: each test runs once per variant through $RADIXRT_CPU_ISA).
Skipped where the library cannot be built."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from cpu_variants import GEMM_ONLY, variants

from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import reference as ref
from radixrt.model.cpu import weight_pack as wp
from radixrt.model.layers.norm import RMSNorm
from radixrt.model.layers.rotary import apply_rotary

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")


# The tests a GEMM_ONLY variant runs: its bfloat16 GEMM's (test_cpu_build.py builds it).
_GEMM_TESTS = ("bf16", "pack_weight", "linear_rejects")


@pytest.fixture(autouse=True, params=variants(bf16_linear=True))
def isa(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test once per variant this CPU runs, with that variant's library loaded."""
    name = request.node.name
    if request.param in GEMM_ONLY and not any(t in name for t in _GEMM_TESTS):
        pytest.skip(f"{request.param}: its other kernels are avx512's (tests/cpu_variants.py)")
    monkeypatch.setenv("RADIXRT_CPU_ISA", request.param)
    assert ck.isa() == request.param
    return request.param


@pytest.mark.parametrize("m", [1, 5, 12, 13, 97, 100, 200])
@pytest.mark.parametrize(("n", "k"), [(96, 64), (70, 33), (576, 1536), (31, 8)])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_matches_torch(m: int, n: int, k: int, bias: bool) -> None:
    torch.manual_seed(m * 1000 + n)
    w, b = torch.randn(n, k), torch.randn(n) if bias else None
    wide = torch.randn(m, k + 7)
    x = wide[:, 3 : 3 + k]  # rows k + 7 apart: the kernel follows the row stride
    got = ck.linear(x, wp.pack_weight(w), n, b)
    torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=2e-5 * k**0.5)


@pytest.mark.parametrize("m", [1, 5, 12, 13, 100, 200])
@pytest.mark.parametrize(("n", "k"), [(96, 64), (70, 33), (576, 1536), (31, 8)])
def test_int8_linear_matches_its_dequantized_weight(m: int, n: int, k: int) -> None:
    torch.manual_seed(m * 1000 + n)
    w, b = torch.randn(n, k), torch.randn(n)
    w[3] = 0.0  # an all-zero column gets scale 1, values 0
    packed, scale = wp.pack_weight_int8(w)
    assert packed.dtype == torch.int8 and packed.abs().max() <= 127
    deq = wp.unpack_weight(packed, n, scale)
    assert scale[3] == 1.0 and torch.equal(deq[3], torch.zeros(k))
    assert ((deq - w).abs() <= scale[:n, None] / 2 + 1e-6).all()  # rounded to the nearest step
    x = torch.randn(m, k + 7)[:, 3 : 3 + k]
    got = ck.linear(x, packed, n, b, scale)
    torch.testing.assert_close(got, F.linear(x, deq, b), rtol=1e-5, atol=2e-5 * k**0.5)
    with pytest.raises(ValueError, match="needs its scale"):
        ck.linear(x, packed, n, b)


@pytest.mark.parametrize("m", [1, 5, 12, 13, 16, 17, 33, 97, 100, 200, 389])
@pytest.mark.parametrize(("n", "k"), [(96, 64), (70, 33), (576, 1536), (31, 8), (40, 600)])
def test_bf16_linear_is_float32_arithmetic_on_rounded_weights(m: int, n: int, k: int) -> None:
    """bfloat16 weights hold w rounded as torch rounds it; the product is float32 arithmetic
    on those values (float64 reference: only the summation order differs); AMX rounds x to
    bfloat16 as well."""
    torch.manual_seed(m * 1000 + n + 7)
    w, b = torch.randn(n, k), torch.randn(n)
    packed = wp.pack_weight_bf16(w)
    assert packed.dtype == torch.bfloat16
    assert torch.equal(wp.unpack_weight_bf16(packed, n, k), w.bfloat16().float())
    x = torch.randn(m, k + 7)[:, 3 : 3 + k]
    got = ck.linear(x, packed, n, b)
    # AMX and VDPBF16PS multiply x rounded to bfloat16 too (float32 sums); the panels widen
    # w only.
    xr = x.bfloat16() if ck.bf16_dot() else x
    want = F.linear(xr.double(), w.bfloat16().double(), b.double()).float()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-5 * k**0.5)


def test_bf16_dot_rows_do_not_depend_on_the_call(isa: str) -> None:
    """On VDPBF16PS each output sums its k pairs in k order whatever the call's shape: a row
    of a decode-sized call, of a prefill-sized one (chunks split evenly) and the row alone
    are the same bits, so a verifying row computes what its decode step would."""
    if isa != "avx512bf16":
        pytest.skip("the VDPBF16PS GEMM's property (the avx512bf16 variant)")
    torch.manual_seed(5)
    n, k = 1536, 576
    packed = wp.pack_weight_bf16(torch.randn(n, k))
    x = torch.randn(389, k)
    alone = torch.cat([ck.linear(x[i : i + 1], packed, n) for i in range(0, 389, 17)])
    for m in (17, 97, 200, 389):
        assert torch.equal(ck.linear(x[:m], packed, n)[0:m:17], alone[: (m + 16) // 17])
    assert torch.equal(ck.linear(x[:16], packed, n)[0:16:17], alone[:1])


def test_pack_weight_layout() -> None:
    w = torch.arange(70 * 3, dtype=torch.float32).view(70, 3)
    p = wp.pack_weight(w)
    assert p.shape == (3, 3, 32)
    assert torch.equal(p[1, 2, 5], w[37, 2])  # panel 1 holds columns 32..63
    assert torch.equal(p[2, :, 6:], torch.zeros(3, 26))  # past column 69: zeros


def test_linear_rejects_other_dtypes() -> None:
    with pytest.raises(ValueError, match="float32"):
        ck.linear(torch.ones(2, 4, dtype=torch.float64), wp.pack_weight(torch.ones(8, 4)), 8)


@pytest.mark.parametrize("with_residual", [False, True])
def test_rmsnorm_matches_module(with_residual: bool) -> None:
    torch.manual_seed(1)
    norm = RMSNorm(576, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(576))
    x, res = torch.randn(9, 576) * 3, torch.randn(9, 576)
    if with_residual:
        want_x, want_res = norm(x, res)
        got_x, got_res = x.clone(), res.clone()
        ck.rmsnorm_(got_x, norm.weight.detach(), 1e-5, got_res)
        torch.testing.assert_close(got_res, want_res, rtol=0, atol=0)
    else:
        want_x, got_x = norm(x), x.clone()
        ck.rmsnorm_(got_x, norm.weight.detach(), 1e-5)
    torch.testing.assert_close(got_x, want_x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("hq", "hk", "d"), [(9, 3, 64), (4, 2, 16), (2, 2, 6)])
def test_rotary_in_place_matches_reference(hq: int, hk: int, d: int) -> None:
    torch.manual_seed(2)
    t = 5
    qkv = torch.randn(t, (hq + 2 * hk) * d)
    angles = torch.randn(t, d // 2) * 10
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    q, k, v = qkv.clone().split([hq * d, hk * d, hk * d], dim=-1)
    ck.rotary_(q, k, cos, sin, d)
    wq, wk, wv = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    torch.testing.assert_close(q, apply_rotary(wq, cos, sin, d), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k, apply_rotary(wk, cos, sin, d), rtol=1e-5, atol=1e-5)
    assert torch.equal(v, wv)


@pytest.mark.parametrize("inter", [1536, 40, 7])
def test_silu_mul_matches_torch(inter: int) -> None:
    torch.manual_seed(3)
    gate_up = torch.randn(6, 2 * inter) * 4
    gate_up[0, :3] = torch.tensor([-100.0, 100.0, 0.0])  # far tails of exp
    want = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
    torch.testing.assert_close(ck.silu_mul(gate_up), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("hq", "hkv", "d"), [(9, 3, 64), (4, 4, 16), (8, 2, 24)])
# Under 4 requests with 1024+ keys: split-key ranges merged afterwards (with a 3-key request
# beside a long one, most of its ranges are empty).
@pytest.mark.parametrize(("batch", "max_len"), [(1, 250), (7, 250), (1, 3000), (3, 2100)])
def test_decode_attention_matches_sdpa(hq: int, hkv: int, d: int, batch: int, max_len: int) -> None:
    torch.manual_seed(4)
    slots = batch * max_len + 10
    k_buf, v_buf = torch.randn(slots, hkv, d), torch.randn(slots, hkv, d)
    table = torch.zeros(batch + 2, max_len + 50, dtype=torch.int32)
    lens = torch.randint(1, max_len, (batch,))
    lens[0] = max_len
    if batch > 2:
        lens[1] = 3
    order = torch.randperm(slots)  # scattered slots, no two requests share one
    rows = torch.arange(2, batch + 2)
    start = 0
    for i, n in enumerate(lens.tolist()):
        table[rows[i], :n] = order[start : start + n].int()
        start += n
    out_loc = torch.stack([table[rows[i], n - 1].long() for i, n in enumerate(lens.tolist())])
    qkv = torch.randn(batch, (hq + 2 * hkv) * d)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    kb, vb = k_buf.clone(), v_buf.clone()
    got = ck.decode_attention(q, k, v, k_buf, v_buf, out_loc, table, rows, lens, d**-0.5)
    want = ref.decode_attention_ref(q, k, v, kb, vb, out_loc, table, rows, lens, d**-0.5)
    assert torch.equal(k_buf, kb) and torch.equal(v_buf, vb)  # the new K/V were stored
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # K/V already in the pool (a mixed batch's decode rows): attends without storing.
    again = ck.decode_attention(q, None, None, k_buf, v_buf, None, table, rows, lens, d**-0.5)
    assert torch.equal(again, got) and torch.equal(k_buf, kb) and torch.equal(v_buf, vb)
    with pytest.raises(ValueError, match="come together"):
        ck.decode_attention(q, k, None, k_buf, v_buf, out_loc, table, rows, lens, d**-0.5)


def _shared_prefix_table(prefix: int, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows as the radix tree hands them out: requests 0-4 share `prefix` slots (request 3
    diverges 7 earlier, request 4's only own slot is its new one), 5-6 share another run, 7 is
    alone, 8 starts like 0-4 but diverges after 10 slots, 9 has one key."""
    order = torch.randperm(slots).int().tolist()
    take = lambda n: [order.pop() for _ in range(n)]  # noqa: E731
    a, b2 = take(prefix), take(prefix // 2 + 40)
    rows = [a + take(n) for n in (1, 24, 90)]
    rows += [a[: prefix - 7] + take(30), a + take(1), b2 + take(5), b2 + take(17), take(prefix)]
    rows += [a[:10] + take(prefix), take(1)]
    table = torch.zeros(len(rows) + 1, max(map(len, rows)) + 3, dtype=torch.int32)
    for i, r in enumerate(rows):
        table[i + 1, : len(r)] = torch.tensor(r, dtype=torch.int32)
    return table, torch.tensor([len(r) for r in rows])


@pytest.mark.parametrize(("hq", "hkv", "d"), [(9, 3, 64), (8, 2, 24)])
@pytest.mark.parametrize("prefix", [70, 530, 1500])
def test_decode_attention_over_shared_prefixes_matches_sdpa(
    hq: int, hkv: int, d: int, prefix: int
) -> None:
    """Requests whose rows begin with the same slots (a prefix hit in the radix tree) attend
    over it once per group (cascade), in one or several key ranges, merged with their own
    keys: the same outputs as attending request by request."""
    torch.manual_seed(8)
    slots = 12 * prefix + 600
    table, lens = _shared_prefix_table(prefix, slots)
    k_buf, v_buf = torch.randn(slots, hkv, d), torch.randn(slots, hkv, d)
    rows = torch.arange(1, len(lens) + 1)
    out_loc = torch.stack([table[r, n - 1].long() for r, n in zip(rows.tolist(), lens.tolist())])
    qkv = torch.randn(len(lens), (hq + 2 * hkv) * d)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    kb, vb = k_buf.clone(), v_buf.clone()
    got = ck.decode_attention(q, k, v, k_buf, v_buf, out_loc, table, rows, lens, d**-0.5)
    want = ref.decode_attention_ref(q, k, v, kb, vb, out_loc, table, rows, lens, d**-0.5)
    assert torch.equal(k_buf, kb) and torch.equal(v_buf, vb)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("prefix", [20, 200, 600])  # (from 1024 keys a lone row splits them)
def test_rows_of_one_request_attend_as_its_decode_steps(prefix: int) -> None:
    """A draft being verified: one request's rows with seq_lens one apart (stored first, then
    attended), next to another request sharing the prefix, match SDPA; alone, each is exactly
    its own one-row decode (one request's rows never form a shared-prefix group)."""
    torch.manual_seed(9)
    hq, hkv, d, e = 9, 3, 64, 5
    slots = 2 * prefix + 64
    table = torch.zeros(3, prefix + e + 2, dtype=torch.int32)
    order = torch.randperm(slots).int()
    table[1, : prefix + e] = order[: prefix + e]
    table[2, :prefix] = order[:prefix]  # request 2 shares request 1's prefix
    table[2, prefix : prefix + 2] = order[prefix + e : prefix + e + 2]
    rows = torch.tensor([1] * e + [2])
    lens = torch.tensor([prefix + 1 + j for j in range(e)] + [prefix + 2])
    out_loc = torch.stack([table[r, n - 1].long() for r, n in zip(rows.tolist(), lens.tolist())])
    k_buf, v_buf = torch.randn(slots, hkv, d), torch.randn(slots, hkv, d)
    qkv = torch.randn(e + 1, (hq + 2 * hkv) * d)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    kb, vb = k_buf.clone(), v_buf.clone()
    got = ck.decode_attention(q, k, v, k_buf, v_buf, out_loc, table, rows, lens, d**-0.5)
    want = ref.decode_attention_ref(q, k, v, kb, vb, out_loc, table, rows, lens, d**-0.5)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # The K/V are in the pool now. Request 1's rows alone, then each row as its decode step:
    own = ck.decode_attention(q[:e], None, None, k_buf, v_buf, None, table, rows[:e], lens[:e],
                              d**-0.5)  # fmt: skip
    for j in range(e):
        one = ck.decode_attention(q[j : j + 1], None, None, k_buf, v_buf, None, table,
                                  rows[j : j + 1], lens[j : j + 1], d**-0.5)  # fmt: skip
        assert torch.equal(one[0], own[j]), j


@pytest.mark.parametrize("prefix", [70, 600])
def test_rows_of_a_draft_tree_attend_as_their_decode_steps(prefix: int) -> None:
    """A draft tree being verified: its root and first branch on the request's row, a second
    branch on a row of its own (the prefix and root slots copied, then its nodes): no two of
    its rows form a shared-prefix group, so each is exactly its own one-row decode."""
    torch.manual_seed(10)
    hq, hkv, d = 9, 3, 64
    slots = prefix + 16
    order = torch.randperm(slots).int()
    table = torch.zeros(3, prefix + 8, dtype=torch.int32)
    table[1, : prefix + 4] = order[: prefix + 4]  # prefix, root (at prefix - 1), nodes 1-4
    table[2, :prefix] = order[:prefix]  # the second branch: prefix and root, then 5, 6
    table[2, prefix : prefix + 2] = order[prefix + 4 : prefix + 6]
    rows = torch.tensor([1] * 5 + [2] * 2)
    lens = torch.tensor([prefix + j for j in range(5)] + [prefix + 1, prefix + 2])
    out_loc = torch.stack([table[r, n - 1].long() for r, n in zip(rows.tolist(), lens.tolist())])
    k_buf, v_buf = torch.randn(slots, hkv, d), torch.randn(slots, hkv, d)
    qkv = torch.randn(len(rows), (hq + 2 * hkv) * d)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    got = ck.decode_attention(q, k, v, k_buf, v_buf, out_loc, table, rows, lens, d**-0.5)
    for j in range(len(rows)):
        one = ck.decode_attention(q[j : j + 1], None, None, k_buf, v_buf, None, table,
                                  rows[j : j + 1], lens[j : j + 1], d**-0.5)  # fmt: skip
        assert torch.equal(one[0], got[j]), j


@pytest.mark.parametrize("batch", [1, 3])
def test_decode_attention_takes_k_and_v_of_other_layouts(batch: int) -> None:
    """k fresh (rotated by torch), v a view of qkv: one row needs no common stride; more rows
    must share one (the attention backend makes both contiguous then)."""
    torch.manual_seed(6)
    hq, hkv, d = 4, 2, 16
    k_buf, v_buf = torch.randn(64, hkv, d), torch.randn(64, hkv, d)
    table = torch.arange(64, dtype=torch.int32).view(4, 16)
    rows, lens = torch.arange(batch), torch.full((batch,), 9)
    out_loc = table[:batch, 8].long()
    qkv = torch.randn(batch, (hq + 2 * hkv) * d)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    k = k.clone()  # its own layout
    args = (k_buf.clone(), v_buf.clone(), out_loc, table, rows, lens, d**-0.5)
    if batch > 1:
        with pytest.raises(ValueError, match="share one layout"):
            ck.decode_attention(q, k, v, *args)
        k, v = k.contiguous(), v.contiguous()
    got = ck.decode_attention(q, k, v, *args)
    want = ref.decode_attention_ref(q, k, v, k_buf.clone(), v_buf.clone(), *args[2:])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("hq", "hkv", "d"), [(9, 3, 64), (4, 4, 16), (8, 2, 24), (6, 2, 20)])
# (40, 40): a key block starts past the lower half of a tile (32 rows on AVX-512: rows 40-71;
# 16 on AVX2: rows 56-71), so only its upper half sees those keys.
@pytest.mark.parametrize(
    ("prefix", "new"), [(0, 1), (0, 37), (0, 130), (50, 1), (100, 77), (40, 40)]
)
def test_extend_attention_matches_sdpa(hq: int, hkv: int, d: int, prefix: int, new: int) -> None:
    if not ck.has_extend_attention():
        pytest.skip("the portable variant leaves extends to torch")
    torch.manual_seed(5)
    k_buf, v_buf = torch.randn(500, hkv, d), torch.randn(500, hkv, d)
    slots = torch.randperm(500)[: prefix + new].int()
    q = torch.randn(new, (hq + 2 * hkv) * d)[:, : hq * d]  # rows wider than q, like qkv
    out = torch.full((new, hq * d), float("nan"))
    ck.extend_attention(q, k_buf, v_buf, slots, prefix, d**-0.5, out)
    want = ref.extend_attention_ref(q, k_buf, v_buf, slots, prefix, d**-0.5)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


# Windows of one key, shorter than a tile, across tile halves, longer than the keys; prefixes
# before the first visible key (the kernel starts past them) and chunks longer than the window.
@pytest.mark.parametrize(("hq", "hkv", "d"), [(4, 1, 256), (6, 2, 20)])
@pytest.mark.parametrize(
    ("prefix", "new", "window"),
    [(0, 70, 16), (40, 37, 8), (0, 5, 1), (100, 90, 64), (10, 3, 200), (0, 130, 33), (300, 1, 20)],
)
def test_extend_attention_with_a_window_matches_sdpa(
    hq: int, hkv: int, d: int, prefix: int, new: int, window: int
) -> None:
    if not ck.has_extend_attention():
        pytest.skip("the portable variant leaves extends to torch")
    torch.manual_seed(6)
    k_buf, v_buf = torch.randn(500, hkv, d), torch.randn(500, hkv, d)
    slots = torch.randperm(500)[: prefix + new].int()
    q = torch.randn(new, hq * d)
    out = torch.full((new, hq * d), float("nan"))
    ck.extend_attention(q, k_buf, v_buf, slots, prefix, d**-0.5, out, window)
    want = ref.extend_attention_ref(q, k_buf, v_buf, slots, prefix, d**-0.5, window)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
