"""Acceptance: how likely a request's next drafted token is to be kept, from its recent
verifications, and how deep a chain that likelihood pays for (StepCost gives the bar).

A verification of a chain of k drafted tokens that kept a of them is a + 1 trials of "the
next drafted token is kept" (a successes, then the miss) when a < k, and a trials when the
whole chain was kept. The rate is their ratio over recent verifications (counts decay by
`decay` per verification), shrunk toward a prior (the engine's rate) by `PRIOR_WEIGHT`
trials, so a request's first drafts follow what the engine has seen. A chain's i-th token is
then kept with probability rate ** i, and `paying_depth` is the longest chain whose every token
clears the bar.

Lookup drafts are counted in two classes, as `BaseDrafter.trusted` tells them apart: drafts
from a long match (trusted) are kept far more often than guesses from a short one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PRIOR_WEIGHT = 3.0  # trials the prior counts for in a request's rate
REQUEST_DECAY = 0.8  # a request's counts: about its last five verifications
ENGINE_DECAY = 0.98  # the engine's: about its last fifty


@dataclass(slots=True)
class Acceptance:
    """Decayed counts of kept drafted tokens (`hits`) among those tried (`trials`)."""

    hits: float = 0.0
    trials: float = 0.0
    decay: float = REQUEST_DECAY

    def record(self, drafted: int, accepted: int) -> None:
        """One verification of a `drafted`-token chain (a tree: its deepest branch) that
        kept `accepted`."""
        if drafted <= 0:
            return
        self.hits = self.hits * self.decay + accepted
        self.trials = self.trials * self.decay + accepted + (accepted < drafted)

    def rate(self, prior: float) -> float:
        """The probability the next drafted token is kept, shrunk toward `prior`."""
        return (self.hits + PRIOR_WEIGHT * prior) / (self.trials + PRIOR_WEIGHT)

    def plain_rate(self) -> float:
        return self.hits / self.trials if self.trials > 0 else 0.0


def engine_rates() -> tuple[Acceptance, Acceptance]:
    """The engine's (untrusted, trusted) rates before any verification: an even chance for a
    guess, four in five for a long match's draft."""
    return (Acceptance(1.0, 2.0, ENGINE_DECAY), Acceptance(4.0, 5.0, ENGINE_DECAY))


def paying_depth(rate: float, bar: float, most: int) -> int:
    """The longest chain (at most `most`) whose every token, the i-th kept with probability
    rate ** i, clears `bar`."""
    if rate >= 1.0 or bar <= 0.0:
        return most
    if rate <= 0.0 or rate < bar:
        return 0
    return min(most, int(math.log(bar) / math.log(rate) + 1e-9))
