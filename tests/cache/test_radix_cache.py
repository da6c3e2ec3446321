"""Unit tests of RadixCache and NoPrefixCache: split, match, insert, lock, evict, pages, namespaces.

Every mutating step is followed by `check_integrity()` and a pool-accounting check.
"""

from __future__ import annotations

import pytest
import torch

from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.prefix_cache import NoPrefixCache
from radixrt.cache.radix_cache import RadixCache, TreeNode
from radixrt.cache.tree_view import pretty_print

CAPACITY = 64


class Harness:
    """A cache over a small pool, plus the slots the test's "requests" hold."""

    def __init__(
        self, cache_cls: type[RadixCache] | type[NoPrefixCache] = RadixCache, page_size: int = 1
    ) -> None:
        self.alloc = TokenSlotAllocator(CAPACITY)
        self.cache: RadixCache | NoPrefixCache = cache_cls(self.alloc, page_size=page_size)
        self.held = 0  # slots allocated by requests and not yet handed over or freed

    def check(self) -> None:
        self.cache.check_integrity()
        total = self.alloc.num_free + self.cache.evictable_size + self.cache.protected_size
        assert total + self.held == CAPACITY
        assert self.cache.total_size() == self.cache.evictable_size + self.cache.protected_size

    def insert_fresh(
        self, key: list[int], extra_key: str | None = None
    ) -> tuple[int, torch.Tensor]:
        """Insert `key` with newly allocated slots; free the duplicates like a caller must."""
        slots = self.alloc.alloc(len(key))
        n = self.cache.insert(key, slots, extra_key)
        self.alloc.free(slots[:n])
        self.check()
        return n, slots

    def run_request(self, key: list[int], extra_key: str | None = None) -> int:
        """The scheduler's path: match, lock, allocate the rest, insert, free duplicates, unlock."""
        m = self.cache.match_prefix(key, extra_key)
        cached_len = m.slots.numel()
        self.cache.lock(m.last_node)
        new = self.alloc.alloc(len(key) - cached_len)
        self.held += new.numel()
        self.check()
        n = self.cache.insert(key, torch.cat([m.slots, new]), extra_key)
        assert n >= cached_len
        self.alloc.free(torch.cat([m.slots, new])[cached_len:n])
        self.held -= new.numel()
        self.cache.unlock(m.last_node)
        self.check()
        return cached_len


def slot_list(t: torch.Tensor) -> list[int]:
    return t.tolist()


def test_match_on_empty_tree_returns_root() -> None:
    h = Harness()
    m = h.cache.match_prefix([1, 2, 3])
    assert m.slots.numel() == 0 and m.slots.dtype == torch.int64
    assert m.last_node is h.cache.root
    h.cache.lock(m.last_node)
    h.check()
    h.cache.unlock(m.last_node)
    h.check()


def test_insert_then_match_full_and_partial() -> None:
    h = Harness()
    n, slots = h.insert_fresh([1, 2, 3, 4, 5])
    assert n == 0
    m = h.cache.match_prefix([1, 2, 3, 4, 5, 6, 7])
    assert slot_list(m.slots) == slot_list(slots)
    assert m.last_node.key == [1, 2, 3, 4, 5]
    assert h.cache.match_prefix([9, 1]).slots.numel() == 0
    assert h.cache.match_prefix([]).slots.numel() == 0
    h.check()


def test_match_ending_mid_node_splits_it() -> None:
    h = Harness()
    _, slots = h.insert_fresh([1, 2, 3, 4, 5, 6])
    m = h.cache.match_prefix([1, 2, 3, 9])
    h.check()
    assert slot_list(m.slots) == slot_list(slots[:3])
    upper = m.last_node
    assert upper.key == [1, 2, 3] and upper.parent is h.cache.root
    (lower,) = upper.children.values()
    assert lower.key == [4, 5, 6] and lower.is_leaf
    assert slot_list(lower.slots) == slot_list(slots[3:])
    # A key that ends inside a node splits it too.
    m = h.cache.match_prefix([1, 2, 3, 4])
    h.check()
    assert m.last_node.key == [4] and slot_list(m.slots) == slot_list(slots[:4])
    assert h.cache.total_size() == 6


def test_insert_returns_already_cached_length() -> None:
    h = Harness()
    n, first = h.insert_fresh([1, 2, 3, 4])
    assert n == 0
    n, _ = h.insert_fresh([1, 2, 3, 4, 5, 6])
    assert n == 4
    # The tree kept its own slots for the shared prefix.
    assert slot_list(h.cache.match_prefix([1, 2, 3, 4, 5, 6]).slots[:4]) == slot_list(first)
    n, _ = h.insert_fresh([1, 2, 3, 4, 5, 6])
    assert n == 6
    n, _ = h.insert_fresh([1, 2, 9])  # diverges mid-node: split, then a new leaf
    assert n == 2
    assert h.cache.total_size() == 7
    n, _ = h.insert_fresh([1])  # ends mid-node
    assert n == 1
    assert h.insert_fresh([])[0] == 0


def test_insert_rejects_length_mismatch() -> None:
    h = Harness()
    with pytest.raises(ValueError):
        h.cache.insert([1, 2, 3], h.alloc.alloc(2))


def test_insert_copies_slots() -> None:
    h = Harness()
    row = h.alloc.alloc(3).to(torch.int32)  # e.g. a req_to_token row, reused after insert
    assert h.cache.insert([1, 2, 3], row) == 0
    expected = row.tolist()
    row.zero_()
    m = h.cache.match_prefix([1, 2, 3])
    assert m.slots.dtype == torch.int64 and m.slots.tolist() == expected
    h.check()


def test_request_path_keeps_pool_whole() -> None:
    h = Harness()
    assert h.run_request([1, 2, 3, 4]) == 0
    assert h.run_request([1, 2, 3, 4, 5, 6]) == 4
    assert h.run_request([1, 2, 7]) == 2
    assert h.run_request([1, 2, 3, 4, 5, 6]) == 6
    assert h.cache.protected_size == 0 and h.cache.evictable_size == 7


def test_lock_protects_from_evict() -> None:
    h = Harness()
    h.insert_fresh([1, 2, 3])
    h.insert_fresh([4, 5])
    m = h.cache.match_prefix([1, 2, 3])
    h.cache.lock(m.last_node)
    h.check()
    assert (h.cache.protected_size, h.cache.evictable_size) == (3, 2)
    assert h.cache.evict(100) == 2
    h.check()
    assert h.cache.evict(100) == 0
    assert slot_list(h.cache.match_prefix([1, 2, 3]).slots) == slot_list(m.slots)
    h.cache.unlock(m.last_node)
    h.check()
    assert (h.cache.protected_size, h.cache.evictable_size) == (0, 3)
    assert h.cache.evict(1) == 3  # whole nodes go
    h.check()
    assert h.cache.total_size() == 0 and h.alloc.num_free == CAPACITY


def test_evict_stops_when_enough_is_freed() -> None:
    h = Harness()
    h.insert_fresh([1, 2, 3])
    h.insert_fresh([1, 2, 4])
    h.cache.match_prefix([1, 2, 4])
    assert h.cache.evict(1) == 1  # [3] only; [1, 2] keeps [4]
    h.check()
    assert h.cache.evict(1) == 1  # [4]; [1, 2] is now a leaf and stays
    h.check()
    assert h.cache.match_prefix([1, 2, 4]).slots.numel() == 2
    assert h.cache.evict(1) == 2
    h.check()


def test_lock_on_descendant_protects_ancestors() -> None:
    h = Harness()
    h.insert_fresh([1, 2, 3, 4])
    h.insert_fresh([1, 2, 5, 6])
    m = h.cache.match_prefix([1, 2, 3, 4])
    h.cache.lock(m.last_node)
    h.check()
    assert h.cache.protected_size == 4 and h.cache.evictable_size == 2
    assert h.cache.evict(100) == 2  # only [5, 6]; [1, 2] is an ancestor of a lock
    h.check()
    h.cache.unlock(m.last_node)
    h.check()


def test_lock_survives_split_of_locked_node() -> None:
    h = Harness()
    h.insert_fresh([1, 2, 3, 4])
    m = h.cache.match_prefix([1, 2, 3, 4])
    h.cache.lock(m.last_node)
    h.cache.match_prefix([1, 2])  # splits the locked node
    h.check()
    assert h.cache.protected_size == 4
    h.cache.unlock(m.last_node)
    h.check()
    assert h.cache.evictable_size == 4 and h.cache.protected_size == 0


def test_unlock_without_lock_raises_and_changes_nothing() -> None:
    h = Harness()
    h.insert_fresh([1, 2])
    node = h.cache.match_prefix([1, 2]).last_node
    with pytest.raises(RuntimeError):
        h.cache.unlock(node)
    with pytest.raises(RuntimeError):
        h.cache.unlock(h.cache.root)
    h.check()
    assert h.cache.evictable_size == 2


def test_evict_lru_leaves_first_then_parents() -> None:
    h = Harness()
    _, a = h.insert_fresh([1, 2, 3])
    _, b = h.insert_fresh([1, 2, 4])  # tree: [1, 2] -> {[3], [4]}
    _, c = h.insert_fresh([7, 8])
    h.cache.match_prefix([1, 2, 3])  # [1, 2] and [3] are now the most recent
    h.cache.match_prefix([7, 8])  # [7, 8] most recent of all
    free_before = h.alloc.num_free
    assert h.cache.evict(1) == 1  # [4]: least recently used leaf
    h.check()
    assert slot_list(h.alloc.free_slots[free_before:]) == slot_list(b[2:])
    assert h.cache.evict(2) == 3  # [3], then its parent [1, 2] became a leaf and is older
    h.check()
    assert slot_list(h.alloc.free_slots[free_before + 1 :]) == slot_list(a[2:]) + slot_list(a[:2])
    assert h.cache.match_prefix([7, 8]).slots.numel() == 2
    assert h.cache.evict(0) == 0
    assert h.cache.evict(5) == 2
    h.check()
    assert h.cache.evict(5) == 0


def test_page_size_matches_and_inserts_whole_pages_only() -> None:
    h = Harness(page_size=4)
    _, slots = h.insert_fresh(list(range(1, 9)))  # two pages, one node
    m = h.cache.match_prefix([1, 2, 3, 4, 5, 6, 0, 8])  # mismatch inside page two
    h.check()
    assert slot_list(m.slots) == slot_list(slots[:4])
    assert m.last_node.key == [1, 2, 3, 4]  # split at the page boundary
    assert h.cache.match_prefix(list(range(1, 8))).slots.numel() == 4  # 7 tokens: one page
    assert h.cache.match_prefix([1, 2, 3, 0]).slots.numel() == 0
    assert h.cache.match_prefix([1, 2, 3]).slots.numel() == 0
    with pytest.raises(ValueError):
        h.cache.insert([1, 2, 3], h.alloc.alloc(3))
    h.held += 3
    n, _ = h.insert_fresh([1, 2, 3, 4, 5, 6, 0, 0])
    assert n == 4
    n, _ = h.insert_fresh([1, 2, 3, 0])  # shares 3 tokens but no whole page: a sibling
    assert n == 0
    assert set(h.cache.root.children) == {(None, (1, 2, 3, 4)), (None, (1, 2, 3, 0))}
    assert h.cache.total_size() == 16
    assert h.cache.evict(1) == 4
    h.check()


def test_namespaces_never_share() -> None:
    h = Harness()
    _, plain = h.insert_fresh([1, 2, 3])
    n, lora = h.insert_fresh([1, 2, 3], extra_key="lora-a")
    assert n == 0
    assert slot_list(h.cache.match_prefix([1, 2, 3]).slots) == slot_list(plain)
    assert slot_list(h.cache.match_prefix([1, 2, 3], "lora-a").slots) == slot_list(lora)
    m = h.cache.match_prefix([1, 2, 3], "lora-b")
    assert m.slots.numel() == 0 and m.last_node is h.cache.root
    h.cache.match_prefix([1, 2], "lora-a")  # split inside the namespace
    h.check()
    assert h.cache.evict(3) == 3  # the plain one is older
    h.check()
    assert h.cache.match_prefix([1, 2, 3]).slots.numel() == 0
    assert h.cache.match_prefix([1, 2, 3], "lora-a").slots.numel() == 3


def test_reset_frees_everything_and_refuses_while_locked() -> None:
    h = Harness()
    h.insert_fresh([1, 2, 3])
    h.insert_fresh([1, 5], extra_key="x")
    m = h.cache.match_prefix([1, 2])
    h.cache.lock(m.last_node)
    with pytest.raises(RuntimeError):
        h.cache.reset()
    h.check()
    h.cache.unlock(m.last_node)
    h.cache.reset()
    h.check()
    assert h.cache.total_size() == 0 and h.alloc.num_free == CAPACITY
    assert h.cache.match_prefix([1, 2, 3]).slots.numel() == 0


def test_pretty_print_shows_nodes() -> None:
    h = Harness()
    h.insert_fresh([11, 12, 13])
    h.insert_fresh([11, 14], extra_key="ns")
    text = pretty_print(h.cache)
    assert "[3 tok]" in text and "11, 12, 13" in text and "ns='ns'" in text and "ref=0" in text


def test_check_integrity_catches_corruption() -> None:
    h = Harness()
    h.insert_fresh([1, 2, 3])
    node = h.cache.match_prefix([1, 2, 3]).last_node
    h.alloc.free(node.slots[:1])  # a tree-owned slot also in the free list
    with pytest.raises(AssertionError, match="also free"):
        h.cache.check_integrity()
    h.alloc.clear()
    h.alloc.alloc(CAPACITY)
    node.lock_ref = 1
    with pytest.raises(AssertionError, match="below its children"):
        h.cache.check_integrity()
    h.cache.root.lock_ref = 1  # consistent refs, but the size counters were not updated
    with pytest.raises(AssertionError, match="sizes"):
        h.cache.check_integrity()
    node.lock_ref = h.cache.root.lock_ref = 0
    node.slots = torch.tensor([0, 1, 2])
    with pytest.raises(AssertionError, match="padding slot"):
        h.cache.check_integrity()
    node.slots = torch.tensor([1, 1, 2])
    with pytest.raises(AssertionError, match="owned twice"):
        h.cache.check_integrity()
    node.slots = torch.tensor([1, 2])
    with pytest.raises(AssertionError, match="key/slot length"):
        h.cache.check_integrity()


def test_no_prefix_cache_contract() -> None:
    h = Harness(NoPrefixCache)
    cache = h.cache
    assert isinstance(cache.match_prefix([1, 2]).last_node, TreeNode)
    # The same request path as with a real cache: insert says "all cached", the caller frees all.
    for _ in range(3):
        assert h.run_request([1, 2, 3, 4]) == 0
        assert h.alloc.num_free == CAPACITY
    slots = h.alloc.alloc(2)
    assert cache.insert([5, 6], slots) == 2
    h.alloc.free(slots)
    with pytest.raises(ValueError):
        cache.insert([5], slots)
    node = cache.match_prefix([1]).last_node
    cache.lock(node)
    with pytest.raises(RuntimeError):
        cache.reset()
    cache.unlock(node)
    with pytest.raises(RuntimeError):
        cache.unlock(node)
    assert cache.evict(10) == 0
    assert (cache.evictable_size, cache.protected_size, cache.total_size()) == (0, 0, 0)
    cache.reset()
    h.check()
    assert "off" in pretty_print(cache)


def test_tuple_keys_behave_like_lists() -> None:
    h = Harness()
    slots = h.alloc.alloc(4)
    assert h.cache.insert((1, 2, 3, 4), slots) == 0  # type: ignore[arg-type]
    h.check()
    assert h.cache.match_prefix((1, 2, 3, 9)).slots.numel() == 3  # type: ignore[arg-type]
    h.check()
    assert h.cache.match_prefix([1, 2, 3, 4]).slots.tolist() == slots.tolist()
