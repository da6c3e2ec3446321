"""A constrained request's grammar state in the scheduler: its matcher, the next-token mask
(computed once per position), forced tokens, and the masks along a speculative draft."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from radixrt.grammar.base import BaseGrammarMatcher


@dataclass(slots=True)
class GrammarStats:
    """Counters since start; mask time covers every mask computed (sampling and forcing)."""

    forced_tokens: int = 0
    mask_time_s: float = 0.0
    num_masks: int = 0
    mask_steps: int = 0  # decode/extend steps that applied a mask to the batch


class GrammarState:
    """A request's matcher and its next-token mask (computed once per position)."""

    def __init__(self, matcher: BaseGrammarMatcher, num_words: int, stats: GrammarStats) -> None:
        self.matcher = matcher
        self._num_words = num_words
        self._stats = stats
        self._mask: torch.Tensor | None = None  # (1, num_words) int32 CPU; None: stale

    @property
    def constrains(self) -> bool:
        """Whether a grammar shapes the output (not only a reasoning gate's thinking budget
        over free text)."""
        return self.matcher.constrains

    def mask(self, budget: int | None = None) -> torch.Tensor:
        """(num_words,) int32 bitmask of the tokens allowed next, with `budget` tokens left
        for the output (this one included; None: no limit). The budget must be the same for
        every call at one position (it is a function of the position)."""
        if self._mask is None:
            t0 = time.perf_counter()
            self._mask = torch.empty(1, self._num_words, dtype=torch.int32)
            self.matcher.fill_mask(self._mask, 0, budget)
            self._stats.mask_time_s += time.perf_counter() - t0
            self._stats.num_masks += 1
        return self._mask[0]

    def accept(self, token_id: int) -> bool:
        self._mask = None
        return self.matcher.accept(token_id)

    def along(self, draft: list[int], budget: int | None, stop_ids: set[int]) -> torch.Tensor:
        """The masks a decode step would use at each position of `draft` (its longest prefix
        the grammar allows, stop tokens excluded) and after it: (1 + n, num_words) int32,
        row j the mask after draft[:j] with budget - j tokens left. The matcher ends where it
        began (walked forward, then rolled back)."""
        rows = [self.mask(budget).clone()]
        walked = 0
        t0 = time.perf_counter()
        try:
            for token in draft:
                word, bit = divmod(token, 32)
                if token in stop_ids or not (int(rows[-1][word]) >> bit) & 1:
                    break
                if not self.matcher.accept(token):  # the mask allowed it: not expected
                    raise RuntimeError(f"the grammar refused draft token {token} its mask allows")
                walked += 1
                row = torch.empty(1, self._num_words, dtype=torch.int32)
                self.matcher.fill_mask(row, 0, None if budget is None else budget - walked)
                rows.append(row[0])
        finally:
            self.matcher.rollback(walked)
            self._stats.mask_time_s += time.perf_counter() - t0
            self._stats.num_masks += walked
        return torch.stack(rows)

    def forced_token(self, budget: int | None = None) -> int | None:
        """The only token allowed next, or None when there are several (or none)."""
        row = self.mask(budget)
        words = row.nonzero()
        if words.numel() != 1:
            return None
        idx = int(words[0, 0])
        w = int(row[idx]) & 0xFFFFFFFF
        return idx * 32 + w.bit_length() - 1 if w & (w - 1) == 0 else None
