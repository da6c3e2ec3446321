"""Property test: random insert/match/lock/unlock/evict/reset sequences against a reference.

The reference keeps every cached whole-page prefix with the slots of its last page and the
logical time it was last touched (the tree ticks once per match_prefix and insert call). After every
step the tree's prefixes must equal the reference's, `check_integrity()` must pass and the
pool must be whole: free + evictable + protected + slots held by open requests = capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.radix_cache import RadixCache, TreeNode

CAPACITY = 40
NAMESPACES = st.sampled_from([None, "a"])
TOKENS = st.lists(st.integers(0, 2), max_size=10)  # a small alphabet: many shared prefixes

Prefix = tuple[str | None, tuple[int, ...]]


@dataclass
class OpenReq:
    """A request between match/lock and insert/unlock; it holds `new` (its own slots)."""

    key: list[int]
    extra_key: str | None
    node: TreeNode
    prefix: torch.Tensor  # tree-owned slots of key[:cached_len]
    new: torch.Tensor  # request-owned slots of key[cached_len:]


def tree_nodes(cache: RadixCache) -> list[TreeNode]:
    """Every node but the root."""
    out, stack = [], list(cache.root.children.values())
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children.values())
    return out


def tree_prefixes(cache: RadixCache) -> dict[Prefix, tuple[list[int], int]]:
    """Every whole-page prefix in the tree -> (slots of its last page, node access time)."""
    out: dict[Prefix, tuple[list[int], int]] = {}
    p = cache.page_size
    stack: list[tuple[TreeNode, tuple[int, ...]]] = [
        (child, ()) for child in cache.root.children.values()
    ]
    while stack:
        node, above = stack.pop()
        slots = node.slots.tolist()
        for i in range(p, len(node.key) + 1, p):
            prefix = (node.extra_key, above + tuple(node.key[:i]))
            out[prefix] = (slots[i - p : i], node.last_access_time)
        below = above + tuple(node.key)
        stack.extend((child, below) for child in node.children.values())
    return out


class RadixCacheMachine(RuleBasedStateMachine):
    page_size = 1

    def __init__(self) -> None:
        super().__init__()
        self.alloc = TokenSlotAllocator(CAPACITY)
        self.cache = RadixCache(self.alloc, page_size=self.page_size)
        self.ref: dict[Prefix, tuple[list[int], int]] = {}
        self.clock = 0
        self.open: list[OpenReq] = []

    # Reference helpers.

    def aligned(self, key: list[int]) -> list[int]:
        return key[: len(key) - len(key) % self.page_size]

    def ref_match_len(self, key: list[int], extra_key: str | None) -> int:
        n, p = 0, self.page_size
        while n + p <= len(key) and (extra_key, tuple(key[: n + p])) in self.ref:
            n += p
        return n

    def ref_touch(self, key: list[int], extra_key: str | None, n: int) -> None:
        for i in range(self.page_size, n + 1, self.page_size):
            slots, _ = self.ref[(extra_key, tuple(key[:i]))]
            self.ref[(extra_key, tuple(key[:i]))] = (slots, self.clock)

    def ref_slots(self, key: list[int], extra_key: str | None, n: int) -> list[int]:
        pages = range(self.page_size, n + 1, self.page_size)
        return [s for i in pages for s in self.ref[(extra_key, tuple(key[:i]))][0]]

    def held(self) -> int:
        return sum(req.new.numel() for req in self.open)

    def alloc_or_evict(self, n: int) -> torch.Tensor | None:
        if self.alloc.num_free < n:
            self.do_evict(n - self.alloc.num_free)
        return self.alloc.alloc(n) if self.alloc.num_free >= n else None

    # Operations, each checked against the reference.

    def do_match(self, key: list[int], extra_key: str | None) -> tuple[int, TreeNode, torch.Tensor]:
        expected = self.ref_match_len(key, extra_key)
        m = self.cache.match_prefix(key, extra_key)
        self.clock += 1
        assert m.slots.numel() == expected
        assert m.slots.tolist() == self.ref_slots(key, extra_key, expected)
        self.ref_touch(key, extra_key, expected)
        return expected, m.last_node, m.slots

    def do_insert(self, key: list[int], slots: torch.Tensor, extra_key: str | None) -> int:
        expected = self.ref_match_len(key, extra_key)
        n = self.cache.insert(key, slots, extra_key)
        self.clock += 1
        assert n == expected
        self.ref_touch(key, extra_key, n)
        p = self.page_size
        for i in range(n + p, len(key) + 1, p):
            self.ref[(extra_key, tuple(key[:i]))] = (slots[i - p : i].tolist(), self.clock)
        return n

    def do_evict(self, num_tokens: int) -> None:
        evictable = self.cache.evictable_size
        num_free = self.alloc.num_free
        freed = self.cache.evict(num_tokens)
        assert freed <= evictable
        assert freed >= min(num_tokens, evictable) if num_tokens > 0 else freed == 0
        assert self.alloc.num_free == num_free + freed
        now = tree_prefixes(self.cache)
        gone = {p: v for p, v in self.ref.items() if p not in now}
        assert len(gone) * self.page_size == freed
        assert not any(p in gone for p in self.locked_prefixes())
        # LRU: nothing evicted was touched after an unlocked leaf that stayed.
        if gone:
            latest_gone = max(t for _, t in gone.values())
            for node in tree_nodes(self.cache):
                if node.is_leaf and node.lock_ref == 0:
                    assert node.last_access_time >= latest_gone
        for p in gone:
            del self.ref[p]

    def locked_prefixes(self) -> set[Prefix]:
        out = set()
        for req in self.open:
            for i in range(self.page_size, req.prefix.numel() + 1, self.page_size):
                out.add((req.extra_key, tuple(req.key[:i])))
        return out

    # Rules.

    @rule(key=TOKENS, extra_key=NAMESPACES)
    def insert(self, key: list[int], extra_key: str | None) -> None:
        key = self.aligned(key)
        slots = self.alloc_or_evict(len(key))
        if slots is None:
            return
        n = self.do_insert(key, slots, extra_key)
        self.alloc.free(slots[:n])

    @rule(key=TOKENS, extra_key=NAMESPACES)
    def match(self, key: list[int], extra_key: str | None) -> None:
        self.do_match(key, extra_key)

    @rule(key=TOKENS, extra_key=NAMESPACES)
    def start_request(self, key: list[int], extra_key: str | None) -> None:
        key = self.aligned(key)
        cached_len, node, prefix = self.do_match(key, extra_key)
        self.cache.lock(node)
        new = self.alloc_or_evict(len(key) - cached_len)
        if new is None:
            self.cache.unlock(node)
            return
        self.open.append(OpenReq(key, extra_key, node, prefix, new))

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def finish_request(self, data: st.DataObject) -> None:
        req = self.open.pop(data.draw(st.integers(0, len(self.open) - 1)))
        slots = torch.cat([req.prefix, req.new])
        n = self.do_insert(req.key, slots, req.extra_key)
        assert n >= req.prefix.numel()
        self.alloc.free(slots[req.prefix.numel() : n])
        self.cache.unlock(req.node)

    @rule(num_tokens=st.integers(0, CAPACITY // 2))
    def evict(self, num_tokens: int) -> None:
        self.do_evict(num_tokens)

    @precondition(lambda self: not self.open)
    @rule()
    def reset(self) -> None:
        self.cache.reset()
        self.ref.clear()

    @invariant()
    def consistent(self) -> None:
        self.cache.check_integrity()
        assert tree_prefixes(self.cache) == self.ref
        total = self.alloc.num_free + self.cache.evictable_size + self.cache.protected_size
        assert total + self.held() == CAPACITY
        assert self.cache.root.lock_ref == len(self.open)

    def teardown(self) -> None:
        while self.open:
            req = self.open.pop()
            self.alloc.free(req.new)
            self.cache.unlock(req.node)
        self.cache.reset()
        self.cache.check_integrity()
        assert self.alloc.num_free == CAPACITY


class PagedRadixCacheMachine(RadixCacheMachine):
    page_size = 2


_SETTINGS = settings(max_examples=150, stateful_step_count=50, deadline=None)
TestRadixCache = RadixCacheMachine.TestCase
TestRadixCache.settings = _SETTINGS
TestPagedRadixCache = PagedRadixCacheMachine.TestCase
TestPagedRadixCache.settings = _SETTINGS
