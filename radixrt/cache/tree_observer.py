"""The prefix tree's one hook: observers told of every node stored, evicted and hit, of a reset,
and of the prefixes requests leave in it (released, pinned). Everything that follows the tree
without being the tree (lower tiers' spill and write-through, KV events, the eviction log, hit
counts) is an observer, registered where the cache is built.

Ownership: the tree owns its nodes; an observer reads the node it is handed (and its
ancestors) during the call and never changes the tree's shape, locks, pins, slots or sizes.
What an observer keeps (a log, counters, spilled blocks, pending events) is its own. The tree
calls observers in the order they were added; "off" is no observer.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from radixrt.cache.tree_node import TreeNode


@dataclass(frozen=True, slots=True)
class CachedPrefix:
    """A prefix of whole pages that a request leaves in the tree (told by the KV manager)."""

    num_tokens: int  # its length, a multiple of the page size (0: nothing cached)
    num_new: int  # of the request's tokens, those it computed rather than matched (>= 0)
    # The node ending the prefix, or None when the tree does not hold it (the cache off). A
    # match: it refreshes the path's LRU time, so an observer calls it only to act on the node.
    find: Callable[[], TreeNode | None]


class TreeObserver(ABC):  # noqa: B024 (every hook is optional: an observer overrides its own)
    """What the tree tells its observers; each hook defaults to nothing."""

    def on_stored(self, node: TreeNode) -> None:  # noqa: B027
        """`node` was just added to the tree as a leaf: its parent chain is in place and its
        slots hold the K/V of its tokens. A split adds no node here (it moves no token)."""

    def on_evicted(self, node: TreeNode) -> None:  # noqa: B027
        """`node` (a leaf, still attached) is about to be evicted: its slots and its
        ancestors' still hold their K/V; they are freed right after every observer ran."""

    def on_hit(self, node: TreeNode) -> None:  # noqa: B027
        """One admitted request's cached prefix ends at `node` (a node `match_prefix`
        returned; the root for none). Told by the scheduler, not by every match."""

    def on_cleared(self) -> None:  # noqa: B027
        """The whole tree was dropped (`reset`, a flush): not an eviction, nothing spills."""

    def on_released(self, prefix: CachedPrefix) -> None:  # noqa: B027
        """A finished or retracted request handed its tokens to the tree and let go: `prefix`
        is all of them that the tree takes. Not told for a chunk of a running request."""

    def on_pinned(self, prefix: CachedPrefix) -> None:  # noqa: B027
        """`prefix` of a finished request's prompt was just pinned (cache/pins.py)."""


class TreeObservers:
    """The tree's observers, called in the order they were added."""

    def __init__(self) -> None:
        self._observers: list[TreeObserver] = []

    def add(self, observer: TreeObserver) -> None:
        self._observers.append(observer)

    def __iter__(self) -> Iterator[TreeObserver]:
        return iter(self._observers)

    def __len__(self) -> int:
        return len(self._observers)

    def stored(self, node: TreeNode) -> None:
        for o in self._observers:
            o.on_stored(node)

    def evicted(self, node: TreeNode) -> None:
        for o in self._observers:
            o.on_evicted(node)

    def hit(self, node: TreeNode) -> None:
        for o in self._observers:
            o.on_hit(node)

    def cleared(self) -> None:
        for o in self._observers:
            o.on_cleared()

    def released(self, prefix: CachedPrefix) -> None:
        for o in self._observers:
            o.on_released(prefix)

    def pinned(self, prefix: CachedPrefix) -> None:
        for o in self._observers:
            o.on_pinned(prefix)


class HitCounter(TreeObserver):
    """Counts admitted requests per node: a hit adds one to the node's `hit_count` and its
    ancestors' (the root's is not kept). Only the dashboard's summary (tree_summary.py) reads
    the counts; a split copies them to the upper half. Owns nothing but those counts."""

    def on_hit(self, node: TreeNode) -> None:
        cur: TreeNode | None = node
        while cur is not None and cur.parent is not None:
            cur.hit_count += 1
            cur = cur.parent
