"""A regex whose top level is a choice `B1|B2|...|Bn`, matched as the union of one token
automaton per branch: each branch small enough for outlines even when the whole is not (a
forced call over many tools: one branch per tool). The branches run side by side; a token
is allowed when some live branch allows it, and a branch leaves the union at the first token
it refuses. Masks are the union of the branches' budget masks, so the length bound holds:
every allowed token keeps some branch finishable in time. Branch automata are shared with
any other spec of the same regex (a named call compiles the branch of its tool)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from radixrt.grammar.base import UNREACHABLE, BaseGrammarMatcher, StateHistory, mask_bit
from radixrt.grammar.token_automaton import TokenAutomaton


def split_alternatives(regex: str) -> list[str]:
    """The top-level alternatives of `regex` (itself alone when it has none): `|` outside
    groups and character classes, escapes skipped. Their union is the regex's language."""
    out: list[str] = []
    depth, start, i, n = 0, 0, 0, len(regex)
    while i < n:
        c = regex[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _class_end(regex, i)
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            out.append(regex[start:i])
            start = i + 1
        i += 1
    out.append(regex[start:])
    return out


def _class_end(regex: str, i: int) -> int:
    """The index of the `]` that closes the class opened at `i` (a `]` first, or after `^`,
    is a literal); the end of the text if none does."""
    j = i + 1
    if j < len(regex) and regex[j] == "^":
        j += 1
    if j < len(regex) and regex[j] == "]":
        j += 1
    while j < len(regex) and regex[j] != "]":
        j += 2 if regex[j] == "\\" else 1
    return j


@dataclass(frozen=True, slots=True)
class UnionGrammar:
    """A compiled union: one future automaton per branch (shared, cached by regex) and, when
    some branch was not ready in time or failed, `fallback`, the whole regex compiled by a
    backend without a length bound. A matcher is made from the branches once every one of
    them is ready (later requests of the same spec get the bound), else from the fallback."""

    branches: tuple[Future[TokenAutomaton], ...]
    fallback: Any = None

    def automata(self) -> list[TokenAutomaton] | None:
        """Every branch's automaton, or None while one is missing (pending or failed)."""
        if not all(f.done() and f.exception() is None for f in self.branches):
            return None
        return [f.result() for f in self.branches]


class UnionMatcher(BaseGrammarMatcher):
    """Positions in several automata at once; the output is complete when one is."""

    bounds_length = True

    def __init__(self, automata: list[TokenAutomaton], eos_token_ids: list[int]) -> None:
        self._live = [(a, a.start) for a in automata]  # the branches still matching
        self._eos = eos_token_ids
        self._before: StateHistory[list[tuple[TokenAutomaton, int]]] = StateHistory()

    def fill_mask(self, bitmask: torch.Tensor, row: int, budget: int | None = None) -> None:
        dst = bitmask[row]
        if not self._live:
            dst.zero_()
            return
        words = self._live[0][0].mask(self._live[0][1], budget).copy()
        for automaton, state in self._live[1:]:
            np.bitwise_or(words, automaton.mask(state, budget), out=words)
        dst.copy_(torch.from_numpy(words))
        if self.is_accepting():
            for t in self._eos:
                dst[t // 32] |= mask_bit(t % 32)

    def accept(self, token_id: int) -> bool:
        live = []
        for automaton, state in self._live:
            nxt = automaton.next_state(state, token_id)
            if nxt is not None:
                live.append((automaton, nxt))
        if live:
            self._before.push(self._live)
        self._live = live
        return bool(live)

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > 0:
            self._live = self._before.pop(num_tokens)

    def is_accepting(self) -> bool:
        return any(bool(a.accepting[s]) for a, s in self._live)

    def min_tokens(self) -> int:
        return min((a.distance(s) for a, s in self._live), default=UNREACHABLE)
