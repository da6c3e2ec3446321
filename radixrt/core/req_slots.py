"""Req's extension slots: what the core sees of the state that higher floors hang on a request.

Each owner's class satisfies its Protocol structurally; a reader on the owner's floor that needs
more than the Protocol narrows the slot to its own class (isinstance) where it reads it.
"""

from __future__ import annotations

from typing import Protocol


class PrefixNode(Protocol):
    """`Req.last_node`: the prefix cache's node at the end of a running request's match
    (cache/tree_node.py: TreeNode), locked by the request while it holds it."""

    @property
    def key(self) -> list[int]: ...

    @property
    def lock_ref(self) -> int: ...


class ConstrainedState(Protocol):
    """`Req.grammar`: a constrained request's grammar state (scheduler/grammar_state.py:
    GrammarState); the masks it builds stay with the owner."""

    def accept(self, token_id: int) -> bool:
        """Advance past `token_id`; False if the grammar does not allow it."""
        ...

    def forced_token(self, budget: int | None = None) -> int | None:
        """The one token the grammar allows next, if exactly one."""
        ...

    @property
    def constrains(self) -> bool:
        """Whether a grammar shapes the output (else only a thinking budget bounds it)."""
        ...


class StopScan(Protocol):
    """`Req.stop_state`: a request's stop-string scan (scheduler/stop_check.py: StopState),
    made when its stop strings are first checked; it follows `output_ids`."""

    def scan(self, output_ids: list[int]) -> str | None:
        """The stop string or regex match that the output's new text completes, if any."""
        ...


class DraftIndex(Protocol):
    """`Req.draft_state`: the drafter's per-request index (scheduler/speculative/ngram.py:
    NgramIndex)."""

    def draft(self, tokens: list[int], max_tokens: int) -> list[int]:
        """Up to `max_tokens` tokens proposed to follow `tokens`."""
        ...


class DraftBudget(Protocol):
    """`Req.draft_guard`: how many tokens the request may draft next
    (scheduler/speculative/guard.py: DraftGuard)."""

    def allowed(self) -> int:
        """Tokens the next draft may have (0: not drafting this step)."""
        ...

    def record(self, drafted: int, accepted: int) -> None:
        """Account one verification: `drafted` tokens, of which `accepted` were kept."""
        ...

    def trees_allowed(self) -> bool:
        """Whether this step may draft a tree rather than a chain."""
        ...

    def record_tree(self, side_kept: bool) -> None:
        """Account one tree verification: whether a branch past the first was kept."""
        ...


class RowGenerator(Protocol):
    """`Req.generator`: a seeded request's random number generator (a torch.Generator made by
    executor/draws.py on first use); the core never draws from it."""

    def manual_seed(self, seed: int) -> object: ...

    def initial_seed(self) -> int: ...
