"""KVCacheManager: the glue that gives requests KV slots and hands them to the prefix cache.

Ownership of a running request's token range (see Req in core/req.py):

| tokens               | owner                                   | released                        |
|----------------------|-----------------------------------------|---------------------------------|
| [0, cached_len)      | prefix cache, pinned by lock(last_node) | unlock at finish/retract; the   |
|                      |                                         | cache evicts it later (LRU)     |
| [cached_len, kv_len) | the request                             | `release`: inserted into the    |
|                      |                                         | cache; duplicates (and a        |
|                      |                                         | partial page) freed at once     |
| this step's out_loc  | the request, from `alloc_for`           | as the row above, once computed |

Blocks loaded back from a lower tier (cache/tiers/) at admission take fresh slots that belong
to the admitting request only until `admit` inserts them into the tree, before it returns: from
then on they are tree-owned like any matched prefix, and locked by the request. Slots of a block
that failed to load are freed right there.

So at any idle moment: free + evictable + protected + pinned == capacity (pinned: prefixes the
pin table, cache/pins.py, keeps whatever their locks). With pages
(paged_allocator.py) a request also owns the unused slots of its partly filled last page,
and `slots_held` counts them.

With a window pool (cache/window_base.py) each slot also has window-layer K/V while any query
may read it. A running request holds the tree's window K/V its next query reads (tokens
kv_len - window + 1 .. cached_len - 1) and frees its own once behind that window; both are
updated at admission, after a chunk is cached and after every step (`advance_window`). A
match is cut back to the last point whose preceding window is all there (`usable_len`).
"""

from __future__ import annotations

import torch

from radixrt.cache.memory_pool import OutOfSlotsError, ReqToTokenPool, TokenSlotAllocator
from radixrt.cache.prefix_cache import BasePrefixCache, MatchResult
from radixrt.cache.tiers.contract import BaseKVTiers, LoadResult, NoKVTiers, TierHit
from radixrt.cache.tree_node import TreeNode, held_node
from radixrt.cache.tree_observer import CachedPrefix
from radixrt.core import Req


class KVCacheManager:
    """Matches, locks, allocates and releases KV slots on behalf of requests."""

    def __init__(
        self,
        allocator: TokenSlotAllocator,
        req_to_token_pool: ReqToTokenPool,
        cache: BasePrefixCache,
        tiers: BaseKVTiers | None = None,
    ) -> None:
        self.allocator = allocator
        self.req_to_token_pool = req_to_token_pool
        self.cache = cache
        self.page_size = cache.page_size
        # The tiers admission loads from (lookup, load); writing to them is the tree's
        # observers' (tiers/spill.py, tiers/write_through.py), never this manager's.
        self.tiers = tiers or NoKVTiers()
        self.window = allocator.window  # the window pool (NoWindowSlots: none)
        self._behind: dict[int, int] = {}  # req_to_token row -> own window K/V freed below

    @property
    def available_size(self) -> int:
        """Slots that can be had now: free plus evictable (and as many window slots)."""
        full = self.allocator.num_free + self.cache.evictable_size
        return min(full, self.window.num_available())

    def match(self, req: Req) -> MatchResult:
        """The cached prefix `admit` would reuse (no lock taken; may split tree nodes)."""
        return self.cache.match_prefix(self._match_key(req), req.extra_key)

    def admit(self, req: Req) -> None:
        """Give `req` a req_to_token row holding its cached prefix, locked (OutOfSlotsError):
        the device match, continued by whole blocks loaded back from lower tiers."""
        if self.req_to_token_pool.num_free == 0:
            raise OutOfSlotsError(f"all {self.req_to_token_pool.max_reqs} request rows are in use")
        key = self._match_key(req)
        match = self.cache.match_prefix(key, req.extra_key)
        usable = self.window.usable_len(match.slots)
        if usable < match.slots.numel():  # window K/V behind its end is gone: stop earlier
            match = self.cache.match_prefix(key[:usable], req.extra_key)
        on_device = int(match.slots.numel())
        hit = self.tiers.lookup(key, req.extra_key, on_device)
        loaded = LoadResult()
        if hit is not None:
            match, loaded = self._load(key, req.extra_key, match, hit)
        row = self.req_to_token_pool.alloc()
        n = int(match.slots.numel())
        self.req_to_token_pool.write(row, 0, match.slots)
        self.cache.lock(match.last_node)
        req.req_pool_idx, req.last_node = row, match.last_node
        req.kv_len = req.cached_len = n
        # A draft model's K/V of the device's cached slots is whatever whoever computed them
        # wrote (its drafter's catch-up); blocks loaded from the tiers have none.
        req.draft_kv_len = on_device
        self.advance_window(req)
        if not req.output_ids:  # the first admission; a retracted request keeps its metric
            req.cached_tokens = n
            if self.tiers.names:
                by_tier = {name: loaded.by_tier.get(name, 0) for name in self.tiers.names}
                req.cached_tokens_by_tier = {"device": n - loaded.tokens, **by_tier}
                req.cache_load_s = loaded.seconds

    def prefix_pinned(self, key: list[int], extra_key: str | None) -> None:
        """Tell the tree's observers that the cached prefix `key` (its whole pages) was pinned
        (the lower tiers write it through: tiers/write_through.py)."""
        aligned = len(key) // self.page_size * self.page_size
        self.cache.observers.pinned(self._prefix(key[:aligned], extra_key, 0))

    def slots_needed(self, req: Req, n: int) -> int:
        """Free slots that computing n more tokens of `req` takes (whole pages when paged)."""
        return self.allocator.slots_needed(req.kv_len, n)

    def slots_held(self, req: Req) -> int:
        """Slots `req` itself owns: [cached_len, kv_len), rounded up to whole pages."""
        return self.allocator.slots_needed(req.cached_len, req.kv_len - req.cached_len)

    def tokens_fitting(self, req: Req, slots: int) -> int:
        """The most new tokens of `req` that `slots` free slots can hold."""
        p = self.allocator.page_size
        return -req.kv_len % p + max(slots, 0) // p * p

    def alloc_for(self, reqs: list[Req]) -> torch.Tensor:
        """Slots for each request's next extend_len tokens, in order: (sum,) int64, owned by
        the requests and written into each one's req_to_token row after its kv_len (on rank
        0 the rows are written here, in admit and in cache_unfinished, nowhere else); evicts
        as needed. The caller must have admitted every request (it holds a row)."""
        rows = [_row(r) for r in reqs]
        kv_lens = [r.kv_len for r in reqs]
        extend = [r.extend_len for r in reqs]
        self._make_room(sum(self.allocator.slots_needed(k, e) for k, e in zip(kv_lens, extend)))
        last = None
        if self.allocator.page_size > 1:
            last = self.req_to_token_pool.last_slots(rows, kv_lens)
        out_loc = self.allocator.alloc_extend(kv_lens, extend, last)
        start = 0
        for row, kv_len, e in zip(rows, kv_lens, extend):
            self.req_to_token_pool.write(row, kv_len, out_loc[start : start + e])
            start += e
        return out_loc

    def cache_unfinished(self, req: Req, upto: int | None = None) -> None:
        """Hand the computed tokens of a still-running request (its first `upto` at most) to
        the cache and re-pin them."""
        row = req.req_pool_idx
        assert row is not None
        n_tokens = req.kv_len if upto is None else min(req.kv_len, upto)
        aligned = n_tokens // self.page_size * self.page_size
        key = req.fill_ids[:aligned]
        ours = self.req_to_token_pool.req_to_token[row, :aligned].to(torch.int64)
        self.cache.insert(key, ours.clone(), req.extra_key)
        match = self.cache.match_prefix(key, req.extra_key)
        n = int(match.slots.numel())
        # The cache now owns [0, n). Where its slot differs from ours, ours was a duplicate:
        # free it. [n, kv_len) (everything, with the cache off) stays ours.
        lo = req.cached_len
        dup = ours[lo:n] != match.slots[lo:n]
        self.window.adopt(ours[lo:n][dup], match.slots[lo:n][dup])
        self.window.mark_cached(ours[lo:n][~dup])
        self.allocator.free(ours[lo:n][dup])
        self.req_to_token_pool.write(row, 0, match.slots)
        held = held_node(req)  # admitted: it holds a lock
        self.cache.lock(match.last_node)
        self.cache.unlock(held)
        req.last_node, req.cached_len = match.last_node, n
        self.advance_window(req)

    def advance_window(self, req: Req) -> None:
        """After `req` moved on (admitted, computed a step, cached a chunk): hold the tree's
        window K/V its next query reads and free its own that no query reads any more. No-op
        without a window pool."""
        w, row = self.window.window, req.req_pool_idx
        if not w or row is None:
            return
        table = self.req_to_token_pool.req_to_token[row]
        lo = max(req.kv_len - w + 1, 0)  # the first key position the next query reads
        self.window.set_hold(row, table[lo : max(req.cached_len, lo)].to(torch.int64))
        # [cached_len, kv_len) is the request's own; below lo its window K/V is dead.
        start = max(req.cached_len, self._behind.get(row, 0))
        if lo > start:
            self.window.free_behind(table[start:lo].to(torch.int64))
            self._behind[row] = lo

    def release(self, req: Req) -> None:
        """Finish or retract: hand [cached_len, kv_len) to the cache, unlock, free the row."""
        row = req.req_pool_idx
        if row is None:
            return
        aligned = self._insert(req, req.fill_ids[: req.kv_len])
        new = req.kv_len - req.cached_len
        self.cache.observers.released(self._prefix(req.fill_ids[:aligned], req.extra_key, new))
        if aligned < req.kv_len:  # a partial last page the cache cannot take: ours to free
            tail = self.req_to_token_pool.req_to_token[
                row, max(aligned, req.cached_len) : req.kv_len
            ]
            self.allocator.free(tail.to(torch.int64))
        self.cache.unlock(held_node(req))  # a row is held with its lock (admit)
        self.window.drop_hold(row)
        self._behind.pop(row, None)
        self.req_to_token_pool.free(row)
        req.req_pool_idx, req.last_node = None, None
        req.kv_len = req.cached_len = req.draft_kv_len = 0

    def check_whole(self, num_held_by_requests: int = 0) -> None:
        """Raise RuntimeError unless free + evictable + protected + pinned + held == capacity."""
        c = self.cache
        free, ev, prot, pin = (
            self.allocator.num_free, c.evictable_size, c.protected_size, c.pinned_size,
        )  # fmt: skip
        total = free + ev + prot + pin + num_held_by_requests
        if total != self.allocator.capacity:
            raise RuntimeError(
                f"KV pool leak: free {free} + evictable {ev} + protected {prot} + pinned {pin} "
                f"+ held {num_held_by_requests} = {total} != capacity {self.allocator.capacity}"
            )
        # Idle: no request holds a row (a request whose own slots are all cached, as after a
        # chunk of its prefill, holds none of them but still holds its row's window K/V).
        pool = self.req_to_token_pool
        try:
            self.window.check(idle=pool.num_free == pool.max_reqs)
        except AssertionError as e:
            raise RuntimeError(f"window KV pool: {e}") from e

    def _make_room(self, n: int) -> None:
        """Evict until n slots (and n window slots) are free, window K/V first;
        OutOfSlotsError when even that is not enough."""
        self.window.make_room(n)
        if n > self.allocator.num_free:
            self.cache.evict(n - self.allocator.num_free)
        if n > self.allocator.num_free:
            raise OutOfSlotsError(f"need {n} KV slots, only {self.available_size} can be freed")

    def _load(self, key: list[int], extra_key: str | None, match: MatchResult,
              hit: TierHit) -> tuple[MatchResult, LoadResult]:  # fmt: skip
        """Load `hit` into fresh slots after the device match and insert it into the tree;
        the longer match, and what was loaded. Loads nothing when the slots cannot be had
        without evicting what requests hold."""
        start = int(match.slots.numel())
        need = self.allocator.slots_needed(start, hit.num_tokens)
        self.cache.lock(match.last_node)  # making room must not evict the match itself
        try:
            if need > self.available_size:
                return match, LoadResult()
            self._make_room(need)
            slots = self.allocator.alloc_extend([start], [hit.num_tokens], None)
            loaded = self.tiers.load(hit, slots)
            # [0, start): the tree's. slots[:loaded]: ours until the insert below hands them
            # over. slots[loaded:]: blocks that failed to load, ours to free now.
            self.allocator.free(slots[loaded.tokens :])
            if loaded.tokens:
                end = start + loaded.tokens
                ours = torch.cat([match.slots, slots[: loaded.tokens]])
                present = self.cache.insert(key[:end], ours, extra_key)
                self.allocator.free(slots[: max(present - start, 0)])  # duplicates: none here
        finally:
            self.cache.unlock(match.last_node)
        return self.cache.match_prefix(key, extra_key), loaded

    def _prefix(self, key: list[int], extra_key: str | None, num_new: int) -> CachedPrefix:
        """`key` (whole pages, just cached) as the observers' event; finding its node is a
        match, made only by an observer that acts on it."""

        def find() -> TreeNode | None:
            if not key:
                return None
            match = self.cache.match_prefix(key, extra_key)
            return match.last_node if match.slots.numel() else None

        return CachedPrefix(len(key), num_new, find)

    def _match_key(self, req: Req) -> list[int]:
        # Leave at least one token to compute (its logits pick the next token). With input
        # logprobs from position s, position s-1 must be computed (its logits score token s).
        end = req.seq_len - 1
        p = req.sampling_params
        if p.return_logprob and p.logprob_start_len >= 0 and not req.output_ids:
            end = min(end, p.logprob_start_len - 1)
        return req.fill_ids[: max(end, 0)]

    def _insert(self, req: Req, key: list[int]) -> int:
        """Insert the page-aligned part of key, free our duplicates; return the aligned length."""
        row = req.req_pool_idx
        slots = self.req_to_token_pool.req_to_token[row, : len(key)].to(torch.int64)
        aligned = len(key) // self.page_size * self.page_size
        present = self.cache.insert(key[:aligned], slots[:aligned].clone(), req.extra_key)
        self.window.mark_cached(slots[max(present, req.cached_len) : aligned])
        # [cached_len, present) duplicate what the cache already had: ours to free.
        if present > req.cached_len:
            self.allocator.free(slots[req.cached_len : present])
        return aligned


def _row(req: Req) -> int:
    """The req_to_token row of an admitted request."""
    if req.req_pool_idx is None:
        raise RuntimeError(f"request {req.rid} has no req_to_token row (not admitted)")
    return req.req_pool_idx
