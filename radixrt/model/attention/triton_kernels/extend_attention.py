"""Extend (prefill) attention: ragged new tokens attend to their request's prefix in the pool
and, causally, to each other. The new tokens' K/V are already in the pool at their slots, so
one loop over the request's slot list covers prefix and new tokens alike.

A layer's sliding window and soft cap are compile-time constants (static per layer): with a
window w the query at position i sees keys max(0, i - w + 1) .. i, and each query block starts
its loop at the first key its first row sees, so a long prompt costs O(len * w), not O(len^2);
a soft cap replaces the scaled scores s by cap * tanh(s / cap) before the softmax."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_M = 32  # query rows per program
BLOCK_N = 32  # KV slots per inner step


@triton.jit
def soft_cap(s, cap: tl.constexpr):
    """cap * tanh(s / cap), with tanh(x) = 1 - 2 / (exp(2x) + 1): exact at both tails (exp
    overflows to inf or underflows to 0) and without a libdevice call."""
    return cap * (1.0 - 2.0 / (tl.exp(s * (2.0 / cap)) + 1.0))


@triton.jit
def _extend_kernel(
    Q,  # (T, H, D)
    K_buf,  # (num_slots, Hkv, D)
    V_buf,  # (num_slots, Hkv, D)
    Out,  # (T, H, D)
    qo_indptr,  # (B+1,) int32
    kv_indptr,  # (B+1,) int32
    kv_indices,  # (sum(seq_lens),) int32
    sm_scale,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    GROUP: tl.constexpr,  # query heads per KV head
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    WINDOW: tl.constexpr,  # keys each query sees, itself included; 0: all before it
    SOFTCAP: tl.constexpr,  # 0.0: no cap
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    mb = tl.program_id(2)
    q_start = tl.load(qo_indptr + b)
    q_len = tl.load(qo_indptr + b + 1) - q_start
    kv_start = tl.load(kv_indptr + b)
    seq_len = tl.load(kv_indptr + b + 1) - kv_start
    prefix_len = seq_len - q_len
    kvh = h // GROUP

    offs_m = mb * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < q_len
    mask_d = offs_d < HEAD_DIM
    q_ptrs = Q + (q_start + offs_m)[:, None] * stride_qt + h * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=mask_m[:, None] & mask_d[None, :], other=0.0)  # (M, BD)
    q_pos = prefix_len + offs_m  # absolute position of each query row

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # Keys past this block's last query are masked for every row: stop there. A block wholly
    # past q_len (the grid is sized for the longest extend) visits no key and stores nothing.
    kv_end = tl.minimum(prefix_len + (mb + 1) * BLOCK_M, seq_len)
    kv_end = tl.where(mb * BLOCK_M < q_len, kv_end, 0)
    # Keys before the window of this block's first row are masked for every row: start there.
    if WINDOW > 0:
        kv_lo = tl.maximum(prefix_len + mb * BLOCK_M - WINDOW + 1, 0)
    else:
        kv_lo = 0
    for n0 in range(kv_lo, kv_end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < kv_end
        slots = tl.load(kv_indices + kv_start + offs_n, mask=mask_n, other=0).to(tl.int64)
        k_ptrs = K_buf + slots[None, :] * stride_kt + kvh * stride_kh + offs_d[:, None]
        k = tl.load(k_ptrs, mask=mask_n[None, :] & mask_d[:, None], other=0.0)  # (BD, N)
        qk = tl.dot(q, k, input_precision=DOT_PRECISION) * sm_scale  # (M, N) fp32
        if SOFTCAP > 0:
            qk = soft_cap(qk, SOFTCAP)
        keep = mask_n[None, :] & (offs_n[None, :] <= q_pos[:, None])
        if WINDOW > 0:
            keep = keep & (offs_n[None, :] > q_pos[:, None] - WINDOW)
        qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_ref = m_new
        if WINDOW > 0:
            # A row may have seen no key yet (the block starts before its window): its m_new is
            # -inf, so subtract 0 instead (its alpha and p are 0, not NaN). Without a window
            # key 0 is visible to every row, so m_new is finite from the first step on.
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_ref)
        p = tl.exp(qk - m_ref[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v_ptrs = V_buf + slots[:, None] * stride_vt + kvh * stride_vh + offs_d[None, :]
        v = tl.load(v_ptrs, mask=mask_n[:, None] & mask_d[None, :], other=0.0)  # (N, BD)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new
    if WINDOW > 0:  # rows past q_len may have seen no key (they are not stored)
        l_i = tl.where(l_i > 0, l_i, 1.0)
    acc = acc / l_i[:, None]
    o_ptrs = Out + (q_start + offs_m)[:, None] * stride_ot + h * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])


def extend_attention_fwd(
    q: torch.Tensor,
    k_buf: torch.Tensor,
    v_buf: torch.Tensor,
    out: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    max_extend_len: int,
    sm_scale: float,
    sliding_window: int = 0,
    logit_softcap: float = 0.0,
) -> None:
    """Write into out (T, H, D) the attention of q (T, H, D) over each request's slots.

    Request b's queries are q[qo_indptr[b]:qo_indptr[b+1]]; its keys are the pool rows
    kv_indices[kv_indptr[b]:kv_indptr[b+1]], of which the last q_len are the queries' own
    tokens (causal). k_buf, v_buf (num_slots, Hkv, D); the last dim of every tensor contiguous.
    `sliding_window` > 0 limits each query to its last that many keys (itself included);
    `logit_softcap` > 0 caps the scaled scores at cap * tanh(s / cap). Both are compiled in.
    """
    num_tokens, num_heads, head_dim = q.shape
    batch_size = qo_indptr.numel() - 1
    if num_tokens == 0 or batch_size == 0:
        return
    grid = (batch_size, num_heads, triton.cdiv(max_extend_len, BLOCK_M))
    _extend_kernel[grid](
        q,
        k_buf,
        v_buf,
        out,
        qo_indptr,
        kv_indptr,
        kv_indices,
        sm_scale,
        q.stride(0),
        q.stride(1),
        k_buf.stride(0),
        k_buf.stride(1),
        v_buf.stride(0),
        v_buf.stride(1),
        out.stride(0),
        out.stride(1),
        GROUP=num_heads // k_buf.shape[1],
        HEAD_DIM=head_dim,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        DOT_PRECISION=dot_precision(q.dtype),
        WINDOW=sliding_window,
        SOFTCAP=float(logit_softcap),
        num_warps=4 if head_dim <= 64 else 8,
    )


def dot_precision(dtype: torch.dtype) -> str:
    """tl.dot's input precision for inputs of `dtype`."""
    return dot_precision_name(dtype == torch.float32)


def dot_precision_name(is_float32: bool) -> str:
    """float32 inputs multiply in full precision (tf32 would round them); 16-bit need not."""
    return "ieee" if is_float32 else "tf32"
