"""A token automaton with distances to the end: which tokens may come next, whether the output
is complete, how few tokens finish it, and which tokens keep a finish within a budget.

Built from outlines-core's `Index` of the spec's regex followed by a sentinel: `(?:R)\\x00`,
where the sentinel byte is a token of its own (id `sentinel`, beyond the model's vocabulary)
and the model's tokens that contain a NUL byte are left out. An output is complete where the
sentinel may come next. outlines-core itself drops, from a state where the regex could end,
every edge into a state where it could not (after "2", `[0-9]+(\\.[0-9]+)?` refuses "."); with
the sentinel no state but the last one is an end, so every edge of the regex is kept.

`dist[s]` is the fewest tokens from state `s` to a complete output, found by a breadth-first
search backwards over every edge; a state that cannot reach one has UNREACHABLE. With `k`
tokens left (the one being chosen included), a token is kept when the state it leads to is at
most `k - 1` tokens from the end: every prefix the mask allows can still be finished in time,
so the output ends complete whenever the start's distance fits the budget. Exact: a token is
dropped only when no continuation after it can finish in time.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from radixrt.grammar.base import UNREACHABLE


class TokenAutomaton:
    """The tables of one compiled spec; immutable once built (masks are cached lazily, which
    is safe to race), shared by every matcher of the spec.

    States are renumbered 0..n-1 (`start` first reached). Per state: its edges as token ids
    sorted by id with the next state of each (`accept` is a binary search) and whether the
    output may end there; for a state a budget first cuts, the same edges sorted by the
    distance after them (a cut is then a binary search). About 12 bytes per edge."""

    def __init__(self, index: Any, vocab_size: int, sentinel: int) -> None:
        self.num_words = (vocab_size + 31) // 32
        raw: dict[int, dict[int, int]] = index.get_transitions()
        finals = set(index.get_final_states())
        names = np.array(sorted(raw), dtype=np.int64)  # outlines' state ids; ours: positions
        n = len(names)
        self.start = int(np.searchsorted(names, index.get_initial_state()))
        self.accepting = np.zeros(n, dtype=np.bool_)
        edges: list[tuple[np.ndarray, np.ndarray]] = []
        for name in names.tolist():
            out = raw[name]
            # Complete where the sentinel leads to an end (a regex may itself contain NUL).
            self.accepting[len(edges)] = out.get(sentinel, -1) in finals
            tokens = np.fromiter(out.keys(), dtype=np.int64, count=len(out))
            targets = np.fromiter(out.values(), dtype=np.int64, count=len(out))
            nexts = np.searchsorted(names, targets).clip(0, n - 1)
            keep = (tokens < vocab_size) & (names[nexts] == targets)
            order = np.argsort(tokens[keep])
            edges.append((tokens[keep][order].astype(np.int32), nexts[keep][order]))
        self.dist = _distances(edges, self.accepting)
        self._by_id = edges
        # The most any edge of a state leads to: a budget above it cuts nothing.
        self._worst = np.array([int(self.dist[x].max()) if len(x) else 0 for _, x in edges])
        self._by_dist: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # made at first cut
        # Bytes of the tables built here (the masks and cuts made later are not counted).
        self.nbytes = sum(t.nbytes + x.nbytes for t, x in edges) + sum(
            a.nbytes for a in (self.dist, self.accepting, self._worst)
        )
        self._full: dict[int, np.ndarray] = {}  # state -> its unbudgeted mask

    def next_state(self, state: int, token: int) -> int | None:
        """The state after `token`, or None if the automaton does not allow it."""
        tokens, nexts = self._by_id[state]
        i = int(np.searchsorted(tokens, token))
        return int(nexts[i]) if i < len(tokens) and tokens[i] == token else None

    def distance(self, state: int) -> int:
        """Fewest tokens from `state` to a complete output; UNREACHABLE if there is none."""
        return int(self.dist[state])

    def mask(self, state: int, budget: int | None) -> np.ndarray:
        """(num_words,) int32 bitmask of the model tokens allowed from `state` (stop tokens
        not included), with `budget` tokens left, this one included (None: no limit)."""
        if budget is None or self._worst[state] <= budget - 1:
            full = self._full.get(state)
            if full is None:
                full = self._full[state] = self._pack(self._by_id[state][0])
            return full
        cut = self._by_dist.get(state)
        if cut is None:
            tokens, nexts = self._by_id[state]
            after = self.dist[nexts]
            order = np.argsort(after, kind="stable")
            cut = self._by_dist[state] = (tokens[order], after[order])
        tokens, after = cut
        return self._pack(tokens[: int(np.searchsorted(after, budget - 1, side="right"))])

    def _pack(self, tokens: np.ndarray) -> np.ndarray:
        bits = np.zeros(self.num_words * 32, dtype=np.bool_)
        bits[tokens] = True
        return np.packbits(bits, bitorder="little").view(np.int32)


def _distances(edges: list[tuple[np.ndarray, np.ndarray]], accepting: np.ndarray) -> np.ndarray:
    """(n,) int64: per state, the fewest edges to an accepting state (UNREACHABLE if none)."""
    back: list[set[int]] = [set() for _ in edges]
    for state, (_, nexts) in enumerate(edges):
        for nxt in np.unique(nexts).tolist():
            if nxt != state:
                back[nxt].add(state)
    dist = np.full(len(edges), UNREACHABLE, dtype=np.int64)
    todo = deque(np.flatnonzero(accepting).tolist())
    dist[list(todo)] = 0
    while todo:
        state = todo.popleft()
        for prev in back[state]:
            if dist[prev] == UNREACHABLE:
                dist[prev] = dist[state] + 1
                todo.append(prev)
    return dist
