"""Decode attention, flash-decoding style: each request's slot list is cut into NUM_SPLITS
pieces attended in parallel (stage 1), whose partial outputs are merged by their
log-sum-exp (stage 2). A stage-1 program serves all query heads of one KV head (GQA), so each
K/V row is read once per group.

With a sliding window w (a compile-time constant, as the soft cap) a request of n keys attends
to its last min(n, w) only: the splits cut that range, so both stages agree on it and no key
outside it is read."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radixrt.model.attention.triton_kernels.extend_attention import dot_precision, soft_cap

BLOCK_N = 32  # KV slots per inner step; splits are whole multiples of it


@triton.jit
def _window(seq_len, WINDOW: tl.constexpr):
    """(first key, number of keys) the last of seq_len positions attends to."""
    if WINDOW > 0:
        win_len = tl.minimum(seq_len, WINDOW)
    else:
        win_len = seq_len
    return seq_len - win_len, win_len


@triton.jit
def _decode_split_kernel(
    Q,  # (B, H, D)
    K_buf,  # (num_slots, Hkv, D)
    V_buf,  # (num_slots, Hkv, D)
    Mid_O,  # (B, H, NUM_SPLITS, D) float32: each split's normalised output
    Mid_LSE,  # (B, H, NUM_SPLITS) float32: each split's log-sum-exp
    kv_indptr,  # (B+1,) int32
    kv_indices,  # (>= sum(seq_lens),) int32
    sm_scale,
    stride_qb,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    GROUP: tl.constexpr,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_H: tl.constexpr,  # >= GROUP, and >= 16 for tl.dot
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    WINDOW: tl.constexpr,  # keys the query sees, itself included; 0: all
    SOFTCAP: tl.constexpr,  # 0.0: no cap
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    s = tl.program_id(2)
    kv_start = tl.load(kv_indptr + b)
    seq_len = tl.load(kv_indptr + b + 1) - kv_start
    win_lo, win_len = _window(seq_len, WINDOW)
    split_len = tl.cdiv(tl.cdiv(win_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = win_lo + s * split_len
    hi = tl.minimum(lo + split_len, seq_len)

    offs_g = tl.arange(0, BLOCK_H)
    heads = kvh * GROUP + offs_g
    mask_h = offs_g < GROUP
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    q_ptrs = Q + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=mask_h[:, None] & mask_d[None, :], other=0.0)  # (BH, BD)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < hi
        slots = tl.load(kv_indices + kv_start + offs_n, mask=mask_n, other=0).to(tl.int64)
        k_ptrs = K_buf + slots[None, :] * stride_kt + kvh * stride_kh + offs_d[:, None]
        k = tl.load(k_ptrs, mask=mask_n[None, :] & mask_d[:, None], other=0.0)  # (BD, N)
        qk = tl.dot(q, k, input_precision=DOT_PRECISION) * sm_scale  # (BH, N) fp32
        if SOFTCAP > 0:
            qk = soft_cap(qk, SOFTCAP)
        qk = tl.where(mask_n[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))  # finite: every visited block has a valid key
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v_ptrs = V_buf + slots[:, None] * stride_vt + kvh * stride_vh + offs_d[None, :]
        v = tl.load(v_ptrs, mask=mask_n[:, None] & mask_d[None, :], other=0.0)  # (N, BD)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    # An empty split (lo >= seq_len) stores nothing; stage 2 skips it by the same rule.
    has_keys = (lo + 0 * offs_g) < seq_len  # (BH,): the same for every head
    row = (b * NUM_HEADS + heads) * NUM_SPLITS + s  # (BH,) index into Mid_LSE
    o_ptrs = Mid_O + row[:, None] * HEAD_DIM + offs_d[None, :]
    out = acc / l_i[:, None]
    tl.store(o_ptrs, out, mask=(has_keys & mask_h)[:, None] & mask_d[None, :])
    tl.store(Mid_LSE + row, m_i + tl.log(l_i), mask=has_keys & mask_h)


@triton.jit
def _decode_merge_kernel(
    Mid_O,  # (B, H, NUM_SPLITS, D) float32
    Mid_LSE,  # (B, H, NUM_SPLITS) float32
    Out,  # (B, H, D)
    kv_indptr,  # (B+1,) int32
    stride_ob,
    stride_oh,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,  # NUM_SPLITS rounded up to a power of two
    WINDOW: tl.constexpr,  # as stage 1's, so both cut the same splits
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    seq_len = tl.load(kv_indptr + b + 1) - tl.load(kv_indptr + b)
    _, win_len = _window(seq_len, WINDOW)
    split_len = tl.cdiv(tl.cdiv(win_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    offs_s = tl.arange(0, BLOCK_S)
    has_keys = (offs_s < NUM_SPLITS) & (offs_s * split_len < win_len)  # split 0 always has
    row = (b * NUM_HEADS + h) * NUM_SPLITS + offs_s  # (BS,)
    lse = tl.load(Mid_LSE + row, mask=has_keys, other=float("-inf"))
    o_ptrs = Mid_O + row[:, None] * HEAD_DIM + offs_d[None, :]
    o = tl.load(o_ptrs, mask=has_keys[:, None] & mask_d[None, :], other=0.0)  # (BS, BD)
    w = tl.exp(lse - tl.max(lse, 0))  # (BS,), 0 for empty splits
    acc = tl.sum(w[:, None] * o, 0) / tl.sum(w, 0)  # (BD,)
    o_ptrs = Out + b * stride_ob + h * stride_oh + offs_d
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=mask_d)


def decode_attention_fwd(
    q: torch.Tensor,
    k_buf: torch.Tensor,
    v_buf: torch.Tensor,
    out: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    mid_o: torch.Tensor,
    mid_lse: torch.Tensor,
    sm_scale: float,
    sliding_window: int = 0,
    logit_softcap: float = 0.0,
) -> None:
    """Write into out (B, H, D) one query per request, q (B, H, D), attended over the pool rows
    kv_indices[kv_indptr[b]:kv_indptr[b+1]] (at least one each), or their last
    `sliding_window` when that is > 0; `logit_softcap` > 0 caps the scaled scores.

    mid_o (>= B, H, S, D) and mid_lse (>= B, H, S) float32 are scratch, S = num KV splits;
    they are contiguous so a CUDA graph can keep one pair for every batch size. The grids
    depend only on B, H, Hkv and S, never on sequence lengths.
    """
    batch_size, num_heads, head_dim = q.shape
    if batch_size == 0:
        return
    num_kv_heads = k_buf.shape[1]
    num_splits = mid_lse.shape[-1]
    group = num_heads // num_kv_heads
    block_d = max(16, triton.next_power_of_2(head_dim))
    assert mid_o.is_contiguous() and mid_lse.is_contiguous() and mid_o.shape[-1] == head_dim
    _decode_split_kernel[(batch_size, num_kv_heads, num_splits)](
        q,
        k_buf,
        v_buf,
        mid_o,
        mid_lse,
        kv_indptr,
        kv_indices,
        sm_scale,
        q.stride(0),
        q.stride(1),
        k_buf.stride(0),
        k_buf.stride(1),
        v_buf.stride(0),
        v_buf.stride(1),
        GROUP=group,
        NUM_HEADS=num_heads,
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_H=max(16, triton.next_power_of_2(group)),
        BLOCK_N=BLOCK_N,
        NUM_SPLITS=num_splits,
        DOT_PRECISION=dot_precision(q.dtype),
        WINDOW=sliding_window,
        SOFTCAP=float(logit_softcap),
        num_warps=4,
    )
    _decode_merge_kernel[(batch_size, num_heads)](
        mid_o,
        mid_lse,
        out,
        kv_indptr,
        out.stride(0),
        out.stride(1),
        NUM_HEADS=num_heads,
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_N=BLOCK_N,
        NUM_SPLITS=num_splits,
        BLOCK_S=triton.next_power_of_2(num_splits),
        WINDOW=sliding_window,
        num_warps=4,
    )
