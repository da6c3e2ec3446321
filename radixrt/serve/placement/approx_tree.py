"""ApproxTree: a radix tree of the prompts routed to one replica, keys only (no KV slots).

It approximates that replica's real prefix cache: the router never learns what the replica
evicted, so the tree drops its least recently used leaves itself once it holds more than
`max_size` items, down to LOW_WATER of it: a prune walks every node, so it runs once per
(1 - LOW_WATER) x `max_size` items inserted, not on every insert of a full tree (amortised,
an insert costs a constant number of node visits). A key is any sequence of hashable items: a
tuple of token ids (the `--dp` dispatcher) or a str (the standalone router matches text).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Sequence

Key = Sequence[Hashable]
LOW_WATER = 0.9  # a prune keeps at most this share of max_size


class _Node:
    __slots__ = ("key", "children", "parent", "last_access")

    def __init__(self, key: Key, parent: _Node | None, last_access: int) -> None:
        self.key = key  # the run of items on the edge from the parent; empty only at the root
        self.children: dict[Hashable, _Node] = {}  # keyed by the child's first item
        self.parent = parent
        self.last_access = last_access


class ApproxTree:
    """Longest-prefix matching over inserted keys, bounded to `max_size` items in total."""

    def __init__(self, max_size: int) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        self.max_size = max_size
        self.size = 0  # items held over all edges
        self._clock = itertools.count(1)  # logical time: larger is more recent
        self._root = _Node((), None, 0)

    def match(self, key: Key) -> int:
        """Length of the longest prefix of `key` held; marks the matched path as used."""
        node, pos, now = self._root, 0, next(self._clock)
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                break
            child.last_access = now
            common = _common_len(child.key, key, pos)
            pos += common
            if common < len(child.key):
                break
            node = child
        return pos

    def insert(self, key: Key) -> None:
        """Add `key` (splitting an edge where it diverges); past `max_size`, prune to its
        low-water mark."""
        node, pos, now = self._root, 0, next(self._clock)
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                node.children[key[pos]] = _Node(key[pos:], node, now)
                self.size += len(key) - pos
                break
            child.last_access = now
            common = _common_len(child.key, key, pos)
            if common < len(child.key):
                child = self._split(child, common)
            node, pos = child, pos + common
        if self.size > self.max_size:
            self.prune(int(self.max_size * LOW_WATER))

    def prune(self, max_size: int) -> None:
        """Drop least recently used leaves until at most `max_size` items remain."""
        leaves = [(n.last_access, id(n), n) for n in self._nodes() if not n.children]
        heapq.heapify(leaves)
        while self.size > max_size and leaves:
            _, _, leaf = heapq.heappop(leaves)
            parent = leaf.parent
            assert parent is not None  # the root is never a leaf on the heap
            del parent.children[leaf.key[0]]
            self.size -= len(leaf.key)
            if parent is not self._root and not parent.children:
                heapq.heappush(leaves, (parent.last_access, id(parent), parent))

    def check_integrity(self) -> None:
        """Assert sizes add up and every child is keyed by its first item (for tests)."""
        total = 0
        for node in self._nodes():
            total += len(node.key)
            for first, child in node.children.items():
                assert child.parent is node and len(child.key) > 0 and child.key[0] == first
        assert total == self.size, (total, self.size)

    # ---- private ---------------------------------------------------------------------------

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut `node`'s edge after `at` items; returns the new upper node."""
        parent = node.parent
        assert parent is not None and 0 < at < len(node.key)
        upper = _Node(node.key[:at], parent, node.last_access)
        parent.children[node.key[0]] = upper
        node.key = node.key[at:]
        node.parent = upper
        upper.children[node.key[0]] = node
        return upper

    def _nodes(self) -> list[_Node]:
        out, stack = [], [self._root]
        while stack:
            node = stack.pop()
            if node is not self._root:
                out.append(node)
            stack.extend(node.children.values())
        return out


def _common_len(edge: Key, key: Key, pos: int) -> int:
    """How many leading items of `edge` equal `key[pos:]`."""
    n = min(len(edge), len(key) - pos)
    if edge[:n] == key[pos : pos + n]:
        return n
    i = 0
    while i < n and edge[i] == key[pos + i]:
        i += 1
    return i
