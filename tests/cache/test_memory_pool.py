"""Slot allocator, KV pool and req_to_token rows."""

from __future__ import annotations

import pytest
import torch

from radixrt.cache.memory_pool import (
    OutOfSlotsError,
    ReqToTokenPool,
    TokenSlotAllocator,
    TokenToKVPool,
)


def test_alloc_free_roundtrip_never_hands_out_slot_zero() -> None:
    a = TokenSlotAllocator(10)
    x = a.alloc(4)
    y = a.alloc(6)
    assert a.num_free == 0 and 0 not in torch.cat([x, y]).tolist()
    assert sorted(torch.cat([x, y]).tolist()) == list(range(1, 11))
    with pytest.raises(OutOfSlotsError, match="asked for 1 KV slots but only 0 are free"):
        a.alloc(1)
    a.free(x)
    assert a.num_free == 4 and a.can_alloc(4) and not a.can_alloc(5)
    a.free(y)
    assert sorted(a.free_slots.tolist()) == list(range(1, 11))


def test_kv_pool_write_read_and_size() -> None:
    pool = TokenToKVPool(
        8, num_layers=2, num_kv_heads=3, head_dim=4, dtype=torch.float32, device="cpu"
    )
    loc = torch.tensor([3, 5])
    k, v = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    pool.set_kv_buffer(1, loc, k, v)
    kb, vb = pool.get_kv_buffer(1)
    assert torch.equal(kb[loc], k) and torch.equal(vb[loc], v)
    assert torch.count_nonzero(kb[0]) == 0  # the padding slot stays zero
    assert pool.size_bytes == 9 * 2 * 2 * 3 * 4 * 4
    with pytest.raises(ValueError, match="capacity"):
        TokenToKVPool(0, 1, 1, 1, torch.float32, "cpu")


def test_req_to_token_rows() -> None:
    pool = ReqToTokenPool(2, 16, "cpu")
    r1, r2 = pool.alloc(), pool.alloc()
    assert {r1, r2} == {0, 1}
    with pytest.raises(OutOfSlotsError, match="request rows"):
        pool.alloc()
    pool.write(r1, 2, torch.tensor([7, 8, 9]))
    assert pool.req_to_token[r1, :5].tolist() == [0, 0, 7, 8, 9]
    pool.free(r1)
    assert pool.num_free == 1
