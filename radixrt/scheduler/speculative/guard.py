"""DraftGuard: how many tokens a request may draft next, from its recent acceptance, so text
that drafts never predict (random or freely sampled text) costs little more than no
speculation at all.

The draft length grows by doubling while drafts are accepted whole and shrinks to one past the
accepted tokens on a rejection. After `MISSES_TO_PAUSE` verifications in a row that accept
nothing, drafting pauses for a number of steps; each miss right after a pause starts a pause
twice as long (up to `MAX_PAUSE`), and any accepted token ends the run. The length and the
pauses bound drafters that pay for every drafted token (a draft model) and draft trees; a
lookup's chains are cut by the step's allotment alone (drafter.trim). The acceptance rates,
one per kind of draft, set how deep a draft pays (speculation.py's plan).

Draft trees pay only when a branch past the first is accepted: after `TREE_MISSES` tree
verifications in a row that kept none, the request drafts chains for a while
(`FIRST_TREE_PAUSE` steps, twice as long after each further such run, up to `MAX_PAUSE`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from radixrt.scheduler.speculative.acceptance import Acceptance

MISSES_TO_PAUSE = 2  # verifications in a row with nothing accepted before a pause
FIRST_PAUSE = 2  # steps without drafting after the first such run
MAX_PAUSE = 64
TREE_MISSES = 4  # tree verifications in a row without a side branch kept before chains
FIRST_TREE_PAUSE = 8  # steps drafting chains after the first such run


@dataclass(slots=True)
class DraftGuard:
    """One request's draft budget (on `req.draft_guard`, made on its first plan)."""

    limit: int  # the configured most tokens per draft
    length: int = 0  # tokens the next draft may have (0 until first used: the limit)
    misses: int = 0  # verifications in a row that accepted nothing
    pause: int = 0  # the length of the last pause (0: none yet since an acceptance)
    wait: int = 0  # steps left before drafting again
    tree_misses: int = 0  # tree verifications in a row that kept no branch but the first
    tree_pause: int = 0  # the length of the last run of chains (0: none yet)
    tree_wait: int = 0  # steps left that draft chains, not trees
    # Its recent acceptance of untrusted and trusted drafts (acceptance.py), and which kind
    # the draft being verified is.
    rates: tuple[Acceptance, Acceptance] = field(
        default_factory=lambda: (Acceptance(), Acceptance())
    )
    trusted: bool = False

    def allowed(self) -> int:
        """Tokens this step may draft (0 while paused); each call during a pause is one of
        its steps."""
        if self.wait > 0:
            self.wait -= 1
            return 0
        if self.length <= 0:
            self.length = self.limit
        return self.length

    def trees_allowed(self) -> bool:
        """Whether this step may draft a tree (each call while chains are due is one step)."""
        if self.tree_wait > 0:
            self.tree_wait -= 1
            return False
        return True

    def record_tree(self, side_kept: bool) -> None:
        """After a tree verification: whether its accepted path left the first branch."""
        if side_kept:
            self.tree_misses, self.tree_pause = 0, 0
            return
        self.tree_misses += 1
        if self.tree_misses >= TREE_MISSES:
            self.tree_pause = (
                min(MAX_PAUSE, 2 * self.tree_pause) if self.tree_pause else FIRST_TREE_PAUSE
            )
            self.tree_wait, self.tree_misses = self.tree_pause, TREE_MISSES - 1

    def record(self, drafted: int, accepted: int) -> None:
        """Adapt after a verification of `drafted` tokens of which `accepted` were kept."""
        if drafted <= 0:
            return
        self.rates[self.trusted].record(drafted, accepted)
        if accepted >= drafted:
            self.length = min(self.limit, 2 * drafted)
        else:
            self.length = max(1, accepted + 1)
        if accepted > 0:
            self.misses, self.pause = 0, 0
            return
        self.misses += 1
        if self.misses >= MISSES_TO_PAUSE:
            self.pause = min(MAX_PAUSE, 2 * self.pause) if self.pause else FIRST_PAUSE
            # One more miss after the pause starts the next (longer) one.
            self.wait, self.misses = self.pause, MISSES_TO_PAUSE - 1
