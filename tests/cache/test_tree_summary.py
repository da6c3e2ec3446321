"""The dashboard's tree summary on a RadixCache: rows per root child and, for a big one, its
largest children; hits, idle time, pinned and locked tokens; the caps; read-only. Also the
scheduler's miss log, which explains a miss as the tree stood at its admission."""

from __future__ import annotations

import time
from typing import Any

from radixrt.cache.explain import EvictionLog, Explanation, explain
from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.prefix_cache import NoPrefixCache
from radixrt.cache.radix_cache import RadixCache
from radixrt.cache.tree_observer import HitCounter
from radixrt.cache.tree_summary import PREFIX_IDS, TreeSummary, summarize
from radixrt.cache.tree_view import pretty_print
from radixrt.core import Req, SamplingParams
from radixrt.scheduler.misses import BURST_S, MAX_TIME_SHARE, MissLog

SYSTEM = list(range(100, 140))  # 40 tokens every "request" below starts with


def _cache(capacity: int = 512) -> tuple[RadixCache, TokenSlotAllocator]:
    alloc = TokenSlotAllocator(capacity)
    return RadixCache(alloc), alloc


def _insert(cache: RadixCache, alloc: TokenSlotAllocator, key: list[int], ns: str | None = None):
    slots = alloc.alloc(len(key))
    n = cache.insert(key, slots, ns)
    alloc.free(slots[:n])
    cache.check_integrity()


def _admit(cache: RadixCache, key: list[int], ns: str | None = None):
    """What the scheduler does for an admitted request: match, lock, count the hit."""
    m = cache.match_prefix(key, ns)
    cache.lock(m.last_node)
    HitCounter().on_hit(m.last_node)
    return m.last_node


def test_rows_are_root_children_then_the_children_of_a_big_one() -> None:
    cache, alloc = _cache()
    for i in range(3):
        _insert(cache, alloc, SYSTEM + [i] * (10 + 5 * i))  # 3 branches under one system prompt
    _insert(cache, alloc, [7, 8, 9])  # a small other root child
    _insert(cache, alloc, SYSTEM, ns="tenant-b")  # the same tokens in another namespace
    summary = summarize(cache, 20, 10_000)
    assert summary.num_nodes == cache.num_nodes == 4 + 1 + 1
    assert summary.walked_nodes == 6 and not summary.truncated
    top, *kids = [r for r in summary.subtrees if r.extra_key is None][:4]
    assert (top.depth, top.offset, top.tokens, top.nodes) == (1, 0, 40 + 10 + 15 + 20, 4)
    assert top.prefix_ids == SYSTEM[:PREFIX_IDS]
    assert [(k.depth, k.offset, k.tokens) for k in kids] == [(2, 40, 20), (2, 40, 15), (2, 40, 10)]
    assert kids[0].prefix_ids == [2] * 20
    by_tokens = [r.tokens for r in summary.subtrees if r.depth == 1]
    assert by_tokens == sorted(by_tokens, reverse=True) == [85, 40, 3]
    (other,) = [r for r in summary.subtrees if r.extra_key == "tenant-b"]
    assert other.tokens == 40 and other.depth == 1
    assert sum(r.tokens for r in summary.subtrees if r.depth == 1) == cache.total_size()


def test_a_short_shared_node_is_looked_through_for_the_branches_below_it() -> None:
    cache, alloc = _cache()
    template, you_are = [1, 2, 3, 4], [5]  # a chat template's head, then "You are"
    _insert(cache, alloc, template + you_are + [10] * 20)
    _insert(cache, alloc, template + you_are + [11] * 30)
    _insert(cache, alloc, template + [6] * 12)
    top, *branches = summarize(cache, 20, 10_000).subtrees
    assert top.prefix_ids == template and top.tokens == 4 + 1 + 20 + 30 + 12
    assert [(b.depth, b.offset, b.tokens) for b in branches] == [(2, 4, 30), (2, 4, 20), (2, 4, 12)]
    assert branches[0].prefix_ids == (you_are + [11] * 30)[:PREFIX_IDS]
    assert branches[2].prefix_ids == [6] * 12


def test_hits_idle_time_locks_and_pins() -> None:
    cache, alloc = _cache()
    _insert(cache, alloc, SYSTEM + [1, 2, 3])
    _insert(cache, alloc, SYSTEM + [4, 5])
    time.sleep(0.05)
    node = _admit(cache, SYSTEM + [1, 2, 3, 9])  # holds the system prompt and branch 1
    _admit(cache, SYSTEM + [7])  # the system prompt only
    top = summarize(cache, 20, 10_000).subtrees[0]
    assert top.hits == 2 and top.idle_s < 0.05
    assert top.locked_tokens == 43 and top.pinned_tokens == 0
    cache.pin(node)
    rows = summarize(cache, 20, 10_000).subtrees
    assert rows[0].pinned_tokens == 43 and rows[0].locked_tokens == 0
    (branch,) = [r for r in rows if r.depth == 2 and r.prefix_ids == [1, 2, 3]]
    assert branch.hits == 1 and branch.pinned_tokens == 3
    (idle,) = [r for r in rows if r.depth == 2 and r.prefix_ids == [4, 5]]
    assert idle.hits == 0 and idle.idle_s >= 0.05
    cache.unpin(node)
    cache.check_integrity()


def test_a_split_copies_hits_and_last_use() -> None:
    cache, alloc = _cache()
    _insert(cache, alloc, SYSTEM)
    HitCounter().on_hit(_admit(cache, SYSTEM))  # two hits on the whole prompt
    used = cache.root.children[(None, SYSTEM[0])].last_used
    cache.match_prefix(SYSTEM[:10] + [0])  # splits the node after 10 tokens
    upper = cache.root.children[(None, SYSTEM[0])]
    (lower,) = upper.children.values()
    assert len(upper.key) == 10 and upper.hit_count == 2 and lower.hit_count == 2
    assert upper.last_used > used and lower.last_used == used
    cache.check_integrity()


def test_the_walk_and_the_rows_are_capped_and_change_nothing() -> None:
    cache, alloc = _cache(4096)
    for i in range(30):
        _insert(cache, alloc, [1000 + i] + [i] * 5)
        _insert(cache, alloc, [1000 + i] + [i] * 5 + [7, 7])
    before = pretty_print(cache)
    rows = summarize(cache, 5, 10_000).subtrees
    assert len(rows) == 5
    capped = summarize(cache, 20, 10)
    assert capped.truncated and capped.walked_nodes == 10 and capped.num_nodes == 60
    assert len(capped.subtrees) <= 10
    assert pretty_print(cache) == before
    cache.check_integrity()
    cache.evict(10_000)
    assert cache.num_nodes == 0 and summarize(cache, 20, 10).subtrees == []
    cache.check_integrity()


def test_no_prefix_cache_summarizes_to_nothing() -> None:
    cache = NoPrefixCache(TokenSlotAllocator(16))
    assert summarize(cache, 20, 100) == TreeSummary()
    HitCounter().on_hit(cache.root)
    cache.check_integrity()


def _req(ids: list[int], cached: int, ns: str | None = None) -> Req:
    return Req("r", ids, SamplingParams(), extra_key=ns, cached_tokens=cached)


def test_the_miss_log_explains_at_admission_and_counts_every_miss() -> None:
    cache, alloc = _cache()
    _insert(cache, alloc, SYSTEM + [1] * 20)
    log, num_free, tree = MissLog(), alloc.num_free, pretty_print(cache)

    def why(key: list[int], extra_key: str | None, own_prefix: str | None) -> Explanation:
        return explain(cache, EvictionLog(), key, extra_key, own_prefix)

    edited = SYSTEM[:25] + [5] * 40  # leaves the cached prompt at token 25
    log.observe(_req(edited, cached=25), why)
    log.observe(_req(SYSTEM + [1] * 20 + [2], cached=60), why)  # a hit: not logged
    (miss,) = log.recent
    assert (miss.why.cause, miss.why.divergence, miss.cached_tokens) == ("diverged", 25, 25)
    assert miss.why.cached_next[:10] == SYSTEM[25:35] and miss.prompt_tokens == 65
    assert miss.context_start == 0 and miss.context_ids == edited[: 25 + 32]
    log.observe(_req([9] * 50, cached=0, ns="x"), why)
    assert log.recent[0].why.cause == "never_seen" and log.recent[0].extra_key == "x"
    assert log.num_misses == 2 and log.by_cause == {"diverged": 1, "never_seen": 1}
    assert alloc.num_free == num_free and pretty_print(cache) == tree  # read only
    cache.check_integrity()


class _SlowCache:
    """Each explanation takes `cost` seconds of the fake clock."""

    def __init__(self, clock: list[float], cost: float) -> None:
        self.clock, self.cost = clock, cost

    def explain(self, key: list[int], extra_key: str | None, own_prefix: str | None) -> Any:
        self.clock[0] += self.cost
        return Explanation("never_seen", len(key), 0)


def test_explaining_takes_at_most_its_share_of_the_time() -> None:
    clock = [0.0]
    log = MissLog(clock=lambda: clock[0])
    slow = _SlowCache(clock, cost=BURST_S / 2.5)  # a burst explains three, then it waits
    for _ in range(10):
        log.observe(_req([9] * 50, cached=0), slow.explain)
    assert log.num_misses == 10 and log.by_cause == {"never_seen": 3}
    clock[0] += slow.cost / MAX_TIME_SHARE  # enough idle time for one more
    log.observe(_req([9] * 50, cached=0), slow.explain)
    log.observe(_req([9] * 50, cached=0), slow.explain)
    assert log.num_misses == 12 and log.by_cause == {"never_seen": 4}
    assert len(log.recent) == 4
