"""The largest subtrees of the radix tree, for the dashboard: a bounded, read-only walk.

A subtree is a child of the root (one per namespace and first token or page) and, for a big
one, its largest branches one level down: its children, except that a child shorter than
MIN_ROW_TOKENS with children of its own is looked through (its tokens lead the text of the
rows below it). Each row gives the tokens and nodes below it, the hits and idle time of its
top node, the pinned and locked tokens below it and the first token ids of its text. The walk
changes nothing (no split, no access time, no lock) and visits at most `max_nodes` nodes;
past the cap the figures cover what was walked and `truncated` says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from radixrt.cache.tree_node import TreeNode
from radixrt.cache.tree_view import TreeView

PREFIX_IDS = 24  # token ids of each row's text returned (decoded by the HTTP side)
BIG_SHARE = 0.1  # a root child holding this share of the walked tokens shows its branches
MAX_CHILD_ROWS = 4  # branches shown under a big root child
MIN_ROW_TOKENS = 8  # a shorter node with children is looked through for its branches


@dataclass(frozen=True, slots=True)
class Subtree:
    extra_key: str | None  # namespace
    depth: int  # 1: a child of the root; 2: one of its branches
    offset: int  # tokens from the root to the first of `prefix_ids`
    tokens: int  # in the top node and every node below it
    nodes: int
    hits: int  # admitted requests whose cached prefix ran through the top node
    idle_s: float  # since a match or insert last went through the top node
    pinned_tokens: int  # below it, in nodes a pin holds
    locked_tokens: int  # below it, in nodes a request's lock holds and no pin
    prefix_ids: list[int]  # the first PREFIX_IDS of the looked-through tokens, then the top node's


@dataclass(frozen=True, slots=True)
class TreeSummary:
    num_nodes: int = 0  # in the whole tree, the root not counted
    walked_nodes: int = 0
    truncated: bool = False  # the walk stopped at its cap: figures cover what it saw
    subtrees: list[Subtree] = field(default_factory=list)  # each root child, then its branches


def summarize(cache: TreeView, max_rows: int, max_nodes: int) -> TreeSummary:
    """At most `max_rows` rows, from a walk of at most `max_nodes` nodes."""
    order, parent = _walk(cache, max_nodes)
    # Per walked node (by its position in `order`): tokens and nodes at and below it.
    tokens = [len(node.key) for node in order]
    nodes = [1] * len(order)
    for i in range(len(order) - 1, -1, -1):  # children come after their parents
        p = parent[i]
        if p >= 0:
            tokens[p] += tokens[i]
            nodes[p] += nodes[i]
    index = {id(node): i for i, node in enumerate(order)}
    tops = [i for i, p in enumerate(parent) if p < 0]
    tops.sort(key=lambda i: -tokens[i])
    total = sum(tokens[i] for i in tops)
    now = time.monotonic()

    def row(i: int, depth: int, offset: int, text_ids: list[int]) -> Subtree:
        node = order[i]
        pinned, locked = _held(node)
        idle = max(0.0, now - node.last_used)
        return Subtree(node.extra_key, depth, offset, tokens[i], nodes[i], node.hit_count, idle,
                       pinned, locked, text_ids[:PREFIX_IDS])  # fmt: skip

    rows: list[Subtree] = []
    for i in tops:
        if len(rows) >= max_rows:
            break
        top = order[i]
        rows.append(row(i, 1, 0, top.key))
        if tokens[i] < BIG_SHARE * total:
            continue
        branches = _branches(top, index)
        branches.sort(key=lambda b: -tokens[b[0]])
        for j, lead in branches[: min(MAX_CHILD_ROWS, max_rows - len(rows))]:
            rows.append(row(j, 2, len(top.key), lead + order[j].key))
    return TreeSummary(cache.num_nodes, len(order), len(order) < cache.num_nodes, rows)


def _walk(cache: TreeView, max_nodes: int) -> tuple[list[TreeNode], list[int]]:
    """Up to `max_nodes` nodes, depth first (the root children with the longest own keys
    first), and the position of each one's parent among them (-1: the root)."""
    stack = [(c, -1) for c in sorted(cache.root.children.values(), key=lambda c: len(c.key))]
    order: list[TreeNode] = []
    parent: list[int] = []
    while stack and len(order) < max_nodes:
        node, p = stack.pop()
        i = len(order)
        order.append(node)
        parent.append(p)
        stack.extend((c, i) for c in node.children.values())
    return order, parent


def _branches(top: TreeNode, index: dict[int, int]) -> list[tuple[int, list[int]]]:
    """The walked nodes a big root child branches into (by position), each with the tokens
    between `top` and it: its children, where one shorter than MIN_ROW_TOKENS that has
    children stands aside for them (a chat template's shared "You are" says nothing of what
    follows)."""
    out: list[tuple[int, list[int]]] = []
    stack = [(c, list[int]()) for c in top.children.values() if id(c) in index]
    while stack:
        node, lead = stack.pop()
        kids = [c for c in node.children.values() if id(c) in index]
        if len(node.key) < MIN_ROW_TOKENS and kids:
            stack.extend((c, (lead + node.key)[:PREFIX_IDS]) for c in kids)
        else:
            out.append((index[id(node)], lead))
    return out


def _held(top: TreeNode) -> tuple[int, int]:
    """(pinned, locked) tokens at and below `top`. Locks and pins count on every ancestor
    too, so only nodes holding one are visited (not bounded by the walk's cap: they are the
    running requests' paths and the pins)."""
    pinned = locked = 0
    stack = [top] if top.lock_ref or top.pin_ref else []
    while stack:
        node = stack.pop()
        if node.pin_ref:
            pinned += len(node.key)
        else:
            locked += len(node.key)
        stack.extend(c for c in node.children.values() if c.lock_ref or c.pin_ref)
    return pinned, locked
