"""The read-only view of a prefix tree that explain, continuation, summaries and the debug print
walk (explain.py, tree_walk.py, tree_summary.py, here): every `BasePrefixCache` is one. Nothing
that takes a `TreeView` splits a node, takes a lock or touches LRU state."""

from __future__ import annotations

from typing import Protocol

from radixrt.cache.tree_node import TreeNode


class TreeView(Protocol):
    """A tree to read: its root, page size, node count and size counters."""

    @property
    def root(self) -> TreeNode: ...

    @property
    def page_size(self) -> int: ...

    @property
    def caching(self) -> bool:
        """False for the null cache (caching off): its root never has a child."""
        ...

    @property
    def num_nodes(self) -> int:
        """Nodes in the tree, the root not counted."""
        ...

    @property
    def evictable_size(self) -> int: ...

    @property
    def protected_size(self) -> int: ...

    @property
    def pinned_size(self) -> int: ...


def pretty_print(view: TreeView) -> str:
    """One line per node, indented by depth: tokens, first ids, lock ref, time, slots."""
    root = view.root
    if not view.caching:
        return f"NoPrefixCache (off, {root.lock_ref} locks held)"
    lines = [
        f"RadixCache page_size={view.page_size} evictable={view.evictable_size} "
        f"protected={view.protected_size} pinned={view.pinned_size} locks={root.lock_ref} "
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
