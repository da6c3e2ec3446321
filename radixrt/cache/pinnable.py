"""`PinnablePrefixCache`: a prefix cache whose nodes can be pinned, the one extra the pin table
(pins.py) needs. Pins stay beside the narrow `BasePrefixCache` rather than in it or in an
observer: a pin moves tokens between the tree's size counters and guards eviction, so it is the
tree's own state, and the null cache (caching off, with `NoPinTable`) has nothing to pin."""

from __future__ import annotations

from abc import abstractmethod

from radixrt.cache.prefix_cache import BasePrefixCache
from radixrt.cache.tree_node import TreeNode


class PinnablePrefixCache(BasePrefixCache):
    """A `BasePrefixCache` with pins: a pinned node and its ancestors are never evicted and
    count in `pinned_size`, locked or not. radixrt/cache/pins.py is the only caller: it owns
    every pin, its lifetime and the bounds on pinned tokens."""

    @abstractmethod
    def pin(self, node: TreeNode) -> None:
        """Keep `node` and its ancestors from eviction until `unpin`."""

    @abstractmethod
    def unpin(self, node: TreeNode) -> None:
        """Undo one `pin(node)`; RuntimeError when no pin is held on `node` or below it."""

    @abstractmethod
    def unpinned_above(self, node: TreeNode) -> int:
        """Tokens from the root to `node` that no pin holds yet (what pinning `node` would
        add to `pinned_size`)."""
