"""How many states a regex's DFA has, counted up to a cap, in bounded time: the `auto` backend
gives a regex to outlines only when its automaton is small, since outlines builds the whole
DFA and walks the vocabulary from every state, and a DFA can be exponential in the regex
(`[ab]*a[ab]{12}` has 8,193 states: 2.5 s to compile; with {20}, minutes and gigabytes), while
a compile thread cannot be stopped.

The regex is parsed with Python's own parser (close to the Rust syntax outlines reads for the
constructs that matter here) and turned into an NFA over an alphabet of disjoint character
intervals; the subset construction stops once it has made `cap` states. \\d, \\w and \\s are
taken as their ASCII sets. None means "could not tell" (a construct outside this subset, such
as a backreference or a lookaround, or an NFA over MAX_NFA_NODES), which the caller treats as
too big. A count, not the DFA: the result only has to be of the right size.
"""

from __future__ import annotations

import re
import re._constants as C  # type: ignore[import-not-found]
import re._parser as sre_parse  # type: ignore[import-not-found]
from bisect import bisect_right
from typing import Any

MAX_NFA_NODES = 20_000
MAX_COUNTED = 64
MAX_DFA_STATES = 512  # characters' states; outlines' byte-level automaton has up to ~2.5x
_COUNTED = re.compile(r"(?<!\\)\{(\d+)(?:,(\d*))?\}")
PARSE_ERRORS = (C.error, RecursionError, OverflowError, ValueError, TypeError)
_MAX_CHAR = 0x10FFFF
_CATEGORIES = {
    C.CATEGORY_DIGIT: [(48, 57)],
    C.CATEGORY_WORD: [(48, 57), (65, 90), (95, 95), (97, 122)],
    C.CATEGORY_SPACE: [(9, 13), (32, 32)],
}
_NEGATED = {
    C.CATEGORY_NOT_DIGIT: C.CATEGORY_DIGIT,
    C.CATEGORY_NOT_WORD: C.CATEGORY_WORD,
    C.CATEGORY_NOT_SPACE: C.CATEGORY_SPACE,
}


class _TooBig(Exception):
    pass


class _Nfa:
    """Nodes with epsilon edges and (interval set, target) edges; node 0 is the start."""

    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[tuple[tuple[int, int], ...], int]]] = []

    def node(self) -> int:
        if len(self.eps) >= MAX_NFA_NODES:
            raise _TooBig
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def build(self, items: list[tuple[Any, Any]], src: int) -> int:
        """Nodes for a parsed sequence starting at `src`; returns the node it ends at."""
        for op, av in items:
            src = self._item(op, av, src)
        return src

    def _item(self, op: Any, av: Any, src: int) -> int:
        if op in (C.LITERAL, C.NOT_LITERAL, C.IN, C.ANY):
            dst = self.node()
            self.edges[src].append((_intervals(op, av), dst))
            return dst
        if op is C.AT:
            return src  # anchors and word boundaries: no character
        if op is C.SUBPATTERN:
            return self.build(list(av[-1]), src)
        if op is C.ATOMIC_GROUP:
            return self.build(list(av), src)
        if op is C.BRANCH:
            dst = self.node()
            for alt in av[1]:
                self.eps[self.build(list(alt), src)].append(dst)
            return dst
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, body = av
            for _ in range(lo):
                src = self.build(list(body), src)
            if hi == C.MAXREPEAT:  # a loop: body*, entered and left by epsilon
                loop = self.node()
                self.eps[src].append(loop)
                self.eps[self.build(list(body), loop)].append(loop)
                return loop
            end = self.node()
            for _ in range(hi - lo):
                self.eps[src].append(end)
                src = self.build(list(body), src)
            self.eps[src].append(end)
            return end
        raise _TooBig  # backreferences, lookarounds, conditionals


def is_small_regex(regex: str, max_counted: int = MAX_COUNTED) -> bool:
    """Whether outlines compiles `regex` quickly (auto_backend.py says why these limits):
    counted repetitions adding up to at most `max_counted`, under MAX_DFA_STATES states."""
    if counted_size(regex) > max_counted:
        return False
    states = dfa_states(regex, MAX_DFA_STATES)
    return states is not None and states < MAX_DFA_STATES


def counted_size(regex: str) -> int:
    """The sum of the counts of `regex`'s counted repetitions (the upper bound of `{m,n}`,
    m for `{m}` and `{m,}`)."""
    return sum(int(hi) if hi else int(lo) for lo, hi in _COUNTED.findall(regex))


def dfa_states(regex: str, cap: int) -> int | None:
    """The number of states of `regex`'s DFA, or `cap` if it has at least that many; None
    if this parser cannot read the regex."""
    try:
        nfa = _Nfa()
        nfa.build(list(sre_parse.parse(regex)), nfa.node())  # where it ends: not needed
    except (_TooBig, *PARSE_ERRORS):
        return None
    cuts = sorted(
        {c for out in nfa.edges for ivs, _ in out for lo, hi in ivs for c in (lo, hi + 1)}
    )
    # Per node: (the alphabet symbols of the edge, its target).
    moves = [[(_symbols(ivs, cuts), dst) for ivs, dst in out] for out in nfa.edges]
    start = _closure(nfa, {0})
    seen = {start}
    todo = [start]
    while todo and len(seen) < cap:
        state = todo.pop()
        out: dict[int, set[int]] = {}
        for node in state:
            for syms, dst in moves[node]:
                for s in syms:
                    out.setdefault(s, set()).add(dst)
        for targets in out.values():
            nxt = _closure(nfa, targets)
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return min(len(seen), cap)


def _closure(nfa: _Nfa, nodes: set[int]) -> frozenset[int]:
    todo, out = list(nodes), set(nodes)
    while todo:
        for nxt in nfa.eps[todo.pop()]:
            if nxt not in out:
                out.add(nxt)
                todo.append(nxt)
    return frozenset(out)


def _symbols(ivs: tuple[tuple[int, int], ...], cuts: list[int]) -> list[int]:
    """The alphabet symbols (elementary intervals between consecutive cuts) inside `ivs`:
    symbol i is [cuts[i], cuts[i + 1])."""
    out: list[int] = []
    for lo, hi in ivs:
        out.extend(range(bisect_right(cuts, lo) - 1, bisect_right(cuts, hi)))
    return out


def _intervals(op: Any, av: Any) -> tuple[tuple[int, int], ...]:
    """The code points an atom matches, as sorted disjoint closed intervals."""
    if op is C.LITERAL:
        return ((av, av),)
    if op is C.NOT_LITERAL:
        return _complement([(av, av)])
    if op is C.ANY:
        return _complement([(10, 10)])
    ivs: list[tuple[int, int]] = []
    negate = False
    for kind, val in av:
        if kind is C.NEGATE:
            negate = True
        elif kind is C.LITERAL:
            ivs.append((val, val))
        elif kind is C.RANGE:
            ivs.append(val)
        elif kind is C.CATEGORY:
            if val in _NEGATED:
                ivs += _complement(_CATEGORIES[_NEGATED[val]])
            else:
                ivs += _CATEGORIES.get(val, [(0, _MAX_CHAR)])
        else:
            raise _TooBig
    merged = _merge(ivs)
    return _complement(list(merged)) if negate else merged


def _merge(ivs: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ivs):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _complement(ivs: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out, at = [], 0
    for lo, hi in _merge(ivs):
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    if at <= _MAX_CHAR:
        out.append((at, _MAX_CHAR))
    return tuple(out)
