"""StopMatcher: an Aho-Corasick automaton over a request's stop strings, fed text as it streams
in; O(total stop length) to build (built automata are shared by an LRU cache), O(1) amortized
per character fed."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

_CACHE_SIZE = 64  # distinct stop lists kept built; one is at most 16 x 256 nodes


@dataclass(frozen=True, slots=True)
class StopMatch:
    """A stop string found in the text fed so far; `start` is its offset in that whole text."""

    start: int
    stop: str

    @property
    def end(self) -> int:
        return self.start + len(self.stop)


class StopMatcher:
    """Finds the first stop string in a stream of text fed in chunks of any size.

    The first match is the one that ends first; among those ending at the same character, the
    longest (the one starting first). Once matched, further text is ignored. `hold_len` is the
    length of the longest suffix of the text fed so far that is a prefix of some stop string
    (text that may still turn into a match), 0 once matched. No stop strings: never matches.
    """

    __slots__ = ("_automaton", "_state", "fed_len", "match")

    def __init__(self, stops: Sequence[str]) -> None:
        """Raises ValueError on an empty stop string (SamplingParams.validate rejects them)."""
        self._automaton = _build(tuple(stops))
        self._state = 0  # the node of the longest text suffix that is a stop-string prefix
        self.fed_len = 0  # characters fed so far
        self.match: StopMatch | None = None

    @property
    def hold_len(self) -> int:
        return 0 if self.match is not None else self._automaton.depth[self._state]

    def feed(self, text: str) -> StopMatch | None:
        """Consume `text`; return the first match in everything fed so far, if any yet."""
        a = self._automaton
        if self.match is not None or not a.stops:
            self.fed_len += len(text)
            return self.match
        goto, fail, out = a.goto, a.fail, a.out
        state = self._state
        for i, ch in enumerate(text):
            # Follow failure links down to the longest suffix that `ch` extends; each link
            # shortens the state, which only grows by one per character: O(1) amortized.
            while (nxt := goto[state].get(ch)) is None and state:
                state = fail[state]
            state = nxt or 0
            if (idx := out[state]) >= 0:
                stop = a.stops[idx]
                self.match = StopMatch(self.fed_len + i + 1 - len(stop), stop)
                break
        self._state = state
        self.fed_len += len(text)
        return self.match


@dataclass(frozen=True, slots=True)
class _Automaton:
    """The trie of the stop strings with failure links; never mutated once built.

    Node 0 is the root (the empty string). For node v: `goto[v]` its children by character,
    `fail[v]` the node of its longest proper suffix in the trie, `depth[v]` its length, and
    `out[v]` the index of the longest stop string that is a suffix of it (-1 if none).
    """

    stops: tuple[str, ...]
    goto: list[dict[str, int]]
    fail: list[int]
    depth: list[int]
    out: list[int]


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _build(stops: tuple[str, ...]) -> _Automaton:
    if any(not s for s in stops):
        raise ValueError("a stop string must not be empty")
    goto: list[dict[str, int]] = [{}]
    depth, out = [0], [-1]
    for idx, s in enumerate(stops):
        node = 0
        for ch in s:
            nxt = goto[node].get(ch)
            if nxt is None:
                nxt = goto[node][ch] = len(goto)
                goto.append({})
                depth.append(depth[node] + 1)
                out.append(-1)
            node = nxt
        if out[node] < 0:  # a repeated stop string keeps its first index
            out[node] = idx
    fail = [0] * len(goto)
    queue = list(goto[0].values())  # depth-1 nodes fail to the root
    for node in queue:  # breadth first: a node's failure chain is done before its children
        for ch, child in goto[node].items():
            f = fail[node]
            while ch not in goto[f] and f:
                f = fail[f]
            fail[child] = goto[f].get(ch, 0)
            if out[child] < 0:
                out[child] = out[fail[child]]
            queue.append(child)
    return _Automaton(stops, goto, fail, depth, out)
