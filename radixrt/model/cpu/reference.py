"""Torch definitions of what the CPU attention kernels compute (kernels.decode_attention,
kernels.extend_attention), one request at a time with SDPA over the pool's rows widened to
float32: the references the kernels are tested against (tests/kernels/)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from radixrt.cache.kv_layout import from_rows, head_dim_of, to_rows


def decode_attention_ref(
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    k_buf: torch.Tensor,
    v_buf: torch.Tensor,
    out_loc: torch.Tensor,
    req_to_token: torch.Tensor,
    rows: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """What `decode_attention` computes, one request at a time with SDPA (a narrower pool
    stores k_new, v_new as kv_layout.to_rows does and is read widened to float32)."""
    hkv, d = k_buf.shape[1], head_dim_of(k_buf)
    k_buf[out_loc] = to_rows(k_new.reshape(-1, hkv, d), k_buf.dtype)
    v_buf[out_loc] = to_rows(v_new.reshape(-1, hkv, d), v_buf.dtype)
    outs = []
    for i in range(q.shape[0]):
        slots = req_to_token[rows[i], : seq_lens[i]].long()
        kk = from_rows(k_buf[slots], torch.float32).transpose(0, 1)
        vv = from_rows(v_buf[slots], torch.float32).transpose(0, 1)
        qi = q[i].view(-1, 1, d)  # (Hq, 1, D)
        o = F.scaled_dot_product_attention(qi, kk, vv, scale=scale, enable_gqa=True)
        outs.append(o.reshape(-1))
    return torch.stack(outs)


def extend_attention_ref(
    q: torch.Tensor,
    k_buf: torch.Tensor,
    v_buf: torch.Tensor,
    slots: torch.Tensor,
    prefix_len: int,
    scale: float,
    window: int = 0,
) -> torch.Tensor:
    """What `extend_attention` computes, with SDPA and an explicit causal (windowed) mask."""
    e, d = q.shape[0], head_dim_of(k_buf)
    idx = slots[: prefix_len + e].long()
    kk = from_rows(k_buf[idx], torch.float32).transpose(0, 1)
    vv = from_rows(v_buf[idx], torch.float32).transpose(0, 1)
    qq = q.view(e, -1, d).transpose(0, 1)  # (Hq, e, D)
    keys = torch.arange(prefix_len + e)
    pos = (prefix_len + torch.arange(e))[:, None]
    mask = keys[None, :] <= pos
    if window:
        mask &= keys[None, :] > pos - window
    o = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, scale=scale, enable_gqa=True)
    return o.transpose(0, 1).reshape(e, -1)
