"""Torch reference implementations of radixrt's CUDA kernels (any device, any dtype).

They define what each kernel must compute; the CUDA versions are tested against them and
are used instead of them only on CUDA tensors when the extension is built.
"""

from __future__ import annotations

import torch


def store_kv_ref(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    loc: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> None:
    """k_cache[loc] = k; v_cache[loc] = v. Caches (S, Hkv, D); k, v (T, Hkv, D) or (T, Hkv*D)."""
    # index_copy_, not cache[loc] = k: advanced-index assignment is far slower on large CPU pools.
    k_cache.index_copy_(0, loc, k.reshape(-1, *k_cache.shape[1:]).to(k_cache.dtype))
    v_cache.index_copy_(0, loc, v.reshape(-1, *v_cache.shape[1:]).to(v_cache.dtype))


def fused_add_rmsnorm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> None:
    """In place: residual += x; x = rmsnorm(residual) * weight, rounded like the HF RMSNorm."""
    summed = x + residual  # (T, hidden) in the model dtype, rounded like the model's add
    residual.copy_(summed)
    h = summed.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    x.copy_(weight * h.to(x.dtype))


def apply_rotary_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    cos_cache: torch.Tensor,
    sin_cache: torch.Tensor,
    positions: torch.Tensor,
    head_dim: int,
) -> None:
    """In place rotate-half rotary on q (T, H*D) and k (T, Hkv*D), computed in float32.

    cos_cache, sin_cache: (max_pos, D) float32; positions: (T,) int64.
    """
    cos = cos_cache[positions].unsqueeze(1)  # (T, 1, D) float32
    sin = sin_cache[positions].unsqueeze(1)
    half = head_dim // 2
    for x in (q, k):
        xv = x.view(x.shape[0], -1, head_dim)  # (T, heads, D)
        xf = xv.to(torch.float32)
        rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
        xv.copy_(xf * cos + rotated * sin)


def build_kv_indices_ref(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    kv_indptr: torch.Tensor,
    num_indices: int,
    page_size: int = 1,
) -> torch.Tensor:
    """(num_indices,) int32 page ids, no host sync: request b's n_b = ceil(seq_lens[b] / P)
    pages at kv_indptr[b], page j being req_to_token[row_b, j * P] // P (slots when P == 1).

    req_to_token (max_reqs, max_ctx) int32; req_pool_indices, seq_lens (B,); kv_indptr (B+1,)
    with kv_indptr[-1] == num_indices == sum(n_b).
    """
    dev = req_to_token.device
    pages = (seq_lens.to(dev, torch.int64) + page_size - 1) // page_size  # (B,)
    rows = req_pool_indices.to(dev, torch.int64).repeat_interleave(pages, output_size=num_indices)
    starts = kv_indptr[:-1].to(dev, torch.int64).repeat_interleave(pages, output_size=num_indices)
    cols = (torch.arange(num_indices, device=dev, dtype=torch.int64) - starts) * page_size
    flat_idx = rows * req_to_token.shape[1] + cols
    slots = req_to_token.reshape(-1).index_select(0, flat_idx)
    return (slots if page_size == 1 else slots // page_size).to(torch.int32)
