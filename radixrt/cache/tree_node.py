"""TreeNode: one edge of a prefix tree (its tokens, KV slots, lock and pin counts, use), its key
under its parent, how far a key runs along it and which size counter its tokens count in; the
radix tree is made of them, and the null cache keeps its lock counts on one."""

from __future__ import annotations

import itertools
from collections.abc import Hashable

import torch

from radixrt.core import Req

_node_ids = itertools.count()  # creation order: the LRU tie-break, so eviction is deterministic


class TreeNode:
    """One edge of the tree: a run of tokens and their KV slots below `parent`."""

    __slots__ = (
        "key",
        "slots",
        "children",
        "parent",
        "extra_key",
        "lock_ref",
        "pin_ref",
        "last_access_time",
        "last_used",
        "hit_count",
        "id",
    )

    def __init__(
        self,
        key: list[int] | None = None,
        slots: torch.Tensor | None = None,
        parent: TreeNode | None = None,
        extra_key: str | None = None,
    ) -> None:
        self.key: list[int] = key if key is not None else []
        # (len(key),) int64 on the allocator's device; never written in place (splits share it).
        self.slots: torch.Tensor = slots if slots is not None else torch.empty(0, dtype=torch.int64)
        # Keyed by (extra_key, first token) or (extra_key, tuple of the first page).
        self.children: dict[Hashable, TreeNode] = {}
        self.parent = parent
        self.extra_key = extra_key  # namespace; the same on every node below a root child
        # Locks taken on this node or any descendant: >= the sum over the children.
        self.lock_ref = 0
        # Pins (cache/pins.py) held on this node or any descendant: >= the sum over the
        # children. A node with pin_ref > 0 is never evicted and counts as pinned, locked or not.
        self.pin_ref = 0
        self.last_access_time = 0  # the cache's logical clock, not wall time
        # Read only by the dashboard (cache/tree_summary.py), never by eviction: when a match or
        # insert last went through this node (time.monotonic()), and how many admitted requests'
        # cached prefixes ran through it (written by the HitCounter observer, tree_observer.py).
        # A split copies both to the upper half.
        self.last_used = 0.0
        self.hit_count = 0
        self.id = next(_node_ids)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def __lt__(self, other: TreeNode) -> bool:
        return (self.last_access_time, self.id) < (other.last_access_time, other.id)


def path_nodes(node: TreeNode) -> list[TreeNode]:
    """The nodes from just below the root down to `node` (empty for the root itself)."""
    chain: list[TreeNode] = []
    cur: TreeNode | None = node
    while cur is not None and cur.parent is not None:
        chain.append(cur)
        cur = cur.parent
    chain.reverse()
    return chain


def path_key(node: TreeNode) -> list[int]:
    """The tokens from the root down to the end of `node`."""
    return [t for n in path_nodes(node) for t in n.key]


# A node's size counter (the index into RadixCache's sizes): its tokens count as pinned over
# locked (protected) over evictable.
EVICTABLE, PROTECTED, PINNED = 0, 1, 2


def node_state(node: TreeNode) -> int:
    """A node's size counter: pinned over locked over evictable."""
    return PINNED if node.pin_ref else PROTECTED if node.lock_ref else EVICTABLE


def child_key(extra_key: str | None, key: list[int], pos: int, page_size: int) -> Hashable:
    """The key of the child holding key[pos:] under its parent: (namespace, first token), or
    (namespace, tuple of the first page) when page_size > 1."""
    if page_size == 1:
        return (extra_key, key[pos])
    return (extra_key, tuple(key[pos : pos + page_size]))


def match_len(node_key: list[int], key: list[int], pos: int, key_len: int, page_size: int) -> int:
    """Length of the common prefix of node_key and key[pos:key_len], in whole pages."""
    m = min(len(node_key), key_len - pos)
    if key[pos : pos + m] == (node_key if m == len(node_key) else node_key[:m]):
        return m
    lo, hi = 0, m  # node_key[:lo] matches and node_key[:hi] does not
    while hi - lo > 16:
        mid = (lo + hi) // 2
        if key[pos + lo : pos + mid] == node_key[lo:mid]:
            lo = mid
        else:
            hi = mid
    while key[pos + lo] == node_key[lo]:
        lo += 1
    return lo - lo % page_size


def held_node(req: Req) -> TreeNode:
    """The node a running request holds a lock on (`req.last_node`, set by the KV manager)."""
    node = req.last_node
    assert isinstance(node, TreeNode), "the request holds no prefix-cache lock"
    return node
