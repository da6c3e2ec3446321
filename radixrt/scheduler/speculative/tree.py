"""DraftTree: several drafted continuations merged into one tree of tokens, laid out in
depth-first order so that its first branch is a chain of consecutive positions; where each node
attends (its branch's req_to_token row) and which path the target's picks accept."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DraftTree:
    """Drafted nodes 1..n in depth-first preorder (the first child first); node 0 is the
    request's last token. parents[j - 1] < j is node j's parent, depths[j - 1] its depth (1 for
    a child of node 0). Nodes 1..m of the first branch (down the first children) are a chain."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]

    @property
    def is_chain(self) -> bool:
        return all(p == j for j, p in enumerate(self.parents))

    def leaves(self) -> list[int]:
        """Node ids without children, in order (the branches' ends)."""
        has_child = set(self.parents)
        return [j for j in range(1, len(self.tokens) + 1) if j not in has_child]

    def path(self, node: int) -> list[int]:
        """Nodes 1.. from the root's child down to `node` (empty for node 0)."""
        out: list[int] = []
        while node:
            out.append(node)
            node = self.parents[node - 1]
        return out[::-1]

    def branch_of(self) -> list[int]:
        """Per node 0..n: the index of the branch (in `leaves()` order) whose row it attends
        in: the first leaf under it along first children; node 0 and the first branch: 0."""
        leaves = self.leaves()
        index = {leaf: b for b, leaf in enumerate(leaves)}
        out = [0] * (len(self.tokens) + 1)
        for j in range(len(self.tokens), 0, -1):  # children come after their parent
            if j in index:
                out[j] = index[j]
        first_child: dict[int, int] = {}
        for j, p in enumerate(self.parents, start=1):
            first_child.setdefault(p, j)
        for j in range(len(self.tokens), 0, -1):
            c = first_child.get(j)
            if c is not None:
                out[j] = out[c]
        return out

    def accept(self, picks: list[int]) -> list[int]:
        """The accepted path from node 0: at each node the target's pick `picks[node]` moves
        to the child drafting that token; stops where none does. Returns the nodes 0, a, b, ..
        whose picks are emitted in order (each accepted child's token is its parent's pick)."""
        children: dict[int, dict[int, int]] = {}
        for j, (p, t) in enumerate(zip(self.parents, self.tokens), start=1):
            children.setdefault(p, {}).setdefault(t, j)
        node, out = 0, [0]
        while True:
            nxt = children.get(node, {}).get(picks[node])
            if nxt is None:
                return out
            out.append(nxt)
            node = nxt


def chain(tokens: list[int]) -> DraftTree:
    return DraftTree(list(tokens), list(range(len(tokens))), list(range(1, len(tokens) + 1)))


def merge(candidates: list[list[int]], max_nodes: int, max_branches: int) -> DraftTree:
    """Candidates (the most likely first) merged into a trie of at most `max_nodes` nodes and
    `max_branches` leaves, in depth-first preorder. Each candidate adds the nodes past its
    longest prefix already in the trie while the budgets last (a later one may be cut short);
    the first candidate's path is the first branch."""
    kids: dict[int, list[int]] = {0: []}  # node -> children, in insertion order
    token: dict[int, int] = {}
    leaves, count = 0, 0
    for cand in candidates:
        node, i = 0, 0
        while i < len(cand):
            nxt = next((c for c in kids[node] if token[c] == cand[i]), None)
            if nxt is None:
                break
            node, i = nxt, i + 1
        if i == len(cand) or count >= max_nodes:
            continue
        if kids[node] and leaves >= max_branches:  # a new branch: over the leaf budget
            continue
        if kids[node] or node == 0 and not token:
            leaves += 1
        for t in cand[i : i + max_nodes - count]:
            count += 1
            token[count] = t
            kids[node].append(count)
            kids[count] = []
            node = count
    tokens: list[int] = []
    parents: list[int] = []
    depths: list[int] = []

    def visit(node: int, parent: int, depth: int) -> None:  # renumbered in preorder
        tokens.append(token[node])
        parents.append(parent)
        depths.append(depth)
        me = len(tokens)
        for c in kids[node]:
            visit(c, me, depth + 1)

    for c in kids[0]:
        visit(c, 0, 1)
    return DraftTree(tokens, parents, depths)


def chain_path(draft: list[int], picks: list[int]) -> list[int]:
    """`DraftTree.accept` for a chain: rows 0..n, the drafts before row n equal to the picks
    before them."""
    n = 0
    while n < len(draft) and draft[n] == picks[n]:
        n += 1
    return list(range(n + 1))
