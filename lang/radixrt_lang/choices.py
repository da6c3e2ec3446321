"""How `select` picks a choice from the logprobs of each choice's tokens after the prompt.

Each method sees, per choice, the logprobs of that choice's tokens (conditioned on the prompt
and the choice's earlier tokens) and returns the index of the winner; ties go to the earliest
choice. Pure Python, no backend: the scoring requests live in `lang/scoring.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChoiceResult:
    """The decision and everything it was based on (stored in the select's meta info)."""

    index: int
    decision: str
    method: str
    normalized_prompt_logprobs: list[float]  # mean token logprob per choice
    input_token_logprobs: list[list[float]]  # per choice, per token
    unconditional_token_logprobs: list[list[float]] | None = None


class BaseChoiceMethod(ABC):
    """Contract: `pick` is pure, takes one non-empty logprob list per choice, returns an index."""

    name: str = ""
    requires_unconditional_logprobs: bool = False  # also score each choice without the prompt

    @abstractmethod
    def pick(self, logprobs: list[list[float]], unconditional: list[list[float]] | None) -> int:
        """Index of the chosen choice."""

    def __call__(
        self,
        choices: list[str],
        logprobs: list[list[float]],
        unconditional: list[list[float]] | None = None,
    ) -> ChoiceResult:
        if len(choices) != len(logprobs) or not all(logprobs):
            raise ValueError("need one non-empty list of token logprobs per choice")
        if self.requires_unconditional_logprobs and unconditional is None:
            raise ValueError(f"{self.name} needs the unconditional logprobs")
        idx = self.pick(logprobs, unconditional)
        return ChoiceResult(
            idx, choices[idx], self.name, [_mean(lp) for lp in logprobs], logprobs, unconditional
        )

    def __repr__(self) -> str:
        return f"<choices method {self.name}>"


class TokenLengthNormalized(BaseChoiceMethod):
    """The highest mean token logprob (the default): long choices are not penalized."""

    name = "token_length_normalized"

    def pick(self, logprobs: list[list[float]], unconditional: list[list[float]] | None) -> int:
        return _argmax([_mean(lp) for lp in logprobs])


class GreedyTokenSelection(BaseChoiceMethod):
    """Decide token by token: at each position keep only the choices whose token has the
    highest logprob there; a choice that has run out of tokens counts its mean logprob."""

    name = "greedy_token_selection"

    def pick(self, logprobs: list[list[float]], unconditional: list[list[float]] | None) -> int:
        remaining = list(range(len(logprobs)))
        for pos in range(max(len(lp) for lp in logprobs)):
            at = {
                i: logprobs[i][pos] if pos < len(logprobs[i]) else _mean(logprobs[i])
                for i in remaining
            }
            best = max(at.values())
            remaining = [i for i in remaining if at[i] == best]
            if len(remaining) == 1:
                break
        return remaining[0]


class UnconditionalLikelihoodNormalized(BaseChoiceMethod):
    """The highest mean of (logprob given the prompt - logprob without it), per token: favours
    choices the prompt makes likelier, not choices that are likely anyway. A choice's first
    token has no unconditional logprob (None from the backend); it counts as 0."""

    name = "unconditional_likelihood_normalized"
    requires_unconditional_logprobs = True

    def pick(self, logprobs: list[list[float]], unconditional: list[list[float]] | None) -> int:
        assert unconditional is not None
        scores = [
            _mean([c - u for c, u in zip(cond, unc, strict=True)])
            for cond, unc in zip(logprobs, unconditional, strict=True)
        ]
        return _argmax(scores)


token_length_normalized = TokenLengthNormalized()
greedy_token_selection = GreedyTokenSelection()
unconditional_likelihood_normalized = UnconditionalLikelihoodNormalized()


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _argmax(xs: list[float]) -> int:
    return max(range(len(xs)), key=lambda i: (xs[i], -i))
