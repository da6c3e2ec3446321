"""radixrt's fused kernels: CUDA versions from csrc/ when built, torch references otherwise.

Each public function runs the CUDA kernel when its tensors are on a CUDA device and the
extension builds (see build.py), and the torch reference in reference.py in every other case;
both give the same result up to floating-point rounding. Importing this package builds nothing.
"""

from __future__ import annotations

import functools
from types import ModuleType

import torch

from radixrt.model.cuda.build import build_error, get_ops
from radixrt.model.cuda.reference import (
    apply_rotary_ref,
    build_kv_indices_ref,
    fused_add_rmsnorm_ref,
    store_kv_ref,
)

__all__ = [
    "apply_rotary_inplace",
    "build_error",
    "build_kv_indices",
    "fused_add_rmsnorm",
    "get_ops",
    "store_kv",
]

_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def store_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    loc: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> None:
    """Write k, v (T, Hkv, D) or (T, Hkv*D) into caches (S, Hkv, D) at slots loc (T,) int64."""
    ops = _ops_for(k_cache, v_cache, loc, k, v)
    if (
        ops is not None
        and k.dtype == k_cache.dtype
        and v.dtype == v_cache.dtype
        and loc.dtype == torch.int64
        and all(_rows_contiguous(t) for t in (k_cache, v_cache, k, v))
    ):
        ops.store_kv(k_cache, v_cache, loc, k, v)
    else:
        store_kv_ref(k_cache, v_cache, loc, k, v)


def fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> None:
    """In place on x, residual (T, hidden): residual += x; x = rmsnorm(residual) * weight."""
    ops = _ops_for(x, residual, weight)
    if (
        ops is not None
        and x.dim() == 2
        and x.dtype in _KERNEL_DTYPES
        and x.dtype == residual.dtype == weight.dtype
        and x.stride(-1) == 1
        and residual.stride(-1) == 1
        and weight.is_contiguous()
    ):
        ops.fused_add_rmsnorm(x, residual, weight, float(eps))
    else:
        fused_add_rmsnorm_ref(x, residual, weight, eps)


def apply_rotary_inplace(
    q: torch.Tensor,
    k: torch.Tensor,
    cos_cache: torch.Tensor,
    sin_cache: torch.Tensor,
    positions: torch.Tensor,
    head_dim: int,
) -> None:
    """Rotate q (T, H*D) and k (T, Hkv*D) in place by positions (T,) int64 (neox layout).

    cos_cache, sin_cache: (max_pos, D) float32, halves repeated as RotaryEmbedding builds them.
    """
    ops = _ops_for(q, k, cos_cache, sin_cache, positions)
    if (
        ops is not None
        and q.dtype in _KERNEL_DTYPES
        and q.dtype == k.dtype
        and cos_cache.dtype == sin_cache.dtype == torch.float32
        and positions.dtype == torch.int64
        and _rows_contiguous(q)
        and _rows_contiguous(k)
    ):
        ops.apply_rotary(q, k, cos_cache, sin_cache, positions, head_dim)
    else:
        apply_rotary_ref(q, k, cos_cache, sin_cache, positions, head_dim)


def build_kv_indices(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    kv_indptr: torch.Tensor,
    num_indices: int,
    page_size: int = 1,
) -> torch.Tensor:
    """Flattened KV slots (page ids when page_size > 1) of each request: (num_indices,) int32,
    request b's at kv_indptr (B+1,) offsets (see build_kv_indices_ref).

    req_to_token (max_reqs, max_ctx) int32; req_pool_indices, seq_lens (B,) int64.
    """
    dev = req_to_token.device
    ops = _ops_for(req_to_token)
    if ops is None or req_to_token.stride(-1) != 1:
        return build_kv_indices_ref(
            req_to_token, req_pool_indices, seq_lens, kv_indptr, num_indices, page_size
        )
    out = torch.empty(num_indices, dtype=torch.int32, device=dev)
    ops.build_kv_indices(
        req_to_token,
        req_pool_indices.to(dev, torch.int64).contiguous(),
        seq_lens.to(dev, torch.int64).contiguous(),
        kv_indptr.to(dev, torch.int32).contiguous(),
        page_size,
        out,
    )
    return out


def _ops_for(*tensors: torch.Tensor) -> ModuleType | None:
    """The extension when every tensor is on one sm_80+ CUDA device and it builds; else None."""
    if not all(t.is_cuda and t.device == tensors[0].device for t in tensors):
        return None
    if not _is_supported_gpu(tensors[0].device.index or 0):
        return None
    return get_ops()


@functools.cache
def _is_supported_gpu(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (8, 0)  # the build targets sm_80+


def _rows_contiguous(t: torch.Tensor) -> bool:
    """True when each row t[i] is one contiguous block (any stride between rows)."""
    if t.dim() == 0:
        return False
    return t.shape[0] == 0 or t[0].is_contiguous()
