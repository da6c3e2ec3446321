"""Write-through is a tree observer: the KV manager tells the tree's observers what a request
leaves in it and never writes to a tier itself; `WriteThrough` writes a released prefix that
the request added to and that reaches the threshold, and every pinned prefix, and nothing for a
running request's chunks."""

from __future__ import annotations

from radixrt.cache.explain import EvictionLog
from radixrt.cache.kv_events import NoKVEvents
from radixrt.cache.kv_manager import KVCacheManager
from radixrt.cache.memory_pool import ReqToTokenPool, TokenSlotAllocator
from radixrt.cache.radix_cache import RadixCache
from radixrt.cache.tiers.contract import NoKVTiers
from radixrt.cache.tiers.write_through import WriteThrough
from radixrt.cache.tree_node import TreeNode, path_key
from radixrt.core import Req, SamplingParams
from radixrt.scheduler.builder import observe_tree

MIN_TOKENS = 8
PROMPT = list(range(100, 112))  # 12 tokens: over the threshold
SHORT = [7, 8, 9, 10, 11]  # under it


class RecordingTiers(NoKVTiers):
    """A lowest tier that records the paths written through to it."""

    names = ("disk",)

    def __init__(self) -> None:
        self.written: list[list[int]] = []

    def wants_write_through(self, num_tokens: int) -> bool:
        return num_tokens >= MIN_TOKENS

    def write_through(self, node: TreeNode) -> None:
        self.written.append(path_key(node))


class LoadOnlyTiers(NoKVTiers):
    """What the KV manager is given: tiers it may look up and load from, never write to."""

    def wants_write_through(self, num_tokens: int) -> bool:
        raise AssertionError("the KV manager asked about write-through")

    def write_through(self, node: TreeNode) -> None:
        raise AssertionError("the KV manager wrote through")


def _setup() -> tuple[KVCacheManager, RecordingTiers]:
    alloc = TokenSlotAllocator(64)
    cache = RadixCache(alloc)
    tiers = RecordingTiers()
    observe_tree(cache, EvictionLog(), tiers, NoKVEvents())
    assert sum(isinstance(o, WriteThrough) for o in cache.observers) == 1
    return KVCacheManager(alloc, ReqToTokenPool(4, 32, "cpu"), cache, LoadOnlyTiers()), tiers


def _compute(kv: KVCacheManager, req: Req, n: int) -> None:
    """What a forward step does to the request's KV: n more tokens computed."""
    req.extend_len = n
    kv.alloc_for([req])
    req.kv_len += n


def test_writes_at_release_and_pin_only() -> None:
    kv, tiers = _setup()
    first = Req("a", PROMPT, SamplingParams())
    kv.admit(first)
    _compute(kv, first, 6)
    kv.cache_unfinished(first)  # a chunk of chunked prefill: nothing written
    _compute(kv, first, 6)
    assert tiers.written == []
    kv.release(first)  # finished, 6 new tokens, 12 >= 8: written
    assert tiers.written == [PROMPT]

    again = Req("b", PROMPT + [1], SamplingParams())
    kv.admit(again)  # matched the whole prompt, released before computing: nothing new
    assert again.cached_len == len(PROMPT)
    kv.release(again)
    assert tiers.written == [PROMPT]

    short = Req("c", SHORT, SamplingParams())
    kv.admit(short)
    _compute(kv, short, len(SHORT))
    kv.release(short)  # under the threshold: left to write-back
    assert tiers.written == [PROMPT]
    kv.prefix_pinned(SHORT, None)  # pinned: written whatever its length
    assert tiers.written == [PROMPT, SHORT]
    kv.prefix_pinned([], None)  # nothing cached: nothing to write
    assert tiers.written == [PROMPT, SHORT]
    kv.check_whole()
    kv.cache.check_integrity()


def test_the_manager_works_without_tiers() -> None:
    alloc = TokenSlotAllocator(32)
    cache = RadixCache(alloc)
    kv = KVCacheManager(alloc, ReqToTokenPool(2, 16, "cpu"), cache)
    req = Req("a", PROMPT, SamplingParams())
    kv.admit(req)
    _compute(kv, req, len(PROMPT))
    kv.release(req)
    kv.prefix_pinned(PROMPT, None)
    assert cache.evictable_size == len(PROMPT)
    kv.check_whole()
