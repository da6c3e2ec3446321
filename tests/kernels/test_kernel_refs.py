"""CPU checks of the kernels' torch references against plain implementations, and of dispatch."""

from __future__ import annotations

import pytest
import torch

from radixrt.model import cuda as kernels
from radixrt.model.cuda.reference import (
    apply_rotary_ref,
    build_kv_indices_ref,
    fused_add_rmsnorm_ref,
    store_kv_ref,
)
from radixrt.model.layers.norm import RMSNorm
from radixrt.model.layers.rotary import RotaryEmbedding, apply_rotary


def test_store_kv_ref_matches_loop() -> None:
    torch.manual_seed(0)
    k_cache = torch.zeros(20, 2, 8)
    v_cache = torch.zeros(20, 2, 8)
    loc = torch.tensor([5, 1, 17, 9])
    k, v = torch.randn(4, 2, 8), torch.randn(4, 16)  # (T, Hkv, D) and packed (T, Hkv*D)
    store_kv_ref(k_cache, v_cache, loc, k, v)
    for t, slot in enumerate(loc.tolist()):
        assert torch.equal(k_cache[slot], k[t])
        assert torch.equal(v_cache[slot], v[t].view(2, 8))
    untouched = [i for i in range(20) if i not in loc.tolist()]
    assert k_cache[untouched].abs().sum() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_add_rmsnorm_ref_matches_rmsnorm_module(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    norm = RMSNorm(64, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(64))
    x, residual = torch.randn(7, 64, dtype=dtype), torch.randn(7, 64, dtype=dtype)
    want_out, want_res = norm(x.clone(), residual.clone())
    fused_add_rmsnorm_ref(x, residual, norm.weight.detach(), 1e-5)
    assert torch.equal(residual, want_res)
    assert torch.equal(x, want_out)


def test_rotary_ref_matches_model_rotary_and_complex_formula() -> None:
    torch.manual_seed(0)
    head_dim, heads, kv_heads = 16, 3, 1
    rope = RotaryEmbedding(head_dim, 64, theta=10000.0)
    positions = torch.tensor([0, 3, 7, 63, 1])
    q, k = torch.randn(5, heads * head_dim), torch.randn(5, kv_heads * head_dim)
    cos, sin = rope(positions)
    want_q, want_k = apply_rotary(q, cos, sin, head_dim), apply_rotary(k, cos, sin, head_dim)
    cos_cache, sin_cache = rope._cache(positions.device)
    got_q, got_k = q.clone(), k.clone()
    apply_rotary_ref(got_q, got_k, cos_cache, sin_cache, positions, head_dim)
    torch.testing.assert_close(got_q, want_q)
    torch.testing.assert_close(got_k, want_k)
    # neox layout as complex rotation: (x1 + i x2) * exp(i * pos * inv_freq)
    half = head_dim // 2
    xq = q.view(5, heads, head_dim).double()
    z = torch.complex(xq[..., :half], xq[..., half:])
    angle = positions[:, None, None].double() * rope.inv_freq.double()[None, None, :]
    rot = z * torch.polar(torch.ones_like(angle), angle)
    want = torch.cat([rot.real, rot.imag], dim=-1).view(5, -1).float()
    torch.testing.assert_close(got_q, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("page_size", [1, 4])
def test_build_kv_indices_ref_matches_loop(page_size: int) -> None:
    torch.manual_seed(0)
    req_to_token = torch.randint(1, 1000, (6, 40), dtype=torch.int32)
    rows = torch.tensor([4, 0, 2])
    seq_lens = torch.tensor([5, 1, 33])
    pages = [-(-n // page_size) for n in seq_lens.tolist()]
    kv_indptr = torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32)
    got = build_kv_indices_ref(req_to_token, rows, seq_lens, kv_indptr, sum(pages), page_size)
    lens = zip(rows.tolist(), seq_lens.tolist(), strict=True)
    want = torch.cat([req_to_token[r, 0:n:page_size] // page_size for r, n in lens])
    assert got.dtype == torch.int32 and got.numel() == (39 if page_size == 1 else 2 + 1 + 9)
    assert torch.equal(got, want.to(torch.int32))


def test_public_functions_use_references_on_cpu() -> None:
    """On CPU tensors the dispatchers must never build or call the extension."""
    torch.manual_seed(0)
    x, residual, weight = torch.randn(3, 32), torch.randn(3, 32), torch.randn(32)
    x2, r2 = x.clone(), residual.clone()
    kernels.fused_add_rmsnorm(x, residual, weight, 1e-6)
    fused_add_rmsnorm_ref(x2, r2, weight, 1e-6)
    assert torch.equal(x, x2) and torch.equal(residual, r2)

    k_cache, v_cache = torch.zeros(8, 2, 4), torch.zeros(8, 2, 4)
    kernels.store_kv(k_cache, v_cache, torch.tensor([3, 6]), torch.ones(2, 2, 4), torch.ones(2, 8))
    assert k_cache[3].sum() == 8 and v_cache[6].sum() == 8 and k_cache[0].sum() == 0

    q, k = torch.randn(2, 8), torch.randn(2, 8)
    cos_cache, sin_cache = torch.ones(4, 8), torch.zeros(4, 8)  # angle 0: identity
    q0, k0 = q.clone(), k.clone()
    kernels.apply_rotary_inplace(q, k, cos_cache, sin_cache, torch.tensor([1, 2]), 8)
    assert torch.equal(q, q0) and torch.equal(k, k0)

    r2t = torch.arange(20, dtype=torch.int32).view(2, 10)
    out = kernels.build_kv_indices(
        r2t, torch.tensor([1]), torch.tensor([3]), torch.tensor([0, 3]), 3
    )
    assert out.tolist() == [10, 11, 12]
