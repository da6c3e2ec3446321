"""`SpillToTiers`: the tree observer that keeps an evicted leaf's blocks in the lower tiers
(write-back). Its sibling `WriteThrough` (write_through.py) writes a request's prefix as the
request leaves it; the KV manager only loads from the tiers, at admission."""

from __future__ import annotations

from radixrt.cache.tiers.contract import BaseKVTiers
from radixrt.cache.tree_node import TreeNode
from radixrt.cache.tree_observer import TreeObserver


class SpillToTiers(TreeObserver):
    """Spills each leaf the tree is about to evict into `tiers` (the same object the KV manager
    loads from); the tiers own the copies, the tree still owns (and then frees) the slots."""

    def __init__(self, tiers: BaseKVTiers) -> None:
        self.tiers = tiers

    def on_evicted(self, node: TreeNode) -> None:
        self.tiers.spill(node)  # its slots (and its ancestors') still hold their K/V
