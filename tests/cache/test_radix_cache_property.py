"""Property test: random insert/match/lock/unlock/evict/reset (and pin/unpin/expire) sequences
against a reference.

The reference keeps every cached whole-page prefix with the slots of its last page and the
logical time it was last touched (the tree ticks once per match_prefix and insert call). After every
step the tree's prefixes must equal the reference's, `check_integrity()` must pass and the
pool must be whole: free + evictable + protected + pinned + slots held by open requests =
capacity. The pinned machines add a PinTable on a fake clock: pinned prefixes never go,
`pinned_size` is the union of the live pins' prefixes, bounds refuse exactly what they should.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.pins import PinSpec, PinTable
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
                if node.is_leaf and node.lock_ref == 0 and node.pin_ref == 0:
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
        self.before_reset()
        self.cache.reset()
        self.ref.clear()

    def before_reset(self) -> None:
        """What must happen before the tree may be reset (nothing here; pins go first)."""

    @invariant()
    def consistent(self) -> None:
        self.cache.check_integrity()
        assert tree_prefixes(self.cache) == self.ref
        c = self.cache
        total = self.alloc.num_free + c.evictable_size + c.protected_size + c.pinned_size
        assert total + self.held() == CAPACITY
        assert self.cache.root.lock_ref == len(self.open)

    def teardown(self) -> None:
        self.before_reset()
        while self.open:
            req = self.open.pop()
            self.alloc.free(req.new)
            self.cache.unlock(req.node)
        self.cache.reset()
        self.cache.check_integrity()
        assert self.alloc.num_free == CAPACITY


class PagedRadixCacheMachine(RadixCacheMachine):
    page_size = 2


MAX_PINNED, MAX_PER_OWNER = CAPACITY // 4, CAPACITY // 6
OWNERS = st.sampled_from([None, "t1"])
PIN_IDS = st.sampled_from([None, None, "h1", "h2"])  # None: the prefix's own pin


@dataclass
class RefPin:
    extra_key: str | None
    key: tuple[int, ...]
    owner: str | None
    ttl: float
    sliding: bool
    expire_at: float


class PinnedRadixCacheMachine(RadixCacheMachine):
    """The same, with pins: pin/unpin/expire/advance-time steps and hits extending pins."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0
        self.pins = PinTable(self.cache, MAX_PINNED, MAX_PER_OWNER, clock=lambda: self.now)
        self.ref_pins: dict[str, RefPin] = {}
        self.deleted: set[str] = set()  # named ids unpinned: refused from then on

    def pinned_pages(self, pins: list[RefPin] | None = None) -> set[Prefix]:
        out: set[Prefix] = set()
        for pin in self.ref_pins.values() if pins is None else pins:
            for i in range(self.page_size, len(pin.key) + 1, self.page_size):
                out.add((pin.extra_key, pin.key[:i]))
        return out

    def locked_prefixes(self) -> set[Prefix]:
        return super().locked_prefixes() | self.pinned_pages()

    @rule(data=st.data(), ttl=st.sampled_from([1.0, 5.0]), sliding=st.booleans(),
          owner=OWNERS, pin_id=PIN_IDS)  # fmt: skip
    def pin(self, data, ttl, sliding, owner, pin_id) -> None:
        """Pin a cached prefix mostly (any key sometimes: refused when not cached)."""
        cached_keys = sorted(self.ref, key=repr)
        if cached_keys and data.draw(st.integers(0, 4)):
            extra_key, prefix = data.draw(st.sampled_from(cached_keys))
            key = list(prefix)
        else:
            key, extra_key = data.draw(TOKENS), data.draw(NAMESPACES)
        key = self.aligned(key)
        cached = self.ref_match_len(key, extra_key)
        spec = PinSpec(len(key), ttl, pin_id, sliding, owner)
        pinned_before = self.cache.pinned_size
        out = self.pins.pin(key, extra_key, spec)
        if not key:
            assert not out.pinned
            return
        self.clock += 1  # its match_prefix
        self.ref_touch(key, extra_key, cached)
        if cached < len(key):
            assert not out.pinned and out.reason == "the prefix is not in the cache"
            return
        if pin_id in self.deleted:
            assert not out.pinned and out.reason == "the pin was deleted"
            return
        prefix = (extra_key, tuple(key))
        same = [i for i, p in self.ref_pins.items() if (p.extra_key, p.key) == prefix]
        own = next((i for i in same if i.startswith("prefix-")), None)  # the prefix's own pin
        old_id = pin_id if pin_id is not None else own
        old = self.ref_pins.get(old_id) if old_id is not None else None
        if old is not None and (old.extra_key, old.key) == prefix:
            assert out.pinned and out.new_tokens == 0
            old.expire_at = max(old.expire_at, self.now + ttl)
            old.ttl, old.sliding = ttl, sliding
            assert out.expire_at == old.expire_at
            return
        others = [p for i, p in self.ref_pins.items() if i != old_id]
        new = len(self.pinned_pages([*self.ref_pins.values(), RefPin(*prefix, owner, 0, 0, 0)]))
        new = (new - len(self.pinned_pages())) * self.page_size
        mine = sum(len(p.key) for p in self.ref_pins.values() if p.owner == owner)
        if old is not None and old.owner == owner:
            mine -= len(old.key)
        # A tenant holds at most its own bound, and at most what its pin leaves free of the
        # whole budget (so two tenants cannot hold all of it).
        free_after = MAX_PINNED - pinned_before - new
        refuse = pinned_before + new > MAX_PINNED or (
            owner is not None and mine + len(key) > min(MAX_PER_OWNER, free_after)
        )
        assert out.pinned != refuse, (out, refuse)
        if refuse:
            return
        if old is not None:
            del self.ref_pins[old_id]
        self.ref_pins[out.pin_id] = RefPin(*prefix, owner, ttl, sliding, self.now + ttl)
        assert len(self.pinned_pages(others)) <= len(self.pinned_pages())

    @precondition(lambda self: self.ref_pins)
    @rule(data=st.data())
    def unpin(self, data: st.DataObject) -> None:
        pin_id = data.draw(st.sampled_from(sorted(self.ref_pins)))
        assert self.pins.unpin(pin_id)
        del self.ref_pins[pin_id]
        if not pin_id.startswith("prefix-"):
            self.deleted.add(pin_id)

    @rule(dt=st.sampled_from([0.5, 2.0, 6.0]))
    def advance_time(self, dt: float) -> None:
        self.now += dt
        gone = self.pins.expire()
        expired = [i for i, p in self.ref_pins.items() if p.expire_at <= self.now]
        assert gone == len(expired)
        for i in expired:
            del self.ref_pins[i]

    @rule(key=TOKENS, extra_key=NAMESPACES)
    def hit(self, key: list[int], extra_key: str | None) -> None:
        """A request's match: sliding pins on its path move to now + ttl."""
        n, node, _ = self.do_match(key, extra_key)
        self.pins.touch(node)
        for p in self.ref_pins.values():
            covered = (
                p.extra_key == extra_key and len(p.key) <= n and tuple(key[: len(p.key)]) == p.key
            )
            if covered and p.sliding:
                p.expire_at = max(p.expire_at, self.now + p.ttl)

    def before_reset(self) -> None:
        self.pins.clear()
        self.ref_pins.clear()  # the table still refuses the deleted ids

    @invariant()
    def pins_consistent(self) -> None:
        self.pins.check()
        assert self.cache.pinned_size == len(self.pinned_pages()) * self.page_size
        assert self.pins.num_pins == len(self.ref_pins) == self.cache.root.pin_ref
        live = {i: e for i, _, e in self.pins.pins()}
        assert live == {i: p.expire_at for i, p in self.ref_pins.items()}


class PagedPinnedRadixCacheMachine(PinnedRadixCacheMachine):
    page_size = 2


_SETTINGS = settings(max_examples=150, stateful_step_count=50, deadline=None)
TestRadixCache = RadixCacheMachine.TestCase
TestRadixCache.settings = _SETTINGS
TestPagedRadixCache = PagedRadixCacheMachine.TestCase
TestPagedRadixCache.settings = _SETTINGS
TestPinnedRadixCache = PinnedRadixCacheMachine.TestCase
TestPinnedRadixCache.settings = _SETTINGS
TestPagedPinnedRadixCache = PagedPinnedRadixCacheMachine.TestCase
TestPagedPinnedRadixCache.settings = _SETTINGS
