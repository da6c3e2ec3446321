"""The prefix-cache interface the scheduler talks to, and `NoPrefixCache`, its "off" null object.

A prefix cache maps token sequences to the KV slots already holding their K/V, so a new request
can skip the prefill of its longest cached prefix. The interface is match / insert / lock /
unlock / evict / reset / sizes / check; pins are pinnable.py's, what follows the tree (tiers,
events, logs, hit counts) observes it (tree_observer.py), and reads of it (explain,
continuation, summaries, the debug print) are functions over its read-only view (tree_view.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.tree_node import TreeNode
from radixrt.cache.tree_observer import TreeObservers


@dataclass(slots=True)
class MatchResult:
    """The longest cached prefix of a key."""

    # (n,) int64 on the allocator's device, n may be 0; owned by the cache, read-only (may share
    # storage with the tree).
    slots: torch.Tensor
    last_node: TreeNode  # deepest node covering the match; the cache's root when n == 0


class BasePrefixCache(ABC):
    """Token-sequence prefix cache over KV slots of a `TokenSlotAllocator`.

    Ownership: a slot is owned either by a request (it allocated the slot and has not handed it
    over) or by the cache (`insert` took it). The cache frees only its own slots, and only in
    `evict` and `reset`. Slots returned by `match_prefix` stay owned by the cache; a request
    that reads them must `lock` the returned node until it is done with them, since unlocked
    slots may be evicted (freed and reused) by any later `evict`.

    Namespaces: `extra_key` (e.g. a LoRA adapter or a multimodal salt) selects a separate
    namespace; equal tokens under different extra keys never match each other or share slots.

    Pages: with `page_size > 1` the cache stores and matches whole pages only. `match_prefix`
    returns a multiple of `page_size` tokens, and `insert` needs a page-aligned length.

    Nodes are opaque handles to the caller: pass them back to `lock`/`unlock` (and to the
    observers' `hit`) only. The cache is also a `TreeView` (tree_view.py): `root`, `num_nodes`
    and the sizes may be read, by the read-only functions over it, never written.

    Observers (tree_observer.py): `observers` is told of every node stored and evicted and of
    each reset, by the cache; of each hit, by the scheduler. Whoever builds the cache adds
    them (scheduler/builder.py) and owns them; none: nothing follows the tree.
    """

    caching: ClassVar[bool] = True  # False: the null cache, whose root never has a child
    root: TreeNode  # the read-only view's entry point, set by each implementation

    def __init__(self, allocator: TokenSlotAllocator, page_size: int = 1) -> None:
        """Cache over `allocator`'s slots in pages of `page_size` tokens; ValueError if < 1."""
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.allocator = allocator
        self.page_size = page_size
        self.observers = TreeObservers()
        self.num_nodes = 0  # nodes in the tree, the root not counted; written by the tree only

    @abstractmethod
    def match_prefix(self, key: list[int], extra_key: str | None = None) -> MatchResult:
        """Return the longest cached prefix of `key` in namespace `extra_key`.

        Mutates: marks the matched nodes as just used (LRU), and when the match ends inside a
        node splits that node in two so that `last_node` covers exactly the match; a split
        keeps the slots and every lock already held (a locked node stays valid). Never
        allocates or frees slots and never raises for any `key`. An empty match (n == 0)
        returns zero slots and the root, which may be locked and unlocked like any node.
        """

    @abstractmethod
    def insert(self, key: list[int], slots: torch.Tensor, extra_key: str | None = None) -> int:
        """Add `key` with its KV `slots` (same length) and return how many leading tokens were
        already cached.

        Returns n: `slots[:n]` are ignored (the cache already has its own slots for those
        tokens); the caller still owns the ones it allocated and must free them, i.e.
        `slots[cached_len:n]` where `slots[:cached_len]` came from its own `match_prefix`.
        `slots[n:]` are now owned by the cache; the caller must not free them. n == 0: nothing
        was cached, the cache took every slot. n == len(key): the cache took none.
        Locks are not needed and not changed. Raises ValueError when the lengths differ or,
        with `page_size > 1`, when `len(key)` is not a multiple of `page_size`.
        """

    @abstractmethod
    def lock(self, node: TreeNode) -> None:
        """Protect `node` and all its ancestors from eviction; pair every call with `unlock`."""

    @abstractmethod
    def unlock(self, node: TreeNode) -> None:
        """Undo one `lock(node)`.

        Raises RuntimeError (and changes nothing) when no lock is held on `node` or below it.
        """

    @abstractmethod
    def evict(self, num_tokens: int) -> int:
        """Free at least `num_tokens` cached slots back to the allocator, if possible.

        Frees least-recently-used unlocked leaves first; a parent whose last child went becomes
        a leaf and may go next. Returns the number of tokens freed: may exceed `num_tokens`
        (whole nodes go), may be less (everything unlocked is gone), 0 when nothing is
        evictable. Locked or pinned nodes and their ancestors are never freed.
        """

    @abstractmethod
    def reset(self) -> None:
        """Drop every cached prefix and free all cache-owned slots.

        Raises RuntimeError (and changes nothing) while any node is locked or pinned.
        """

    @property
    @abstractmethod
    def evictable_size(self) -> int:
        """Tokens held by nodes neither locked nor pinned (what `evict` could free)."""

    @property
    @abstractmethod
    def protected_size(self) -> int:
        """Tokens held by locked nodes that are not pinned."""

    @property
    @abstractmethod
    def pinned_size(self) -> int:
        """Tokens held by pinned nodes (locked or not)."""

    def total_size(self) -> int:
        """Tokens (= slots) owned by the cache."""
        return self.evictable_size + self.protected_size + self.pinned_size

    @abstractmethod
    def check_integrity(self) -> None:
        """Raise AssertionError when an internal invariant or slot ownership is broken.

        Checked: node key and slot lengths agree, children keyed by their first token (page),
        each lock ref is at least the sum of its children's, the size counters match a recount,
        no slot is owned twice, none is also free in the allocator, slot 0 is never owned.
        Slow (O(nodes + free slots)); for tests and debugging.
        """


class NoPrefixCache(BasePrefixCache):
    """Prefix caching off: nothing is ever cached, with the same caller code path.

    `match_prefix` always returns an empty match at a dummy root, which never has a child (the
    read-only functions over it find nothing; explain says `cache_off`); `insert` takes no
    slots and returns `len(key)` ("all already cached"), so the caller frees every slot it owns
    exactly as it frees duplicates with a real cache. Sizes are 0 and `evict` frees nothing.
    Lock counts are kept on the dummy root so unbalanced `unlock` still raises. Nothing is
    stored or evicted, so no observer is ever told anything but hits (of the root).
    """

    caching = False

    def __init__(self, allocator: TokenSlotAllocator, page_size: int = 1) -> None:
        super().__init__(allocator, page_size)
        self.root = TreeNode()
        self._empty = torch.empty(0, dtype=torch.int64, device=allocator.device)

    def match_prefix(self, key: list[int], extra_key: str | None = None) -> MatchResult:
        """Return an empty match at the dummy root."""
        return MatchResult(self._empty, self.root)

    def insert(self, key: list[int], slots: torch.Tensor, extra_key: str | None = None) -> int:
        """Take nothing; return len(key) so the caller frees all slots it owns."""
        if len(key) != slots.numel():
            raise ValueError(f"key has {len(key)} tokens but {slots.numel()} slots were given")
        return len(key)

    def lock(self, node: TreeNode) -> None:
        """Count a lock on the dummy root."""
        self.root.lock_ref += 1

    def unlock(self, node: TreeNode) -> None:
        """Undo one `lock`; raise RuntimeError when none is held."""
        if self.root.lock_ref == 0:
            raise RuntimeError("unlock without a matching lock")
        self.root.lock_ref -= 1

    def evict(self, num_tokens: int) -> int:
        """Free nothing."""
        return 0

    def reset(self) -> None:
        """Nothing to drop; raise RuntimeError while locked, like a real cache."""
        if self.root.lock_ref:
            raise RuntimeError(f"reset with {self.root.lock_ref} locks held")

    @property
    def evictable_size(self) -> int:
        return 0

    @property
    def protected_size(self) -> int:
        return 0

    @property
    def pinned_size(self) -> int:
        return 0

    def check_integrity(self) -> None:
        """Assert the dummy root stays empty."""
        assert not self.root.children and not self.root.key, "NoPrefixCache root grew"
        assert self.root.lock_ref >= 0, "negative lock count"
