"""Pinned prefixes with a lifetime: the one mechanism under every caching API (the native
/v1/caches handles, Anthropic `cache_control`, Gemini `cachedContents`, OpenAI
`prompt_cache_retention`).

A pin holds one tree node (the end of its prefix) with `PinnablePrefixCache.pin`, so the node and
its ancestors are never evicted while the pin lives. At `expire_at` (wall-clock seconds) the
pin goes and the nodes become ordinary LRU entries. A sliding pin is extended to now + ttl by
every request whose cached match covers its node (the Anthropic rule); a fixed one (a handle)
keeps its expiry until changed.

Ownership: the PinTable is the only caller of `pin`/`unpin`, and it holds exactly one tree pin
per live record: created in `pin`, dropped in `unpin`, `expire` and `clear`. A node split keeps
the lower half as the original node, so a record's node stays the end of its prefix.

Bounds: the tree's pinned tokens stay within `max_tokens`; an owner's (a tenant's) pins, each
counted at its full length, within `max_tokens_per_owner`, and within what the pin leaves free
of `max_tokens` (so no two tenants can hold the whole budget: each new holder gets at most
half of what is free). A pin past a bound is refused with the reason, and nothing changes.

A named pin id dropped by `unpin` (a deleted handle or stored response) is not pinned again: a
request that asked for it before the delete and finishes after it does not bring it back. A
prefix's own pin (an id of AUTO_ID_PREFIX, from a request that named none) may be pinned again
by a later request.
Ids are never reused (each is made from a uuid), so the last MAX_DROPPED_IDS are kept.
"""

from __future__ import annotations

import heapq
import itertools
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from radixrt.cache.pinnable import PinnablePrefixCache
from radixrt.cache.tree_node import TreeNode
from radixrt.core import PinOutcome, PinSpec

__all__ = ["BasePinTable", "NoPinTable", "PinOutcome", "PinSpec", "PinTable"]

MAX_DROPPED_IDS = 16384  # ids unpinned on request that are refused from then on
AUTO_ID_PREFIX = "prefix-"  # a pin that names no id is its node's: prefix-<node id>


@dataclass(slots=True, eq=False)
class _Pin:
    pin_id: str
    node: TreeNode
    tokens: int
    ttl_s: float
    sliding: bool
    owner: str | None
    expire_at: float


class BasePinTable(ABC):
    """Pins over a prefix cache; `NoPinTable` when caching is off."""

    @abstractmethod
    def pin(self, key: list[int], extra_key: str | None, spec: PinSpec) -> PinOutcome:
        """Pin `key[:spec.offset]` (in the cache already) in namespace `extra_key`; an existing
        record with the same id is extended (expiry = the later of the two) or, if it holds
        another prefix, replaced."""

    @abstractmethod
    def touch(self, node: TreeNode) -> None:
        """A request's cached match ends at `node`: extend the sliding pins on its path."""

    @abstractmethod
    def set_expiry(self, pin_id: str, expire_at: float) -> bool:
        """Give pin `pin_id` a new expiry (may shorten it); False when there is no such pin."""

    @abstractmethod
    def unpin(self, pin_id: str) -> bool:
        """Drop pin `pin_id` now, and refuse that id from then on; False when there is no
        such pin."""

    @abstractmethod
    def expire(self) -> int:
        """Drop every pin whose time has come; returns how many went."""

    @abstractmethod
    def clear(self) -> None:
        """Drop every pin (before the cache is flushed)."""

    @property
    @abstractmethod
    def num_pins(self) -> int: ...


class PinTable(BasePinTable):
    def __init__(
        self,
        cache: PinnablePrefixCache,
        max_tokens: int,
        max_tokens_per_owner: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.max_tokens = max_tokens
        self.max_tokens_per_owner = max_tokens_per_owner
        self.clock = clock
        self._pins: dict[str, _Pin] = {}
        self._by_node: dict[TreeNode, list[_Pin]] = {}
        self._owned: dict[str | None, int] = {}  # owner -> sum of its pins' tokens
        self._heap: list[tuple[float, int, _Pin]] = []  # (expire_at when pushed, seq, pin)
        self._seq = itertools.count()
        self._dropped: OrderedDict[str, None] = OrderedDict()  # unpinned ids, oldest first

    @property
    def num_pins(self) -> int:
        return len(self._pins)

    def pin(self, key: list[int], extra_key: str | None, spec: PinSpec) -> PinOutcome:
        page = self.cache.page_size
        aligned = min(spec.offset, len(key)) // page * page
        if aligned <= 0:
            return PinOutcome(spec.offset, False, reason="nothing to pin: the prefix is empty")
        match = self.cache.match_prefix(key[:aligned], extra_key)
        window = self.cache.allocator.window
        if int(match.slots.numel()) < aligned or window.usable_len(match.slots) < aligned:
            return PinOutcome(spec.offset, False, reason="the prefix is not in the cache")
        node, now = match.last_node, self.clock()
        pin_id = spec.pin_id or f"{AUTO_ID_PREFIX}{node.id}"
        if pin_id in self._dropped:
            return PinOutcome(spec.offset, False, aligned, reason="the pin was deleted")
        old = self._pins.get(pin_id)
        if old is not None and old.node is node:  # later only: its heap entry stays valid
            old.expire_at = max(old.expire_at, now + spec.ttl_s)
            old.ttl_s, old.sliding = spec.ttl_s, spec.sliding
            return PinOutcome(spec.offset, True, aligned, 0, old.expire_at, pin_id)
        new_tokens = self.cache.unpinned_above(node)
        refused = self._over_bound(new_tokens, aligned, spec.owner, old)
        if refused:
            return PinOutcome(spec.offset, False, aligned, reason=refused)
        if old is not None:
            self._drop(old)
            new_tokens = self.cache.unpinned_above(node)
        rec = _Pin(pin_id, node, aligned, spec.ttl_s, spec.sliding, spec.owner, now + spec.ttl_s)
        self.cache.pin(node)  # the one tree pin this record holds, until _drop
        # ... and the window K/V a query after the prefix reads (window pools only).
        window.set_hold(("pin", pin_id), match.slots[max(aligned - window.window + 1, 0) :])
        self._pins[pin_id] = rec
        self._by_node.setdefault(node, []).append(rec)
        self._owned[rec.owner] = self._owned.get(rec.owner, 0) + aligned
        self._push(rec)
        return PinOutcome(spec.offset, True, aligned, new_tokens, rec.expire_at, pin_id)

    def touch(self, node: TreeNode) -> None:
        if not self._by_node:
            return
        now = self.clock()
        cur: TreeNode | None = node
        while cur is not None:
            for rec in self._by_node.get(cur, ()):
                if rec.sliding and now + rec.ttl_s > rec.expire_at:
                    rec.expire_at = now + rec.ttl_s  # the heap entry is re-pushed when popped
            cur = cur.parent

    def set_expiry(self, pin_id: str, expire_at: float) -> bool:
        rec = self._pins.get(pin_id)
        if rec is None:
            return False
        earlier = expire_at < rec.expire_at
        rec.expire_at = expire_at
        if earlier:
            self._push(rec)  # a later expiry is found when the older entry pops
        return True

    def unpin(self, pin_id: str) -> bool:
        if not pin_id.startswith(AUTO_ID_PREFIX):  # a prefix's own pin may come back
            self._dropped[pin_id] = None  # also when absent: a flush dropped it, a request may not
            if len(self._dropped) > MAX_DROPPED_IDS:
                self._dropped.popitem(last=False)
        rec = self._pins.get(pin_id)
        if rec is None:
            return False
        self._drop(rec)
        return True

    def expire(self) -> int:
        now, gone = self.clock(), 0
        while self._heap and self._heap[0][0] <= now:
            _, _, rec = heapq.heappop(self._heap)
            if self._pins.get(rec.pin_id) is not rec:
                continue  # dropped or replaced already
            if rec.expire_at > now:
                self._push(rec)  # extended since it was pushed
                continue
            self._drop(rec)
            gone += 1
        return gone

    def clear(self) -> None:
        for rec in list(self._pins.values()):
            self._drop(rec)
        self._heap.clear()

    def pins(self) -> list[tuple[str, int, float]]:
        """(pin_id, tokens, expire_at) of every live pin."""
        return [(r.pin_id, r.tokens, r.expire_at) for r in self._pins.values()]

    def check(self) -> None:
        """Assert the records and the tree agree: each node's pin_ref covers its records."""
        for node, recs in self._by_node.items():
            assert recs and all(r.node is node for r in recs), "pin index out of date"
            assert node.pin_ref >= len(recs), f"node {node.id}: pin_ref below its records"
            assert node.parent is not None, "a pinned node left the tree"
        assert sum(len(r) for r in self._by_node.values()) == len(self._pins)
        owned: dict[str | None, int] = {}
        for r in self._pins.values():
            owned[r.owner] = owned.get(r.owner, 0) + r.tokens
        assert owned == {k: v for k, v in self._owned.items() if v}, "owner totals"

    def _over_bound(self, new: int, tokens: int, owner: str | None, old: _Pin | None) -> str:
        freed_by_old = old.tokens if old is not None and old.owner == owner else 0
        if self.cache.pinned_size + new > self.max_tokens:
            return (
                f"pinning {new} more tokens would pass the limit of {self.max_tokens} pinned "
                f"tokens (--max-pinned-fraction); {self.cache.pinned_size} are pinned"
            )
        if owner is not None:
            mine = self._owned.get(owner, 0) - freed_by_old
            if mine + tokens > self.max_tokens_per_owner:
                return (
                    f"pinning {tokens} more tokens would pass this tenant's limit of "
                    f"{self.max_tokens_per_owner} (--max-pinned-fraction-per-tenant); it "
                    f"holds {mine}"
                )
            free = self.max_tokens - self.cache.pinned_size - new  # after this pin
            if mine + tokens > free:
                return (
                    f"this tenant would hold {mine + tokens} pinned tokens and leave {free} of "
                    f"the {self.max_tokens} (--max-pinned-fraction) to the others; a tenant "
                    "holds at most what it leaves free (--max-pinned-fraction-per-tenant)"
                )
        return ""

    def _push(self, rec: _Pin) -> None:
        heapq.heappush(self._heap, (rec.expire_at, next(self._seq), rec))

    def _drop(self, rec: _Pin) -> None:
        del self._pins[rec.pin_id]
        recs = self._by_node[rec.node]
        recs.remove(rec)
        if not recs:
            del self._by_node[rec.node]
        self._owned[rec.owner] -= rec.tokens
        if not self._owned[rec.owner]:
            del self._owned[rec.owner]
        self.cache.unpin(rec.node)
        self.cache.allocator.window.drop_hold(("pin", rec.pin_id))


class NoPinTable(BasePinTable):
    """Caching off: every pin is refused with the reason; nothing else to do."""

    def __init__(self, reason: str = "the prefix cache is off (--disable-radix-cache)") -> None:
        self.reason = reason

    def pin(self, key: list[int], extra_key: str | None, spec: PinSpec) -> PinOutcome:
        return PinOutcome(spec.offset, False, reason=self.reason)

    def touch(self, node: TreeNode) -> None:
        pass

    def set_expiry(self, pin_id: str, expire_at: float) -> bool:
        return False

    def unpin(self, pin_id: str) -> bool:
        return False

    def expire(self) -> int:
        return 0

    def clear(self) -> None:
        pass

    @property
    def num_pins(self) -> int:
        return 0
