"""Cascade decode attention equals plain per-request attention."""

from __future__ import annotations

import torch

from radixrt.model.attention.decode_cascade import (
    MIN_SHARED_LEN,
    attend_decode,
    build_decode_plan,
)


def _reference(q, table, seq_lens, k_buf, v_buf, hkv, scale):
    outs = []
    for i, n in enumerate(seq_lens):
        slots = table[i, :n]
        k = k_buf[slots].transpose(0, 1)  # (Hkv, n, D)
        v = v_buf[slots].transpose(0, 1)
        qi = q[i].view(hkv, -1, q.shape[-1])  # (Hkv, g, D)
        p = torch.softmax(qi @ k.transpose(-1, -2) * scale, -1)
        outs.append((p @ v).reshape(-1, q.shape[-1]))
    return torch.stack(outs)


def test_groups_prefixes_and_matches_reference() -> None:
    torch.manual_seed(0)
    hkv, heads, d, slots = 2, 6, 16, 2000
    k_buf, v_buf = torch.randn(slots, hkv, d), torch.randn(slots, hkv, d)
    shared_a = torch.randperm(slots - 1)[:300] + 1
    shared_b = torch.randperm(slots - 1)[:50] + 1
    rows, lens = [], []
    for base, tail in (
        (shared_a, 5),
        (shared_a, 40),
        (shared_a[:120], 9),
        (shared_b, 3),
        (shared_b, 1),
        (torch.randperm(slots - 1)[:70] + 1, 0),
    ):
        own = torch.randint(1, slots, (tail,))
        rows.append(torch.cat([base, own]))
        lens.append(len(rows[-1]))
    lmax = max(lens)
    table = torch.zeros(len(rows), lmax, dtype=torch.int64)
    for i, r in enumerate(rows):
        table[i, : len(r)] = r
    plan = build_decode_plan(table, lens)
    assert sorted(len(g.members) for g in plan.groups) == [2, 3]
    shared = sorted(g.prefix_slots.numel() for g in plan.groups)
    assert shared == [50, 120] and shared[0] >= MIN_SHARED_LEN  # capped at shortest - 1
    q = torch.randn(len(rows), heads, d)
    got = attend_decode(q, plan, k_buf, v_buf, hkv, 0.25)
    want = _reference(q, table, lens, k_buf, v_buf, hkv, 0.25)
    # fp32 sums of up to 345 terms in two orders (the CPUs' reductions differ by ISA)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_no_groups_when_nothing_is_shared() -> None:
    table = torch.arange(1, 41).view(4, 10)
    plan = build_decode_plan(table, [10, 10, 10, 10])
    assert plan.groups == [] and torch.equal(plan.kv_idx, table)
