"""The prefix tree's narrow surface and its one hook: observers see stored / evicted / hit /
cleared in order, and the tiers, KV events, eviction log and hit counts wired as observers (as
the scheduler's set-up adds them) still spill, load back, publish and explain."""

from __future__ import annotations

import inspect

import torch

from radixrt.cache.explain import EvictionLog, explain
from radixrt.cache.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    KVEvents,
    NoKVEvents,
)
from radixrt.cache.kv_manager import KVCacheManager
from radixrt.cache.memory_pool import ReqToTokenPool, TokenSlotAllocator, TokenToKVPool
from radixrt.cache.pinnable import PinnablePrefixCache
from radixrt.cache.prefix_cache import BasePrefixCache, NoPrefixCache
from radixrt.cache.radix_cache import RadixCache
from radixrt.cache.tiers.contract import NoKVTiers
from radixrt.cache.tiers.hierarchy import KVTiers
from radixrt.cache.tiers.host import HostTier
from radixrt.cache.tiers.spill import SpillToTiers
from radixrt.cache.tree_node import TreeNode, path_key
from radixrt.cache.tree_observer import HitCounter, TreeObserver
from radixrt.cache.tree_summary import summarize
from radixrt.cache.tree_view import pretty_print
from radixrt.core import Req, SamplingParams
from radixrt.scheduler.builder import observe_tree

# The whole surface of BasePrefixCache: a new member must be added here on purpose.
NARROW_ABSTRACT = {
    "match_prefix", "insert", "lock", "unlock", "evict", "reset",
    "evictable_size", "protected_size", "pinned_size", "check_integrity",
}  # fmt: skip
NARROW_PUBLIC = NARROW_ABSTRACT | {"total_size", "caching", "root"}


class Recorder(TreeObserver):
    def __init__(self, log: list[tuple[str, str, list[int]]], name: str = "") -> None:
        self.log, self.name = log, name

    def on_stored(self, node: TreeNode) -> None:
        self.log.append((self.name, "stored", path_key(node)))

    def on_evicted(self, node: TreeNode) -> None:
        self.log.append((self.name, "evicted", path_key(node)))

    def on_hit(self, node: TreeNode) -> None:
        self.log.append((self.name, "hit", path_key(node)))

    def on_cleared(self) -> None:
        self.log.append((self.name, "cleared", []))


class Sender:
    def __init__(self) -> None:
        self.batches: list[KVEventBatch] = []

    def send(self, batch: KVEventBatch) -> None:
        self.batches.append(batch)

    def close(self) -> None:
        pass


def _insert(cache: BasePrefixCache, alloc: TokenSlotAllocator, key: list[int]) -> None:
    slots = alloc.alloc(len(key))
    alloc.free(slots[: cache.insert(key, slots)])


def test_the_base_surface_is_the_narrow_list() -> None:
    assert BasePrefixCache.__abstractmethods__ == NARROW_ABSTRACT
    public = {n for n, _ in inspect.getmembers(BasePrefixCache) if not n.startswith("_")}
    public |= set(BasePrefixCache.__annotations__)
    assert public == NARROW_PUBLIC
    # ... and what the base's constructor sets (the null cache adds only its root).
    fields = {n for n in vars(NoPrefixCache(TokenSlotAllocator(4))) if not n.startswith("_")}
    assert fields == {"allocator", "page_size", "observers", "num_nodes", "root"}
    # Pins are the pinnable cache's (the pin table's) only; the null cache has none.
    extra = PinnablePrefixCache.__abstractmethods__ - NARROW_ABSTRACT
    assert extra == {"pin", "unpin", "unpinned_above"}
    assert not hasattr(NoPrefixCache, "pin") and issubclass(RadixCache, PinnablePrefixCache)


def test_an_observer_sees_stored_evicted_hit_and_cleared_in_order() -> None:
    alloc = TokenSlotAllocator(64)
    cache, log = RadixCache(alloc), []  # type: list[tuple[str, str, list[int]]]
    cache.observers.add(Recorder(log, "a"))
    cache.observers.add(Recorder(log, "b"))
    _insert(cache, alloc, [1, 2, 3])
    _insert(cache, alloc, [1, 2, 3, 4, 5])
    _insert(cache, alloc, [1, 2, 3])  # all cached: nothing stored
    match = cache.match_prefix([1, 2, 9])  # splits [1, 2, 3]: a split stores nothing
    cache.observers.hit(match.last_node)  # the scheduler tells hits
    cache.check_integrity()
    assert cache.evict(100) == 5
    cache.reset()
    seen = [(what, path) for name, what, path in log if name == "a"]
    assert seen == [
        ("stored", [1, 2, 3]),
        ("stored", [1, 2, 3, 4, 5]),
        ("hit", [1, 2]),
        ("evicted", [1, 2, 3, 4, 5]),  # leaves first, then the parents they leave bare
        ("evicted", [1, 2, 3]),
        ("evicted", [1, 2]),
        ("cleared", []),
    ]
    assert [n for n, _, _ in log] == ["a", "b"] * len(seen)  # in the order they were added
    assert alloc.num_free == alloc.capacity


def test_the_builders_observers_keep_log_hits_and_events() -> None:
    alloc, sender = TokenSlotAllocator(64), Sender()
    cache, evictions, events = RadixCache(alloc), EvictionLog(), KVEvents(sender, 2, "CPU")
    observe_tree(cache, evictions, NoKVTiers(), events)
    assert len(cache.observers) == 3  # log, hits, events: no tiers, so no spill observer
    _insert(cache, alloc, [1, 2, 3, 4])
    cache.observers.hit(cache.match_prefix([1, 2, 3, 4]).last_node)
    assert summarize(cache, 5, 100).subtrees[0].hits == 1
    cache.evict(100)
    assert explain(cache, evictions, [1, 2, 3, 4], None, None).cause == "evicted"
    _insert(cache, alloc, [5, 6])
    cache.reset()
    events.publish()
    (batch,) = sender.batches
    kinds = [type(e) for e in batch.events]
    assert kinds == [AllBlocksCleared]  # a clear drops what was pending before it
    _insert(cache, alloc, [7, 8])
    cache.evict(100)
    events.publish()
    assert [type(e) for e in sender.batches[-1].events] == [BlockStored, BlockRemoved]


def test_off_is_no_observer() -> None:
    cache = RadixCache(TokenSlotAllocator(16))
    observe_tree(cache, EvictionLog(), NoKVTiers(), NoKVEvents())
    assert [type(o) for o in cache.observers] == [EvictionLog, HitCounter]
    off = NoPrefixCache(TokenSlotAllocator(16))
    assert len(off.observers) == 0 and "off" in pretty_print(off)
    assert explain(off, EvictionLog(), [1, 2], None, "").cause == "cache_off"


def test_tiers_spill_as_an_observer_and_load_back() -> None:
    capacity, layers, block = 32, 2, 2
    pool = TokenToKVPool(capacity, layers, 1, 2, torch.float32, "cpu")
    alloc = TokenSlotAllocator(capacity)
    shape = (layers, 2, block, 1, 2)
    tiers = KVTiers(pool, [HostTier(shape, torch.float32, 1 << 20)], block, "ab" * 32, 0)
    cache = RadixCache(alloc)
    observe_tree(cache, EvictionLog(), tiers, NoKVEvents())
    assert any(isinstance(o, SpillToTiers) for o in cache.observers)
    kv = KVCacheManager(alloc, ReqToTokenPool(2, 16, "cpu"), cache, tiers)
    key = [3, 1, 4, 1, 5, 9]
    slots = alloc.alloc(len(key))
    for layer in range(layers):
        k, v = pool.get_kv_buffer(layer)
        k[slots] = torch.arange(len(key), dtype=torch.float32).view(-1, 1, 1) + 10 * layer
        v[slots] = -k[slots]
    cache.insert(key, slots)
    assert cache.evict(100) == len(key) and tiers.tiers[0].num_blocks == 3  # spilled
    req = Req("r", key + [2], SamplingParams())
    kv.admit(req)
    assert req.cached_len == len(key) and req.cached_tokens_by_tier == {"device": 0, "host": 6}
    row = kv.req_to_token_pool.req_to_token[req.req_pool_idx, : len(key)].to(torch.int64)
    for layer in range(layers):
        k, v = pool.get_kv_buffer(layer)
        want = torch.arange(len(key), dtype=torch.float32) + 10 * layer
        assert torch.equal(k[row].flatten(0)[::2], want) and torch.equal(v[row], -k[row])
    kv.release(req)
    cache.check_integrity()
