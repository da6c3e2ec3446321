"""`RadixCache`: the token-granular radix tree of cached prefixes (SGLang's RadixAttention tree).

Slot ownership:
| slots                                   | owner                      | freed by                  |
|-----------------------------------------|----------------------------|---------------------------|
| `node.slots` of every node in the tree  | the tree                   | `evict`, `reset`          |
| `slots[:n]` passed to `insert` (n = its | the caller (duplicates of  | the caller, right after   |
| return value) that the caller allocated | slots the tree already has)| `insert`                  |
| `slots[n:]` passed to `insert`          | the tree from then on      | `evict`, `reset`          |
| slots returned by `match_prefix`        | the tree (lock to keep)    | `evict` once unlocked     |

Each node's tokens count in one of three sizes: pinned (a pin on it or below it, cache/pins.py),
else protected (a request's lock on it or below it), else evictable; evict takes only the last.
The tree knows tokens, slots, locks and pins only. Its observers (tree_observer.py, added
where the cache is built) are told of each leaf added and of each leaf about to be evicted,
while its slots still hold their K/V: that is where lower tiers spill (write-back), KV events
are made and the eviction log is kept.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Hashable, Iterator

import torch

from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.pinnable import PinnablePrefixCache
from radixrt.cache.prefix_cache import MatchResult
from radixrt.cache.tree_check import check_integrity
from radixrt.cache.tree_node import TreeNode, child_key, match_len, node_state

__all__ = ["RadixCache", "TreeNode"]


class RadixCache(PinnablePrefixCache):
    """Radix tree over token ids; see `BasePrefixCache` for the contract."""

    def __init__(self, allocator: TokenSlotAllocator, page_size: int = 1) -> None:
        super().__init__(allocator, page_size)
        self._empty = torch.empty(0, dtype=torch.int64, device=allocator.device)
        self._clock = 0  # logical time: +1 per match_prefix and insert; survives reset
        self._init_tree()

    def _init_tree(self) -> None:
        self.root = TreeNode(slots=self._empty)
        self._leaves: set[TreeNode] = set()  # every childless node except the root
        # Tokens per state: [evictable, protected (locked), pinned]; see `node_state`.
        self._sizes = [0, 0, 0]
        self.num_nodes = 0  # every node but the root

    def match_prefix(self, key: list[int], extra_key: str | None = None) -> MatchResult:
        """Return the longest cached whole-page prefix of `key`; split the node it ends in."""
        key = key if isinstance(key, list) else list(key)  # slices must compare list to list
        key_len = len(key) - len(key) % self.page_size
        now, used = self._tick(), time.monotonic()
        node, pos, parts = self.root, 0, []
        while pos < key_len:
            child = node.children.get(child_key(extra_key, key, pos, self.page_size))
            if child is None:
                break
            n = match_len(child.key, key, pos, key_len, self.page_size)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access_time, child.last_used = now, used
            parts.append(child.slots)
            node, pos = child, pos + n
        slots = torch.cat(parts) if len(parts) > 1 else parts[0] if parts else self._empty
        return MatchResult(slots, node)

    def insert(self, key: list[int], slots: torch.Tensor, extra_key: str | None = None) -> int:
        """Add `key`/`slots`; return the cached-before length n, whose slots the caller frees."""
        key_len = len(key)
        if key_len != slots.numel():
            raise ValueError(f"key has {key_len} tokens but {slots.numel()} slots were given")
        if key_len % self.page_size:
            raise ValueError(f"insert length {key_len} is not a multiple of {self.page_size}")
        key = key if isinstance(key, list) else list(key)
        now, used = self._tick(), time.monotonic()
        node, pos = self.root, 0
        while pos < key_len:
            edge = child_key(extra_key, key, pos, self.page_size)
            child = node.children.get(edge)
            if child is None:
                self._add_leaf(node, edge, key[pos:], slots[pos:], extra_key, now)
                break
            n = match_len(child.key, key, pos, key_len, self.page_size)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access_time, child.last_used = now, used
            node, pos = child, pos + n
        return pos

    def lock(self, node: TreeNode) -> None:
        """Add one lock on `node` and every ancestor (the root counts all locks)."""
        self._walk_up(node, "lock_ref", 1)

    def unlock(self, node: TreeNode) -> None:
        """Remove one lock from `node` and every ancestor; raise if `node` holds none."""
        if node.lock_ref <= 0:
            raise RuntimeError(f"unlock of node {node.id} which holds no lock")
        self._walk_up(node, "lock_ref", -1)

    def pin(self, node: TreeNode) -> None:
        """Add one pin on `node` and every ancestor: none of them is evicted until unpinned."""
        self._walk_up(node, "pin_ref", 1)

    def unpin(self, node: TreeNode) -> None:
        """Remove one pin from `node` and every ancestor; raise if `node` holds none."""
        if node.pin_ref <= 0:
            raise RuntimeError(f"unpin of node {node.id} which holds no pin")
        self._walk_up(node, "pin_ref", -1)

    def unpinned_above(self, node: TreeNode) -> int:
        """Tokens on the path from the root to `node` that no pin holds yet (what pinning
        `node` would add to `pinned_size`)."""
        total = 0
        cur: TreeNode | None = node
        while cur is not None and cur.pin_ref == 0:
            total += len(cur.key)
            cur = cur.parent
        return total

    def evict(self, num_tokens: int) -> int:
        """Free unlocked leaves, least recently used first, until `num_tokens` are freed."""
        heap = [leaf for leaf in self._leaves if _evictable(leaf)]
        heapq.heapify(heap)
        freed: list[torch.Tensor] = []
        num_freed = 0
        while num_freed < num_tokens and heap:
            leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            self.observers.evicted(leaf)  # its slots (and its ancestors') still hold K/V
            del parent.children[child_key(leaf.extra_key, leaf.key, 0, self.page_size)]
            self._leaves.discard(leaf)
            leaf.parent = None
            freed.append(leaf.slots)
            num_freed += len(leaf.key)
            self.num_nodes -= 1
            if parent is not self.root and not parent.children:
                self._leaves.add(parent)
                if _evictable(parent):
                    heapq.heappush(heap, parent)
        self._sizes[0] -= num_freed
        if freed:
            self.allocator.free(torch.cat(freed))
        return num_freed

    def reset(self) -> None:
        """Free every tree-owned slot and start empty; raise while anything is locked or
        pinned (the pin table unpins first)."""
        if self.root.lock_ref or self.root.pin_ref:
            raise RuntimeError(
                f"reset with {self.root.lock_ref} locks and {self.root.pin_ref} pins held"
            )
        owned = [node.slots for node in self._nodes() if node is not self.root]
        if owned:
            self.allocator.free(torch.cat(owned))
        self._init_tree()
        self.observers.cleared()

    @property
    def evictable_size(self) -> int:
        return self._sizes[0]

    @property
    def protected_size(self) -> int:
        return self._sizes[1]

    @property
    def pinned_size(self) -> int:
        return self._sizes[2]

    def check_integrity(self) -> None:
        check_integrity(self)

    # Private helpers: splitting, traversal.

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Cut `child` after n tokens; return the new upper node. `child` stays the lower part,
        so locks held on it (and on its descendants) stay valid."""
        parent = child.parent
        assert parent is not None
        upper = TreeNode(child.key[:n], child.slots[:n], parent, child.extra_key)
        upper.lock_ref = child.lock_ref  # same descendants' locks and pins; sizes do not change
        upper.pin_ref = child.pin_ref
        upper.last_access_time = child.last_access_time
        upper.last_used, upper.hit_count = child.last_used, child.hit_count
        self.num_nodes += 1
        parent.children[child_key(child.extra_key, child.key, 0, self.page_size)] = upper
        child.key, child.slots, child.parent = child.key[n:], child.slots[n:], upper
        upper.children[child_key(child.extra_key, child.key, 0, self.page_size)] = child
        return upper

    def _add_leaf(
        self,
        parent: TreeNode,
        edge: Hashable,
        key: list[int],
        slots: torch.Tensor,
        extra_key: str | None,
        now: int,
    ) -> None:
        slots = slots.to(device=self.allocator.device, dtype=torch.int64, copy=True)
        leaf = TreeNode(key, slots, parent, extra_key)
        leaf.last_access_time, leaf.last_used = now, time.monotonic()
        parent.children[edge] = leaf
        self.num_nodes += 1
        self._leaves.discard(parent)
        self._leaves.add(leaf)
        self._sizes[0] += len(key)
        self.observers.stored(leaf)

    def _walk_up(self, node: TreeNode, ref: str, delta: int) -> None:
        """Add `delta` to `ref` (lock_ref or pin_ref) on `node` and its ancestors, moving each
        node's tokens between the size counters when its state changes."""
        cur: TreeNode | None = node
        while cur is not None:
            before = node_state(cur)
            setattr(cur, ref, getattr(cur, ref) + delta)
            after = node_state(cur)
            if after != before:
                n = len(cur.key)
                self._sizes[before] -= n
                self._sizes[after] += n
            cur = cur.parent

    def _nodes(self) -> Iterator[TreeNode]:
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())


def _evictable(node: TreeNode) -> bool:
    return node.lock_ref == 0 and node.pin_ref == 0
