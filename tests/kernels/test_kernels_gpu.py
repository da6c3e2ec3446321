"""Each CUDA kernel against its torch reference on random CUDA inputs (needs a GPU and nvcc)."""

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

pytestmark = pytest.mark.gpu
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TOL = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 1e-5}


@pytest.fixture(scope="module")
def ops():
    ops = kernels.get_ops()
    assert ops is not None, f"radixrt CUDA kernels did not build: {kernels.build_error()}"
    return ops


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hkv,head_dim", [(8, 128), (8, 64), (1, 5)])  # 5: narrow copies
def test_store_kv(ops, dtype: torch.dtype, hkv: int, head_dim: int) -> None:
    torch.manual_seed(0)
    slots, t = 4096, 300
    caches = [torch.randn(slots, hkv, head_dim, device="cuda").to(dtype) for _ in range(2)]
    want = [c.clone() for c in caches]
    loc = torch.randperm(slots - 1, device="cuda")[:t] + 1
    qkv = torch.randn(t, (8 + 2 * hkv) * head_dim, device="cuda").to(dtype)  # fused projection
    k = qkv[:, 8 * head_dim : (8 + hkv) * head_dim]  # rows strided inside qkv
    v = qkv[:, (8 + hkv) * head_dim :].reshape(t, hkv, head_dim)
    ops.store_kv(caches[0], caches[1], loc, k, v)
    store_kv_ref(want[0], want[1], loc, k, v)
    torch.cuda.synchronize()
    assert torch.equal(caches[0], want[0]) and torch.equal(caches[1], want[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [4096, 576, 100])  # 100: no 16-byte packs in bf16
def test_fused_add_rmsnorm(ops, dtype: torch.dtype, hidden: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(257, hidden, device="cuda").to(dtype)
    residual = torch.randn(257, hidden, device="cuda").to(dtype)
    weight = (1 + 0.1 * torch.randn(hidden, device="cuda")).to(dtype)
    x_ref, res_ref = x.clone(), residual.clone()
    ops.fused_add_rmsnorm(x, residual, weight, 1e-5)
    fused_add_rmsnorm_ref(x_ref, res_ref, weight, 1e-5)
    assert torch.equal(residual, res_ref)  # the add rounds the same way in both
    torch.testing.assert_close(x, x_ref, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [128, 64])
def test_rotary(ops, dtype: torch.dtype, head_dim: int) -> None:
    torch.manual_seed(0)
    t, h, hkv, max_pos = 333, 32, 8, 8192
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, device="cuda").float() / head_dim))
    freqs = torch.outer(torch.arange(max_pos, device="cuda").float(), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos_cache, sin_cache = emb.cos(), emb.sin()  # (max_pos, D) float32
    positions = torch.randint(0, max_pos, (t,), device="cuda")
    qkv = torch.randn(t, (h + 2 * hkv) * head_dim, device="cuda").to(dtype)
    q, k = qkv[:, : h * head_dim], qkv[:, h * head_dim : (h + hkv) * head_dim]
    q_ref, k_ref = q.clone(), k.clone()
    v_before = qkv[:, (h + hkv) * head_dim :].clone()
    ops.apply_rotary(q, k, cos_cache, sin_cache, positions, head_dim)
    apply_rotary_ref(q_ref, k_ref, cos_cache, sin_cache, positions, head_dim)
    torch.testing.assert_close(q, q_ref, rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(k, k_ref, rtol=TOL[dtype], atol=TOL[dtype])
    assert torch.equal(qkv[:, (h + hkv) * head_dim :], v_before)  # v untouched


@pytest.mark.parametrize("page_size", [1, 16])
def test_build_kv_indices(ops, page_size: int) -> None:
    torch.manual_seed(0)
    req_to_token = torch.randint(1, 10**6, (64, 9000), dtype=torch.int32, device="cuda")
    rows = torch.randperm(64, device="cuda")[:40]
    seq_lens = torch.randint(1, 9000, (40,), device="cuda")
    kv_indptr = torch.zeros(41, dtype=torch.int32, device="cuda")
    kv_indptr[1:] = ((seq_lens + page_size - 1) // page_size).cumsum(0)
    total = int(kv_indptr[-1])
    got = torch.empty(total, dtype=torch.int32, device="cuda")
    ops.build_kv_indices(req_to_token, rows, seq_lens, kv_indptr, page_size, got)
    want = build_kv_indices_ref(req_to_token, rows, seq_lens, kv_indptr, total, page_size)
    assert torch.equal(got, want)


def test_public_dispatch_uses_extension_on_cuda(ops, monkeypatch) -> None:
    x = torch.randn(4, 64, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn(4, 64, device="cuda", dtype=torch.bfloat16)
    weight = torch.ones(64, device="cuda", dtype=torch.bfloat16)
    x_ref, res_ref = x.clone(), residual.clone()
    fused_add_rmsnorm_ref(x_ref, res_ref, weight, 1e-6)

    def no_reference(*args: object) -> None:
        raise AssertionError("the dispatcher fell back to the torch reference")

    for name in ("fused_add_rmsnorm_ref", "build_kv_indices_ref"):
        monkeypatch.setattr(kernels, name, no_reference)
    kernels.fused_add_rmsnorm(x, residual, weight, 1e-6)
    torch.testing.assert_close(x, x_ref, rtol=2e-2, atol=2e-2)
    r2t = torch.arange(64, dtype=torch.int32, device="cuda").view(2, 32)
    seq_lens, indptr = torch.tensor([20]), torch.tensor([0, 2], dtype=torch.int32)
    pages = kernels.build_kv_indices(r2t, torch.tensor([1]), seq_lens, indptr, 2, page_size=16)
    assert pages.tolist() == [2, 3]  # slots 32 and 48 start pages 2 and 3
