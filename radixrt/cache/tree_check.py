"""The radix tree's self-check: a read-only walk that asserts its shape, lock and pin counts,
size counters and slot ownership (tests run it after every mutating step). It changes nothing
and reads the tree's private counters; the debug print is tree_view.py's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch

from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.tree_node import TreeNode, child_key, node_state


class CheckedTree(Protocol):
    """What the check reads of the tree (radix_cache.py: RadixCache, which calls it)."""

    @property
    def root(self) -> TreeNode: ...

    @property
    def page_size(self) -> int: ...

    @property
    def allocator(self) -> TokenSlotAllocator: ...

    @property
    def num_nodes(self) -> int: ...

    @property
    def _sizes(self) -> list[int]: ...  # tokens (evictable, protected, pinned)

    @property
    def _leaves(self) -> set[TreeNode]: ...  # every childless node except the root

    @property
    def _empty(self) -> torch.Tensor: ...  # (0,) int64

    def _nodes(self) -> Iterator[TreeNode]: ...


def check_integrity(tree: CheckedTree) -> None:
    """Assert tree shape, lock refs, size counters and slot ownership are consistent."""
    sizes = [0, 0, 0]
    leaves: set[TreeNode] = set()
    owned: list[torch.Tensor] = []
    root, page_size = tree.root, tree.page_size
    assert root.parent is None and not root.key, "root must be empty"
    for node in tree._nodes():
        for ref in ("lock_ref", "pin_ref"):
            assert getattr(node, ref) >= sum(getattr(c, ref) for c in node.children.values()), (
                f"node {node.id}: {ref} {getattr(node, ref)} below its children's sum"
            )
        for key, child in node.children.items():
            assert child.parent is node, f"node {child.id}: wrong parent"
            assert key == child_key(child.extra_key, child.key, 0, page_size), (
                f"node {child.id} keyed {key!r} under its parent"
            )
            if node is not root:
                assert child.extra_key == node.extra_key, f"node {child.id}: namespace"
        if node is root:
            continue
        assert node.key and len(node.key) % page_size == 0, f"node {node.id}: key len"
        assert node.slots.dtype == torch.int64, f"node {node.id}: slots dtype"
        assert node.slots.shape == (len(node.key),), f"node {node.id}: key/slot length"
        sizes[node_state(node)] += len(node.key)
        if node.is_leaf:
            leaves.add(node)
        owned.append(node.slots)
    assert sizes == tree._sizes, (
        f"sizes (evictable, protected, pinned) recount {sizes} != {tree._sizes}"
    )
    assert leaves == tree._leaves, "leaf set out of date"
    assert len(owned) == tree.num_nodes, f"{len(owned)} nodes, counted {tree.num_nodes}"
    _check_slots(tree, torch.cat(owned) if owned else tree._empty)


def _check_slots(tree: CheckedTree, owned: torch.Tensor) -> None:
    allocator = tree.allocator
    assert owned.numel() == torch.unique(owned).numel(), "a slot is owned twice"
    if owned.numel():
        pad = allocator.page_size  # slots below it: the padding page
        assert int(owned.min()) >= pad, "a padding slot or a negative slot is owned"
        assert int(owned.max()) <= allocator.max_slot, "slot beyond capacity owned"
    free = allocator.free_slots.to(owned.device)
    assert not torch.isin(owned, free).any(), "a tree-owned slot is also free"
