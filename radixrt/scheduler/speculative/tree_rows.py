"""TreeRows: the req_to_token rows a step's draft trees attend through, and after
verification the accepted path's slots moved to consecutive positions, the rest freed.

Ownership: `alloc_for` gives a tree request slots for its 1 + n tokens (the last token, then
the drafted nodes in depth-first order) at positions kv_len.. of its own row, like any draft:
they are the request's. The first branch is nodes 1..m, so the own row is that branch's keys.
Every other branch (leaf) borrows a spare req_to_token row of the pool for the pass: the
request's prefix slots copied, then its path's node slots at positions kv_len + depth. Rows
are borrowed in `reserve` (plan) and returned in `release` (verify, or the next plan when a
pass raised), so the row pool is whole after every step; no slot is copied or re-owned by
them (slots are indirect: the K/V stays where each node's pass wrote it).
"""

from __future__ import annotations

import torch

from radixrt.cache.kv_manager import KVCacheManager
from radixrt.core import Req
from radixrt.scheduler.speculative.tree import DraftTree


class TreeRows:
    """The borrowed rows of this step's trees, by request."""

    def __init__(self, kv: KVCacheManager) -> None:
        self.kv = kv
        self.pool = kv.req_to_token_pool
        self._rows: dict[int, tuple[Req, DraftTree, list[int]]] = {}  # id(req) -> borrowed

    def spare(self) -> int:
        """Rows that may be borrowed now: all free ones but one (left for admission)."""
        return self.pool.num_free - 1

    def reserve(self, req: Req, tree: DraftTree) -> None:
        """Borrow a row for each branch past the first of `req`'s tree (spare() must allow)."""
        rows = [self.pool.alloc() for _ in tree.leaves()[1:]]
        self._rows[id(req)] = (req, tree, rows)

    def lay_out(self) -> None:
        """After alloc_for: fill the borrowed rows and set each tree request's draft_rows."""
        table = self.pool.req_to_token
        for req, tree, rows in self._rows.values():
            own, start = req.req_pool_idx, req.kv_len
            assert own is not None
            slots = table[own, start : start + 1 + len(tree.tokens)]  # node j at start + j
            for leaf, row in zip(tree.leaves()[1:], rows):
                table[row, : start + 1] = table[own, : start + 1]
                path = torch.tensor(tree.path(leaf), dtype=torch.int64)
                table[row, start + 1 : start + 1 + path.numel()] = slots[path]
            branch_rows = [own, *rows]
            req.draft_rows = [(own, start)] + [
                (branch_rows[b], start + d) for b, d in zip(tree.branch_of()[1:], tree.depths)
            ]

    def accept(self, req: Req, path: list[int]) -> None:
        """Move the slots of accepted nodes `path` (node ids, the first 0) to positions
        kv_len + 0.. of `req`'s row and free the slots of the other drafted nodes."""
        tree = self._rows[id(req)][1]
        table = self.pool.req_to_token
        own, start = req.req_pool_idx, req.kv_len
        assert own is not None
        slots = table[own, start : start + 1 + len(tree.tokens)].clone()
        kept = torch.tensor(path, dtype=torch.int64)
        table[own, start : start + kept.numel()] = slots[kept]
        dropped = sorted(set(range(1, len(tree.tokens) + 1)) - set(path))
        if dropped:
            self.kv.allocator.free(slots[torch.tensor(dropped)].to(torch.int64))
        req.draft_rows = []

    def tree_of(self, req: Req) -> DraftTree | None:
        """`req`'s tree this step (None: a chain or no draft)."""
        held = self._rows.get(id(req))
        return None if held is None else held[1]

    def release(self) -> None:
        """Return every borrowed row (their contents are stale from here on)."""
        for _, _, rows in self._rows.values():
            for row in rows:
                self.pool.free(row)
        self._rows.clear()
