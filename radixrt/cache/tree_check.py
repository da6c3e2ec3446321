"""The radix tree's self-check and debug print: a read-only walk that asserts its shape, lock and
pin counts, size counters and slot ownership (tests run it after every mutating step), and one
line per node for a human. Neither changes the tree; both read its private counters."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from radixrt.cache.tree_node import TreeNode, child_key, node_state

if TYPE_CHECKING:
    from radixrt.cache.radix_cache import RadixCache


def check_integrity(tree: RadixCache) -> None:
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
    assert len(owned) == tree._num_nodes, f"{len(owned)} nodes, counted {tree._num_nodes}"
    _check_slots(tree, torch.cat(owned) if owned else tree._empty)


def pretty_print(tree: RadixCache) -> str:
    """One line per node, indented by depth: tokens, first ids, lock ref, time, slots."""
    sizes, root = tree._sizes, tree.root
    lines = [
        f"RadixCache page_size={tree.page_size} evictable={sizes[0]} "
        f"protected={sizes[1]} pinned={sizes[2]} locks={root.lock_ref} "
        f"pins={root.pin_ref}"
    ]
    stack = [(child, 1) for child in reversed(root.children.values())]
    while stack:
        node, depth = stack.pop()
        ns = f" ns={node.extra_key!r}" if depth == 1 and node.extra_key is not None else ""
        more = "..." if len(node.key) > 8 else ""
        lines.append(
            f"{'  ' * depth}[{len(node.key)} tok]{ns} key={node.key[:8]}{more} "
            f"ref={node.lock_ref} pin={node.pin_ref} t={node.last_access_time} "
            f"slots={node.slots[:8].tolist()}{more}"
        )
        stack.extend((child, depth + 1) for child in reversed(node.children.values()))
    return "\n".join(lines)


def _check_slots(tree: RadixCache, owned: torch.Tensor) -> None:
    allocator = tree.allocator
    assert owned.numel() == torch.unique(owned).numel(), "a slot is owned twice"
    if owned.numel():
        pad = allocator.page_size  # slots below it: the padding page
        assert int(owned.min()) >= pad, "a padding slot or a negative slot is owned"
        assert int(owned.max()) <= allocator.max_slot, "slot beyond capacity owned"
    free = allocator.free_slots.to(owned.device)
    assert not torch.isin(owned, free).any(), "a tree-owned slot is also free"
