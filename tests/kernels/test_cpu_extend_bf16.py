"""The extend-attention kernel of bfloat16 products over a bfloat16 KV pool
(rt_extend_attention_bf16_kvbf16: AMX tiles in the amx variant, csrc/cpu/extend_attention_amx.c;
VDPBF16PS in the avx512bf16 one, extend_attention_dot.c), on each of the two this CPU runs,
against the float32 extend kernel and SDPA, and where it must step aside: every other
variant, KV dtype, head dim and sliding window runs the float32 kernel unchanged.

Tolerances: both kernels round the scaled queries and the softmax probabilities to bfloat16
(8 significant bits, relative error <= 2^-9 each) and keeps scores, max, sum and outputs in
float32. An output is a convex mix of V rows (|v| ~ 1 here), so its error is about 2^-8 of
|v| with the probabilities' errors partly cancelling: max abs error <= 2e-2, mean <= 2e-3
(measured: max 0.009, mean 0.0008). Against SDPA computed on the same bfloat16-rounded
queries, the probabilities' rounding is the only difference: max <= 1e-2."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from cpu_variants import variants

from radixrt.model.cpu import build as cpu_build
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import reference as ref

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")
MAX_ERR, MEAN_ERR, MAX_ERR_ROUNDED_Q = 2e-2, 2e-3, 1e-2


@pytest.fixture(params=ck.BF16_EXTEND_ISAS)
def bf16(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each variant with the kernel, where this CPU runs it."""
    if request.param not in cpu_build.supported_isas():
        pytest.skip(f"this CPU cannot run the {request.param} variant")
    monkeypatch.setenv("RADIXRT_CPU_ISA", request.param)
    assert ck.isa() == request.param
    return request.param


def _case(hq: int, hkv: int, d: int, prefix: int, new: int, pool: int, seed: int = 0):
    """q (new, hq, d), a bfloat16 pool of `pool` slots whose unused slots hold NaN (a read of
    one shows), and the request's slots: a random subset of the pool."""
    torch.manual_seed(seed)
    k_buf = torch.full((pool, hkv, d), float("nan")).bfloat16()
    v_buf = k_buf.clone()
    slots = torch.randperm(pool)[: prefix + new].int()
    k_buf[slots.long()] = torch.randn(prefix + new, hkv, d).bfloat16()
    v_buf[slots.long()] = torch.randn(prefix + new, hkv, d).bfloat16()
    return torch.randn(new, hq, d), k_buf, v_buf, slots


def _run(q, k_buf, v_buf, slots, prefix, path, window=0) -> torch.Tensor:
    d = q.shape[-1]
    out = torch.full((q.shape[0], q.shape[1] * d), float("nan"))
    ck.extend_attention(q, k_buf, v_buf, slots, prefix, d**-0.5, out, window, path=path)
    return out


def _close(got: torch.Tensor, want: torch.Tensor, max_err: float = MAX_ERR) -> None:
    err = (got - want).abs()
    assert err.max().item() <= max_err, err.max().item()
    assert err.mean().item() <= MEAN_ERR, err.mean().item()


# GQA as SmolLM2 (9:3 of 64), head dim 128, multi-head, d 32 and 96 (a partial group of dim
# tiles); prompts from 1 row to several 128-key blocks (whole blocks every row sees, the
# diagonal's partial ones), with and without a cached prefix.
@pytest.mark.parametrize(
    ("hq", "hkv", "d"), [(9, 3, 64), (2, 1, 128), (4, 4, 128), (2, 2, 32), (3, 1, 96)]
)
@pytest.mark.parametrize(
    ("prefix", "new"), [(0, 1), (0, 17), (0, 200), (130, 70), (300, 5), (0, 300), (200, 333)]
)
def test_bf16_matches_float32_kernel_and_sdpa(
    bf16: str, hq: int, hkv: int, d: int, prefix: int, new: int
) -> None:
    q, k_buf, v_buf, slots = _case(hq, hkv, d, prefix, new, prefix + new + 40)
    got = _run(q, k_buf, v_buf, slots, prefix, "bf16")
    assert torch.isfinite(got).all()
    _close(got, _run(q, k_buf, v_buf, slots, prefix, "f32"))
    _close(got, ref.extend_attention_ref(q, k_buf, v_buf, slots, prefix, d**-0.5))
    q_bf16 = (q * d**-0.5).bfloat16().float()  # the scaled queries rounded as the kernel does
    want = ref.extend_attention_ref(q_bf16, k_buf, v_buf, slots, prefix, 1.0)
    _close(got, want, MAX_ERR_ROUNDED_Q)


def test_bf16_matches_torch_bf16_sdpa(bf16: str) -> None:
    """Against torch's own bfloat16 SDPA (causal, GQA), a 300-token prompt."""
    hq, hkv, d, e = 9, 3, 64, 300
    q, k_buf, v_buf, slots = _case(hq, hkv, d, 0, e, e)
    got = _run(q, k_buf, v_buf, slots, 0, "bf16").view(e, hq, d).transpose(0, 1)
    kk, vv = (b[slots.long()].transpose(0, 1) for b in (k_buf, v_buf))
    want = F.scaled_dot_product_attention(
        q.bfloat16().transpose(0, 1), kk, vv, is_causal=True, scale=d**-0.5, enable_gqa=True
    )
    _close(got, want.float(), 3e-2)  # torch also rounds its output to bfloat16


def test_bf16_takes_no_new_rows(bf16: str) -> None:
    for prefix in (0, 20):  # (nothing to pack at all with no prefix either)
        q, k_buf, v_buf, slots = _case(9, 3, 64, prefix, 0, 30)
        assert _run(q, k_buf, v_buf, slots, prefix, "bf16").shape == (0, 9 * 64)


def test_bf16_is_causal(bf16: str) -> None:
    """Row i reads no key after its own position: changing the last keys and values leaves
    every earlier row's output bit for bit the same."""
    prefix, new = 100, 90
    q, k_buf, v_buf, slots = _case(9, 3, 64, prefix, new, prefix + new)
    before = _run(q, k_buf, v_buf, slots, prefix, "bf16")
    late = slots[prefix + 60 :].long()
    k_buf[late], v_buf[late] = k_buf[late] * 3 + 1, -v_buf[late]
    after = _run(q, k_buf, v_buf, slots, prefix, "bf16")
    assert torch.equal(before[:60], after[:60])
    assert not torch.equal(before[60:], after[60:])


def test_bf16_pages_of_16_with_holes(bf16: str) -> None:
    """A prefix and new tokens in scattered pages of 16 slots (page size 16), the pool's other
    slots NaN: slot j of the request is page[j // 16] * 16 + j % 16."""
    torch.manual_seed(5)
    hq, hkv, d, prefix, new, page = 9, 3, 64, 75, 50, 16
    pages = torch.randperm(40)[: (prefix + new + page - 1) // page]
    j = torch.arange(prefix + new)
    slots = (pages[j // page] * page + j % page).int()
    k_buf = torch.full((40 * page, hkv, d), float("nan")).bfloat16()
    v_buf = k_buf.clone()
    k_buf[slots.long()] = torch.randn(prefix + new, hkv, d).bfloat16()
    v_buf[slots.long()] = torch.randn(prefix + new, hkv, d).bfloat16()
    q = torch.randn(new, hq, d)
    got = _run(q, k_buf, v_buf, slots, prefix, "bf16")
    _close(got, ref.extend_attention_ref(q, k_buf, v_buf, slots, prefix, d**-0.5))


@pytest.mark.parametrize(("hq", "hkv", "d"), [(9, 3, 64), (8, 2, 128), (4, 4, 64)])
def test_bf16_rows_do_not_depend_on_the_call(bf16: str, hq: int, hkv: int, d: int) -> None:
    """A row's output is bit for bit the same in a whole prompt's extend and in an extend of
    the prompt's last 1..16 rows after the others were cached, or of 40 or 150 of them (other
    tiles, their rows reaching other key blocks; rows under 16 share tiles across query
    heads): a prompt computes the same however much of it the cache held."""
    n = 300
    q, k_buf, v_buf, slots = _case(hq, hkv, d, 0, n, n + 20, seed=3)
    whole = _run(q, k_buf, v_buf, slots, 0, "bf16")
    for new in (1, 2, 5, 6, 11, 16, 40, 150):
        part = _run(q[n - new :], k_buf, v_buf, slots, n - new, "bf16")
        assert torch.equal(part, whole[n - new :]), new


@pytest.mark.parametrize("isa", [i for i in variants() if i != "portable"])
@pytest.mark.parametrize("kv", [torch.float32, torch.bfloat16])
def test_float32_kernel_rows_do_not_depend_on_the_call(
    monkeypatch: pytest.MonkeyPatch, isa: str, kv: torch.dtype
) -> None:
    """test_bf16_rows_do_not_depend_on_the_call for the float32 extend kernel, on every
    variant that has it (the one AVX2 and AVX-512 CPUs run)."""
    monkeypatch.setenv("RADIXRT_CPU_ISA", isa)
    n = 300
    q, k_buf, v_buf, slots = _case(9, 3, 64, 0, n, n + 20, seed=4)
    k_buf, v_buf = k_buf.to(kv), v_buf.to(kv)
    whole = _run(q, k_buf, v_buf, slots, 0, "f32")
    for new in (1, 5, 16, 40, 150):
        part = _run(q[n - new :], k_buf, v_buf, slots, n - new, "f32")
        assert torch.equal(part, whole[n - new :]), new


@pytest.mark.parametrize("isa", variants())
def test_auto_path_is_bf16_only_where_it_runs(monkeypatch: pytest.MonkeyPatch, isa: str) -> None:
    """ "auto" takes the bfloat16 kernel on the amx and avx512bf16 variants over bfloat16 KV
    with head dim 64; every other variant, a float32 pool, head dim 48 and a sliding window
    run the float32 kernel bit for bit, and forcing "bf16" there is refused with the reason."""
    monkeypatch.setenv("RADIXRT_CPU_ISA", isa)
    if not ck.has_extend_attention():
        pytest.skip("the portable variant leaves extends to torch")
    cases = [(64, torch.bfloat16, 0), (64, torch.float32, 0), (48, torch.bfloat16, 0)]
    cases.append((64, torch.bfloat16, 32))
    for d, dtype, window in cases:
        q, k_buf, v_buf, slots = _case(4, 2, d, 40, 60, 110)
        k_buf, v_buf = k_buf.to(dtype), v_buf.to(dtype)
        auto = _run(q, k_buf, v_buf, slots, 40, "auto", window)
        f32 = _run(q, k_buf, v_buf, slots, 40, "f32", window)
        here = isa in ck.BF16_EXTEND_ISAS and dtype == torch.bfloat16 and d == 64 and not window
        assert ck.bf16_extend_takes(dtype, d, window) == here
        if here:
            assert torch.equal(auto, _run(q, k_buf, v_buf, slots, 40, "bf16"))
            assert not torch.equal(auto, f32)  # the rounding shows: the other kernel ran
        else:
            assert torch.equal(auto, f32)
            with pytest.raises(ValueError, match="bfloat16 extend kernel needs"):
                _run(q, k_buf, v_buf, slots, 40, "bf16", window)
    with pytest.raises(ValueError, match="path must be one of"):
        _run(q, k_buf, v_buf, slots, 40, "amx")
