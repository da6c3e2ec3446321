"""Read-only walks of the radix tree: the cached tokens that follow a whole key (what a
speculative drafter proposes). Nothing here splits a node, takes a lock or touches LRU state."""

from __future__ import annotations

from radixrt.cache.tree_node import TreeNode, child_key
from radixrt.cache.tree_view import TreeView


def continuation(
    view: TreeView, key: list[int], extra_key: str | None, max_tokens: int
) -> list[int]:
    """Up to `max_tokens` tokens cached right after `key` when all of `key` is a cached path
    in namespace `extra_key` (compared token by token, whatever the page size); [] when it is
    not (always with caching off: the null cache's root has no child). Past the end of `key`
    the walk follows the most recently used child at each fork."""
    found = continuations(view, key, extra_key, max_tokens, 1)
    return found[0] if found else []


def continuations(
    view: TreeView, key: list[int], extra_key: str | None, max_tokens: int, count: int
) -> list[list[int]]:
    """Up to `count` distinct cached continuations of `key` (as `continuation`), each up to
    `max_tokens` long: at each fork past the end of `key` the most recently used child
    first, so the first is `continuation`'s; [] when `key` is not a cached path."""
    if not key or max_tokens <= 0 or count <= 0:
        return []
    node, pos, page_size = view.root, 0, view.page_size
    while pos < len(key):
        child = _child_at(node, key, pos, extra_key, page_size)
        if child is None:
            return []
        n = min(len(child.key), len(key) - pos)
        if child.key[:n] != key[pos : pos + n]:
            return []
        if pos + n == len(key):  # the key ends inside this node (or at its end)
            out = child.key[n : n + max_tokens]
            if len(out) == max_tokens:
                return [out]
            paths = [out + rest for rest in _paths(child, max_tokens - len(out), count)]
            return [p for p in paths if p]
        node, pos = child, pos + n
    return []


def _child_at(
    node: TreeNode, key: list[int], pos: int, extra_key: str | None, page_size: int
) -> TreeNode | None:
    """The child of `node` whose key may hold key[pos:]; a scan of the children when fewer
    than a page of tokens are left (a child's index key is a whole page then)."""
    if page_size == 1 or len(key) - pos >= page_size:
        return node.children.get(child_key(extra_key, key, pos, page_size))
    rest = key[pos:]
    for child in node.children.values():
        if child.extra_key == extra_key and child.key[: len(rest)] == rest:
            return child
    return None


def _paths(node: TreeNode, max_tokens: int, count: int) -> list[list[int]]:
    """Up to `count` token paths below `node`, up to `max_tokens` each, the most recently used
    children first ([[]] at a leaf)."""
    kids = sorted(node.children.values(), key=lambda c: (c.last_access_time, c.id), reverse=True)
    out: list[list[int]] = []
    for child in kids:
        head = child.key[:max_tokens]
        if len(head) == max_tokens:
            out.append(head)
        else:
            out += [head + rest for rest in _paths(child, max_tokens - len(head), count - len(out))]
        if len(out) >= count:
            return out[:count]
    return out or [[]]
