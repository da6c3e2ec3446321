"""A reasoning model's output under a grammar or a thinking budget: free reasoning first,
between a start token and an end token (`<think>`, `</think>`: one token each), then the
grammar from the token after the end (or free text, with no grammar). The gate is a matcher
wrapping the grammar's own (`inner`, None: free text), so the scheduler's masks, jump-forward,
length budget and draft walks treat it as any other.

Phases of one output:
- "open": the output may open its reasoning with the start token (a Qwen3 output that writes
  `<think>` first) or begin its answer at once: the inner mask and the start token;
- "reasoning": any token, the end token included; stop tokens only where no grammar follows
  (an answer the grammar shapes must come). The end token alone once the thinking budget's
  tokens are written, or where the output's token budget leaves room only for the end and the
  grammar's shortest output (an inner matcher that bounds lengths): the answer always fits;
- "answer": the inner matcher's masks.

Reasoning tokens (the ones between start and end, neither counted) count toward the thinking
budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

from radixrt.grammar.base import UNREACHABLE, BaseGrammarMatcher, StateHistory, mask_bit

if TYPE_CHECKING:
    import torch

OPEN, REASONING, ANSWER = "open", "reasoning", "answer"


class ReasoningGate(BaseGrammarMatcher):
    """`inner`: the answer's matcher (fresh, at its start) or None for free text; `start_id`:
    the token that opens the reasoning (None: the output starts inside it, the prompt opened
    it); `end_id`: the token that closes it; `thinking_budget`: the most reasoning tokens
    (None: no limit); `stop_ids`: the model's stop tokens."""

    def __init__(
        self,
        inner: BaseGrammarMatcher | None,
        end_id: int,
        start_id: int | None = None,
        thinking_budget: int | None = None,
        stop_ids: tuple[int, ...] = (),
    ) -> None:
        self.inner = inner
        self.end_id = end_id
        self.start_id = start_id
        self.thinking_budget = thinking_budget
        self.stop_ids = tuple(stop_ids)
        self.bounds_length = inner is not None and inner.bounds_length
        self.can_rollback = inner is None or inner.can_rollback
        self.constrains = inner is not None
        self.phase = OPEN if start_id is not None else REASONING
        self.thought = 0  # reasoning tokens accepted
        # Before each accepted token: (phase, thought, whether the inner matcher took it).
        self._history: StateHistory[tuple[str, int, bool]] = StateHistory()

    def fill_mask(self, bitmask: torch.Tensor, row: int, budget: int | None = None) -> None:
        if self.phase == REASONING:
            if not self._may_reason(budget):
                bitmask[row].zero_()
                _set(bitmask, row, self.end_id, True)
                return
            bitmask[row].fill_(-1)
            if self.inner is not None:  # the grammar's answer must come
                for t in self.stop_ids:
                    _set(bitmask, row, t, False)
            return
        if self.inner is None:
            bitmask[row].fill_(-1)
        else:
            self.inner.fill_mask(bitmask, row, budget)
        if self.phase == OPEN:  # the answer's first token, or the start if it may reason
            _set(bitmask, row, self.start_id, self._may_reason(budget))

    def _may_reason(self, budget: int | None) -> bool:
        """Whether one more reasoning token (or the start token) may be written with `budget`
        tokens left, this one included: the thinking budget is not spent, and the end token
        and the answer's shortest output still fit after it."""
        if self.thinking_budget is not None and self.thought >= self.thinking_budget:
            return False
        if budget is None or not self.bounds_length:
            return True
        assert self.inner is not None  # bounds_length
        need = self.inner.min_tokens()
        if need is None or need >= UNREACHABLE:
            return True
        return budget - 1 >= 1 + need

    def is_accepting(self) -> bool:
        return self.phase == ANSWER and self.inner is not None and self.inner.is_accepting()

    def min_tokens(self) -> int | None:
        if self.inner is None:
            return None
        need = self.inner.min_tokens()
        if need is None or self.phase != REASONING:
            return need
        return min(UNREACHABLE, 1 + need)

    def stuck(self) -> bool:
        return self.phase == ANSWER and self.inner is not None and self.inner.stuck()

    def accept(self, token_id: int) -> bool:
        before = (self.phase, self.thought, False)
        if self.phase == REASONING:
            if token_id == self.end_id:
                self.phase = ANSWER
            else:
                self.thought += 1
        elif self.phase == OPEN and token_id == self.start_id:
            self.phase = REASONING
        else:
            self.phase = ANSWER
            if self.inner is not None:
                if not self.inner.accept(token_id):
                    return False
                before = (before[0], before[1], True)
        self._history.push(before)
        return True

    def rollback(self, num_tokens: int) -> None:
        if num_tokens <= 0:
            return
        took = 0
        for _ in range(num_tokens):
            phase, thought, inner = self._history.pop(1)
            took += inner
        self.phase, self.thought = phase, thought
        if took and self.inner is not None:
            self.inner.rollback(took)


def _set(bitmask: torch.Tensor, row: int, token: int | None, allowed: bool) -> None:
    """Allow (or refuse) `token` in `bitmask[row]`; None: no token, nothing changes."""
    if token is not None:
        word, bit = divmod(token, 32)
        if allowed:
            bitmask[row, word] |= mask_bit(bit)
        else:
            bitmask[row, word] &= ~mask_bit(bit)
