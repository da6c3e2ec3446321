"""NgramIndex: a request's own tokens indexed by their suffix n-grams, so the tokens that
followed the latest earlier occurrence of its last n tokens are found in O(n) per step."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from radixrt.scheduler.speculative.keyed import KeyedIndex


class NgramIndex:
    """For n = 1..max_n: each n-gram of the sequence seen so far -> where the tokens after
    its latest occurrence start. Only occurrences with at least one token after them are
    indexed, so a lookup of the sequence's own last n tokens finds an earlier one.

    The sequence only grows (prompt + output; a retracted request keeps its output), so
    `update` indexes just the new positions."""

    def __init__(self, max_n: int, keep: int = 1) -> None:
        self.max_n = max_n
        self.keep = keep  # occurrences kept per n-gram, the latest first (drafts: one)
        self._after: list[dict[tuple[int, ...], int]] = [{} for _ in range(max_n)]
        # With keep > 1: the earlier occurrences after the latest, each one's start.
        self._earlier: list[dict[tuple[int, ...], list[int]]] = [{} for _ in range(max_n)]
        self._indexed = 0  # n-grams ending before this position are indexed
        self.matched = 0  # the length of the suffix the last `draft` matched (0: none)
        self.keyed: KeyedIndex | None = None  # the prompt's key index, if the drafter keys drafts

    def update(self, tokens: list[int]) -> None:
        """Index the n-grams ending at positions _indexed .. len(tokens) - 2."""
        for end in range(self._indexed, len(tokens) - 1):
            for n in range(1, min(self.max_n, end + 1) + 1):
                gram = tuple(tokens[end + 1 - n : end + 1])
                if self.keep > 1 and gram in self._after[n - 1]:
                    older = self._earlier[n - 1].setdefault(gram, [])
                    older.insert(0, self._after[n - 1][gram])
                    del older[self.keep - 1 :]
                self._after[n - 1][gram] = end + 1
        self._indexed = max(self._indexed, len(tokens) - 1)

    def draft(self, tokens: list[int], max_tokens: int) -> list[int]:
        """Up to `max_tokens` tokens that followed the latest earlier occurrence of the
        longest suffix of `tokens` (max_n down to 1 tokens) seen before; [] when none was.
        A continuation that runs into the end of `tokens` (a repeating pattern shorter than
        the draft) is looked up again after the tokens drafted so far."""
        self.update(tokens)
        out: list[int] = []
        seq = tokens
        self.matched = 0
        while len(out) < max_tokens:
            n, more = self._lookup(seq, max_tokens - len(out))
            if not more:
                break
            self.matched = self.matched or n
            out += more
            seq = tokens + out
        return out

    def alternatives(self, tokens: list[int], max_tokens: int, count: int) -> list[list[int]]:
        """Up to `count` distinct continuations besides the latest occurrence's (call `draft`
        first: it indexes `tokens`): what followed earlier occurrences of the longest suffix,
        then of shorter ones, each up to `max_tokens` long, the latest first."""
        seen: set[tuple[int, ...]] = set()
        out: list[list[int]] = []
        for n in range(min(self.max_n, len(tokens) - 1), 0, -1):
            gram = tuple(tokens[-n:])
            latest = self._after[n - 1].get(gram)
            if latest is None:
                continue
            seen.add(tuple(tokens[latest : latest + max_tokens]))
            for start in self._earlier[n - 1].get(gram, []):
                cont = tokens[start : start + max_tokens]
                if cont and tuple(cont) not in seen:
                    seen.add(tuple(cont))
                    out.append(cont)
                    if len(out) >= count:
                        return out
        return out

    def _lookup(self, seq: list[int], max_tokens: int) -> tuple[int, list[int]]:
        """(n, what followed the latest earlier occurrence of the last n tokens), the longest
        such suffix first; (0, []) when none occurred."""
        for n in range(min(self.max_n, len(seq) - 1), 0, -1):
            start = self._after[n - 1].get(tuple(seq[-n:]))
            if start is not None:
                return n, seq[start : start + max_tokens]
        return 0, []
