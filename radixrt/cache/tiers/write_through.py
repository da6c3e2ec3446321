"""`WriteThrough`: the tree observer that writes a prefix to the lowest tier as soon as a request
leaves it in the tree, not only when the pool evicts it: a released request's prefix when it
computed new tokens and the prefix is at least `write_through_min_tokens` long, and every
pinned prefix. What a restart finds on disk is what this wrote."""

from __future__ import annotations

from radixrt.cache.tiers.contract import BaseKVTiers
from radixrt.cache.tree_observer import CachedPrefix, TreeObserver


class WriteThrough(TreeObserver):
    """Writes through into `tiers` (the object admission loads from); the tiers own the copies,
    the tree keeps its slots. Not told of a running request's chunks, nor of blocks loaded
    back from a tier at admission: only of what a request leaves in the tree at its end."""

    def __init__(self, tiers: BaseKVTiers) -> None:
        self.tiers = tiers

    def on_released(self, prefix: CachedPrefix) -> None:
        if prefix.num_new > 0 and self.tiers.wants_write_through(prefix.num_tokens):
            self._write(prefix)

    def on_pinned(self, prefix: CachedPrefix) -> None:
        self._write(prefix)

    def _write(self, prefix: CachedPrefix) -> None:
        node = prefix.find()
        if node is not None:
            self.tiers.write_through(node)
