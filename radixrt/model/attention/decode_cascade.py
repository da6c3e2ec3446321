"""Decode attention that reads a prefix shared by several requests once (cascade attention).

Requests that hit the same cached prefix in the radix tree point at the same KV slots for it.
Attending to those slots once for the whole group, then merging with each request's own
suffix by log-sum-exp, cuts the K/V read from sum(seq_len) to shared + sum(suffix) tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixrt.cache.kv_layout import from_rows

# A shared prefix shorter than this is attended per request (grouping would not pay).
MIN_SHARED_LEN = 32


@dataclass(slots=True)
class SharedGroup:
    members: torch.Tensor  # (n,) int64 indices into the decode rows
    prefix_slots: torch.Tensor  # (Lp,) int64 KV slots every member attends to first


@dataclass(slots=True)
class DecodePlan:
    """Per-batch layout; every row attends to `kv_idx` (its suffix) plus its group's prefix."""

    kv_idx: torch.Tensor  # (Bd, Ls) int64 suffix slots; padding points at slot 0
    mask: torch.Tensor  # (Bd, 1, 1, Ls) bool, True = attend
    groups: list[SharedGroup]


def build_decode_plan(table: torch.Tensor, seq_lens: list[int]) -> DecodePlan:
    """Split each row of `table` (Bd, Lmax) slots into a group-shared prefix and a suffix.

    Rows whose slots agree on their first MIN_SHARED_LEN+ positions form a group; the shared
    length stops one short of the shortest member so every row keeps a suffix of >= 1 token.
    """
    dev = table.device
    bd, lmax = table.shape
    lens = torch.tensor(seq_lens, dtype=torch.int64, device=dev)
    start = torch.zeros(bd, dtype=torch.int64, device=dev)
    groups: list[SharedGroup] = []
    by_first: dict[int, list[int]] = {}
    for i, first in enumerate(table[:, 0].tolist()):
        by_first.setdefault(first, []).append(i)
    for members in by_first.values():
        cap = min(seq_lens[i] for i in members) - 1
        if len(members) < 2 or cap < MIN_SHARED_LEN:
            continue
        rows = table[members, :cap]
        same = (rows == rows[:1]).all(0)  # (cap,) bool
        shared = int(same.int().cumprod(0).sum())
        if shared < MIN_SHARED_LEN:
            continue
        idx = torch.tensor(members, dtype=torch.int64, device=dev)
        start[idx] = shared
        groups.append(SharedGroup(idx, table[members[0], :shared].clone()))
    suffix_lens = lens - start
    ls = int(suffix_lens.max())
    offsets = torch.arange(ls, device=dev)
    valid = offsets[None, :] < suffix_lens[:, None]  # (Bd, Ls)
    pos = (start[:, None] + offsets[None, :]).clamp_(max=lmax - 1)
    kv_idx = torch.where(valid, table.gather(1, pos), torch.zeros_like(pos))
    return DecodePlan(kv_idx, valid[:, None, None, :], groups)


def attend_decode(
    q: torch.Tensor,
    plan: DecodePlan,
    k_buf: torch.Tensor,
    v_buf: torch.Tensor,
    num_kv_heads: int,
    scaling: float,
    softcap: float = 0.0,
) -> torch.Tensor:
    """q (Bd, H, D) against the plan's slots in k_buf/v_buf (slots, Hkv, D; narrower pools
    widened to q's dtype, fp8 rows times their scales: kv_layout.py) -> (Bd, H, D);
    `softcap` > 0 caps the scores at softcap * tanh(s / softcap) before the softmax."""
    bd, num_heads, d = q.shape
    g = num_heads // num_kv_heads
    qg = q.view(bd, num_kv_heads, g, d)
    shape = (*plan.kv_idx.shape, num_kv_heads, d)
    flat = plan.kv_idx.flatten()
    kk = from_rows(k_buf.index_select(0, flat), q.dtype).view(shape).transpose(1, 2)
    vv = from_rows(v_buf.index_select(0, flat), q.dtype).view(shape).transpose(1, 2)
    scores = (torch.matmul(qg, kk.transpose(-1, -2)) * scaling).float()  # (Bd, Hkv, g, Ls)
    scores = cap_scores(scores, softcap).masked_fill(~plan.mask, float("-inf"))
    m_u = scores.amax(-1, keepdim=True)  # (Bd, Hkv, g, 1)
    p = torch.exp(scores - m_u)
    l_u = p.sum(-1, keepdim=True)
    o_u = torch.matmul(p.to(vv.dtype), vv).float()  # (Bd, Hkv, g, D), unnormalised
    out = o_u / l_u
    for grp in plan.groups:
        o_p, l_p, m_p = _attend_shared(
            qg[grp.members], grp.prefix_slots, k_buf, v_buf, scaling, softcap
        )
        idx = grp.members
        m = torch.maximum(m_u[idx], m_p)
        a, b = torch.exp(m_u[idx] - m), torch.exp(m_p - m)
        out[idx] = (o_u[idx] * a + o_p * b) / (l_u[idx] * a + l_p * b)
    return out.to(q.dtype).view(bd, num_heads, d)


def cap_scores(scores: torch.Tensor, softcap: float) -> torch.Tensor:
    """softcap * tanh(scores / softcap), or scores unchanged when softcap is 0."""
    return torch.tanh(scores / softcap) * softcap if softcap else scores


def _attend_shared(
    qg: torch.Tensor,
    slots: torch.Tensor,
    k_buf: torch.Tensor,
    v_buf: torch.Tensor,
    scaling: float,
    softcap: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unnormalised attention of qg (n, Hkv, g, D) over shared slots (Lp,) read once.

    Returns o (n, Hkv, g, D), l and m (n, Hkv, g, 1), all float32.
    """
    n, hkv, g, d = qg.shape
    kp = from_rows(k_buf.index_select(0, slots), qg.dtype).permute(1, 2, 0)  # (Hkv, D, Lp)
    vp = from_rows(v_buf.index_select(0, slots), qg.dtype).transpose(0, 1)  # (Hkv, Lp, D)
    qh = qg.permute(1, 0, 2, 3).reshape(hkv, n * g, d)  # every member's heads as one batch
    s = cap_scores((torch.matmul(qh, kp) * scaling).float(), softcap)  # (Hkv, n*g, Lp)
    m = s.amax(-1, keepdim=True)
    p = torch.exp(s - m)
    l_ = p.sum(-1, keepdim=True)
    o = torch.matmul(p.to(vp.dtype), vp).float()  # (Hkv, n*g, D)

    def back(x: torch.Tensor) -> torch.Tensor:
        return x.view(hkv, n, g, -1).permute(1, 0, 2, 3)

    return back(o), back(l_), back(m)
