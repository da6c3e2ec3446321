"""PagedSlotAllocator alone, and under KVCacheManager + RadixCache with partial pages.

The state machine drives requests the way the scheduler does (admit, extend by any number of
tokens, decode a batch, cache_unfinished, release, evict) and after every step checks that
each page has exactly one owner (free list, cache or one request), that token t of every
request sits at offset t % P of a page holding only that request's tokens, and that the pool
is whole: free + evictable + protected + held by requests = capacity.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from radixrt.cache.kv_manager import KVCacheManager
from radixrt.cache.memory_pool import OutOfSlotsError, ReqToTokenPool, TokenToKVPool
from radixrt.cache.paged_allocator import PagedSlotAllocator
from radixrt.cache.prefix_cache import NoPrefixCache
from radixrt.cache.radix_cache import RadixCache
from radixrt.core import Req, SamplingParams

P = 4
CAPACITY = 48  # 12 pages


def test_fresh_extend_and_decode_fill_pages_in_order() -> None:
    a = PagedSlotAllocator(CAPACITY, P)
    x = a.alloc(6)  # pages 1, 2; slots 4..9 used, 10..11 owned but unused
    assert x.tolist() == [4, 5, 6, 7, 8, 9] and a.num_free == CAPACITY - 8
    last = torch.tensor([9, 0, 0])
    y = a.alloc_extend([6, 0, 4], [3, 2, 1], last)  # fill 10, 11 then a page; fresh; fresh
    assert y.tolist() == [10, 11, 12, 16, 17, 20]
    z = a.alloc_extend([9, 2], [1, 1], torch.tensor([12, 17]))  # decode: both continue a page
    assert z.tolist() == [13, 18] and a.num_free == CAPACITY - 20
    assert a.slots_needed(9, 1) == 0 and a.slots_needed(8, 1) == 4 and a.slots_needed(5, 8) == 8
    a.free(torch.tensor([16, 17, 18]))  # page 4
    assert a.num_free == CAPACITY - 16 and a.free_pages[-1].item() == 4
    assert set(a.free_slots.tolist()) == set(range(16, 20)) | set(range(24, CAPACITY + P))


def test_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="multiple"):
        PagedSlotAllocator(10, P)
    a = PagedSlotAllocator(8, P)
    with pytest.raises(OutOfSlotsError, match="12 KV slots .3 pages of 4. but only 8"):
        a.alloc(9)
    a.alloc(2)
    with pytest.raises(ValueError, match="last slot"):
        a.alloc_extend([2], [1], None)


def test_pool_pads_a_whole_page() -> None:
    pool = TokenToKVPool(8, 1, 2, 4, torch.float32, "cpu", page_size=P)
    k, _ = pool.get_kv_buffer(0)
    assert k.shape == (12, 2, 4) and torch.count_nonzero(k[:P]) == 0
    assert k.view(-1, P, 2, 4).shape[0] == 3  # padding page + 2 usable pages
    with pytest.raises(ValueError, match="whole number"):
        TokenToKVPool(6, 1, 2, 4, torch.float32, "cpu", page_size=P)


class PagedKVMachine(RuleBasedStateMachine):
    cache_cls: type = RadixCache

    def __init__(self) -> None:
        super().__init__()
        self.alloc = PagedSlotAllocator(CAPACITY, P)
        self.rows = ReqToTokenPool(5, 64, "cpu")
        self.kv = KVCacheManager(self.alloc, self.rows, self.cache_cls(self.alloc, page_size=P))
        self.running: list[Req] = []
        self.n = 0

    def _extend(self, reqs: list[Req]) -> None:
        try:
            out = self.kv.alloc_for(reqs)
        except OutOfSlotsError:
            return
        start = 0
        for r in reqs:  # alloc_for wrote each request's new slots into its row
            row = self.rows.req_to_token[r.req_pool_idx, r.kv_len : r.kv_len + r.extend_len]
            assert torch.equal(row.to(torch.int64), out[start : start + r.extend_len])
            start += r.extend_len
            r.kv_len += r.extend_len

    @precondition(lambda self: self.rows.num_free > 0)
    @rule(key=st.lists(st.integers(0, 2), min_size=1, max_size=24), ns=st.sampled_from([None, "a"]))
    def start(self, key: list[int], ns: str | None) -> None:
        self.n += 1
        req = Req(f"r{self.n}", key, SamplingParams(max_new_tokens=64), extra_key=ns)
        self.kv.admit(req)
        assert req.cached_len % P == 0
        self.running.append(req)

    @precondition(lambda self: self.running)
    @rule(data=st.data(), n=st.integers(1, 11))
    def extend(self, data: st.DataObject, n: int) -> None:
        req = data.draw(st.sampled_from(self.running))
        if req.kv_len == req.seq_len:
            req.output_ids.append(n % 3)  # a sampled token joins the sequence
        req.extend_len = min(n, req.seq_len - req.kv_len)
        self._extend([req])

    @precondition(lambda self: self.running)
    @rule()
    def decode_all(self) -> None:
        for r in self.running:
            if r.kv_len == r.seq_len:
                r.output_ids.append(1)
            r.extend_len = 1
        self._extend(self.running)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def cache_unfinished(self, data: st.DataObject) -> None:
        self.kv.cache_unfinished(data.draw(st.sampled_from(self.running)))

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        req = data.draw(st.sampled_from(self.running))
        self.running.remove(req)
        self.kv.release(req)

    @rule(n=st.integers(0, CAPACITY))
    def evict(self, n: int) -> None:
        self.kv.cache.evict(n)

    @invariant()
    def pages_have_one_owner(self) -> None:
        self.kv.cache.check_integrity()
        self.kv.check_whole(sum(self.kv.slots_held(r) for r in self.running))
        owners = [self.alloc.free_pages.tolist()]
        for r in self.running:
            slots = self.rows.req_to_token[r.req_pool_idx, : r.kv_len].long()
            t = torch.arange(r.kv_len)
            assert torch.equal(slots % P, t % P), "token t off offset t % P"
            assert torch.equal(slots // P, slots[t - t % P] // P), "a page split across pages"
            owners.append(sorted(set((slots[r.cached_len :] // P).tolist())))
        nodes = [n for n in _nodes(self.kv.cache.root)]
        owners += [sorted(set((n.slots // P).tolist())) for n in nodes]
        flat = [p for pages in owners for p in pages]
        assert len(flat) == len(set(flat)) == CAPACITY // P, "a page lost or owned twice"

    def teardown(self) -> None:
        for r in self.running:
            self.kv.release(r)
        self.kv.cache.reset()
        assert self.alloc.num_free == CAPACITY


class PagedNoCacheMachine(PagedKVMachine):
    cache_cls = NoPrefixCache


def _nodes(root) -> list:
    out, stack = [], list(root.children.values())
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children.values())
    return out


_SETTINGS = settings(max_examples=120, stateful_step_count=40, deadline=None)
TestPagedKV = PagedKVMachine.TestCase
TestPagedKV.settings = _SETTINGS
TestPagedNoCache = PagedNoCacheMachine.TestCase
TestPagedNoCache.settings = _SETTINGS
