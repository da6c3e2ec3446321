"""Stop regexes (SGLang's `stop_regex`): a request stops once its output contains a match.

Each regex becomes a Thompson NFA (Python's own parser reads it); the text streams through all
live threads at once, each thread remembering where its match began, so a character costs
O(NFA size) and nothing ever backtracks: a regex of bounded size cannot be made slow by the
text. Refused (ValueError, the server's 400): a pattern Python cannot parse, one that matches
the empty string (it would stop at once), constructs a stream cannot decide or that change
the matched language (anchors, word boundaries, lookarounds, backreferences, atomic groups,
possessive repeats), and NFAs over MAX_NFA_NODES nodes (`a{1000}` counts a node a repeat).
"""

from __future__ import annotations

import functools
import re
import re._constants as C  # type: ignore[import-not-found]
import re._parser as sre_parse  # type: ignore[import-not-found]
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from radixrt.core.text.stop_matcher import StopMatch

MAX_NFA_NODES = 1024
_CACHE_SIZE = 64
_PARSE_ERRORS = (C.error, RecursionError, OverflowError, ValueError, TypeError)
Pred = Callable[[str], bool]
_CATEGORIES: dict[Any, Pred] = {
    C.CATEGORY_DIGIT: str.isdecimal,
    C.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdecimal(),
    C.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
    C.CATEGORY_NOT_WORD: lambda ch: not (ch.isalnum() or ch == "_"),
    C.CATEGORY_SPACE: str.isspace,
    C.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
}
_ASCII_CATEGORIES: dict[Any, Pred] = {
    C.CATEGORY_DIGIT: lambda ch: "0" <= ch <= "9",
    C.CATEGORY_NOT_DIGIT: lambda ch: not "0" <= ch <= "9",
    C.CATEGORY_WORD: lambda ch: ch.isascii() and (ch.isalnum() or ch == "_"),
    C.CATEGORY_NOT_WORD: lambda ch: not (ch.isascii() and (ch.isalnum() or ch == "_")),
    C.CATEGORY_SPACE: lambda ch: ch in " \t\n\r\f\v",
    C.CATEGORY_NOT_SPACE: lambda ch: ch not in " \t\n\r\f\v",
}


@dataclass(frozen=True, slots=True)
class _Nfa:
    """Node 0 starts; `accept` ends. `moves[v]`: (predicate, target) per character edge;
    `closure[v]`: the nodes epsilon-reachable from v (itself included). Never mutated."""

    moves: list[list[tuple[Pred, int]]]
    closure: list[tuple[int, ...]]
    accept: int


class _Builder:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.eps: list[list[int]] = []
        self.moves: list[list[tuple[Pred, int]]] = []

    def node(self) -> int:
        if len(self.eps) >= MAX_NFA_NODES:
            raise ValueError(
                f"stop_regex {self.pattern!r} is too complex: over {MAX_NFA_NODES} states"
            )
        self.eps.append([])
        self.moves.append([])
        return len(self.eps) - 1

    def refuse(self, what: str) -> ValueError:
        return ValueError(f"stop_regex {self.pattern!r}: {what} are not supported")

    def seq(self, items: Any, src: int, flags: int) -> int:
        for op, av in items:
            src = self.item(op, av, src, flags)
        return src

    def item(self, op: Any, av: Any, src: int, flags: int) -> int:
        if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
            dst = self.node()
            self.moves[src].append((self.pred(op, av, flags), dst))
            return dst
        if op is C.SUBPATTERN:
            _, add, drop, body = av
            return self.seq(body, src, (flags | add) & ~drop)
        if op is C.BRANCH:
            dst = self.node()
            for alt in av[1]:
                self.eps[self.seq(alt, src, flags)].append(dst)
            return dst
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):  # lazy or greedy: the same matches exist
            lo, hi, body = av
            for _ in range(lo):
                src = self.seq(body, src, flags)
            if hi == C.MAXREPEAT:
                loop = self.node()
                self.eps[src].append(loop)
                self.eps[self.seq(body, loop, flags)].append(loop)
                return loop
            end = self.node()
            for _ in range(hi - lo):
                self.eps[src].append(end)
                src = self.seq(body, src, flags)
            self.eps[src].append(end)
            return end
        if op is C.AT:
            raise self.refuse("anchors and word boundaries")
        if op in (C.ASSERT, C.ASSERT_NOT):
            raise self.refuse("lookarounds")
        if op in (C.GROUPREF, C.GROUPREF_EXISTS):
            raise self.refuse("backreferences")
        raise self.refuse(f"{str(op).lower()} constructs")

    def pred(self, op: Any, av: Any, flags: int) -> Pred:
        fold = bool(flags & re.IGNORECASE)
        if op is C.LITERAL:
            return _char_pred(chr(av), fold)
        if op is C.NOT_LITERAL:
            same = _char_pred(chr(av), fold)
            return lambda ch: not same(ch)
        if op is C.ANY:
            return (lambda ch: True) if flags & re.DOTALL else (lambda ch: ch != "\n")
        parts: list[Pred] = []
        negate = False
        cats = _ASCII_CATEGORIES if flags & re.ASCII else _CATEGORIES
        for kind, val in av:
            if kind is C.NEGATE:
                negate = True
            elif kind is C.LITERAL:
                parts.append(_char_pred(chr(val), fold))
            elif kind is C.RANGE:
                parts.append(_range_pred(chr(val[0]), chr(val[1]), fold))
            elif kind is C.CATEGORY and val in cats:
                parts.append(cats[val])
            else:
                raise self.refuse(f"{str(kind).lower()} in a character class")
        if negate:
            return lambda ch: not any(p(ch) for p in parts)
        return lambda ch: any(p(ch) for p in parts)


def _char_pred(c: str, fold: bool) -> Pred:
    if not fold:
        return lambda ch: ch == c
    low, up = c.lower(), c.upper()
    return lambda ch: ch == c or ch.lower() == low or ch.upper() == up


def _range_pred(lo: str, hi: str, fold: bool) -> Pred:
    if not fold:
        return lambda ch: lo <= ch <= hi
    return lambda ch: lo <= ch <= hi or lo <= ch.lower() <= hi or lo <= ch.upper() <= hi


@functools.lru_cache(maxsize=_CACHE_SIZE)
def compile_stop_regex(pattern: str) -> _Nfa:
    """The NFA of `pattern`; ValueError (naming the pattern) when it is refused."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("a stop_regex must be a non-empty string")
    try:
        parsed = sre_parse.parse(pattern)
    except _PARSE_ERRORS as e:
        raise ValueError(f"stop_regex {pattern!r} is not a valid regex: {e}") from None
    b = _Builder(pattern)
    try:
        accept = b.seq(parsed, b.node(), parsed.state.flags)
    except RecursionError:
        raise ValueError(f"stop_regex {pattern!r} is too complex: nested too deep") from None
    closure = [_closure(b.eps, v) for v in range(len(b.eps))]
    if accept in closure[0]:
        raise ValueError(f"stop_regex {pattern!r} matches the empty string")
    return _Nfa(b.moves, closure, accept)


def stop_regex_error(pattern: str) -> str | None:
    """Why `pattern` cannot be a stop regex, or None."""
    try:
        compile_stop_regex(pattern)
    except ValueError as e:
        return str(e)
    return None


def _closure(eps: list[list[int]], start: int) -> tuple[int, ...]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in eps[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return tuple(sorted(seen))


class RegexStopMatcher:
    """StopMatcher's interface over stop regexes: `feed` text in chunks of any size; `match`
    is the first match (the one that ends first; among those, the longest), its `stop` the
    matched text; `hold_len` is the text since the start of the oldest live thread (text that
    may still turn into a match), 0 once matched."""

    __slots__ = ("_nfas", "_live", "_text", "_text_start", "fed_len", "match")

    def __init__(self, patterns: list[str]) -> None:
        self._nfas = [compile_stop_regex(p) for p in patterns]
        self._live: list[dict[int, int]] = [{} for _ in self._nfas]  # node -> earliest start
        self._text = ""  # the fed text from `_text_start` on (what a match may still cover)
        self._text_start = 0
        self.fed_len = 0
        self.match: StopMatch | None = None

    @property
    def hold_len(self) -> int:
        if self.match is not None:
            return 0
        return self.fed_len - self._oldest()

    def _oldest(self) -> int:
        return min((s for live in self._live for s in live.values()), default=self.fed_len)

    def feed(self, text: str) -> StopMatch | None:
        if self.match is not None or not self._nfas:
            self.fed_len += len(text)
            return self.match
        self._text += text
        for i, ch in enumerate(text):
            pos = self.fed_len + i
            best: tuple[int, int] | None = None  # (start, end) of the first match
            for k, nfa in enumerate(self._nfas):
                live = self._step(nfa, self._live[k], ch, pos)
                self._live[k] = live
                start = live.get(nfa.accept)
                if start is not None and (best is None or start < best[0]):
                    best = (start, pos + 1)
            if best is not None:
                at = self._text_start
                self.match = StopMatch(best[0], self._text[best[0] - at : best[1] - at])
                break
        self.fed_len += len(text)
        if self.match is None:  # drop the text no live thread can still cover
            oldest = self._oldest()
            self._text = self._text[oldest - self._text_start :]
            self._text_start = oldest
        return self.match

    @staticmethod
    def _step(nfa: _Nfa, live: dict[int, int], ch: str, pos: int) -> dict[int, int]:
        """The threads after `ch` (at offset `pos`), a new one starting there included."""
        threads = dict(live)
        for v in nfa.closure[0]:
            threads.setdefault(v, pos)
        out: dict[int, int] = {}
        for node, start in threads.items():
            for pred, dst in nfa.moves[node]:
                if pred(ch):
                    for v in nfa.closure[dst]:
                        if start < out.get(v, pos + 1):
                            out[v] = start
        return {v: s for v, s in out.items() if nfa.moves[v] or v == nfa.accept}
