"""Drafters: where speculative tokens come from. `LookupDrafter` is model-free: the prefix
cache's path after the request's whole sequence, else its own prompt and output (n-gram
lookup); `NoDrafter` is the "off" null object."""

from __future__ import annotations

from abc import ABC, abstractmethod

from radixrt.cache.tree_view import TreeView
from radixrt.cache.tree_walk import continuation, continuations
from radixrt.core import Req
from radixrt.scheduler.speculative.keyed import KeyedIndex, TokenTexts
from radixrt.scheduler.speculative.ngram import NgramIndex
from radixrt.scheduler.speculative.tree import DraftTree, chain, merge

# A lookup draft whose source matched at least this many of the request's last tokens is
# trusted: its acceptance is counted apart from weaker matches' (a fresh long match is new
# evidence, as when extraction output reaches text it copies from the prompt).
TRUSTED_MATCH = 3
# Occurrences kept per n-gram of a constrained request's tokens: the chains its grammar may
# choose among (`alternatives`).
ALTERNATIVES = 4


def can_speculate(req: Req) -> bool:
    """Whether `req` may be speculated: any request without a grammar (its mask would have to
    follow the draft). Penalties, the stop-token ban before min_new_tokens, logprobs and
    sampling are each applied per verified row (rows.py); the rest decode one token a step."""
    p = req.sampling_params
    return req.grammar is None and p.regex is None and p.json_schema is None and p.ebnf is None


class BaseDrafter(ABC):
    """Proposes the tokens most likely to follow a request's fill_ids."""

    # Whether `trim` keeps more than the guard's length: such a drafter is asked for a
    # request's whole room, paused or not (a lookup costs no pass), and the step's allotment
    # alone cuts its drafts; others are asked for the guard's length.
    trusts_matches = False

    @abstractmethod
    def propose(self, req: Req, max_tokens: int) -> list[int]:
        """Up to `max_tokens` guessed tokens after req.fill_ids ([]: no guess)."""

    def propose_batch(self, reqs: list[Req], max_tokens: list[int]) -> list[list[int]]:
        """`propose` for each of a step's drafting requests (a drafter that runs a model
        drafts them together); each within its own budget (0: no guess)."""
        return [self.propose(r, n) if n > 0 else [] for r, n in zip(reqs, max_tokens)]

    def trusts(self, req: Req) -> bool:
        """`trusts_matches` for `req`: whether it is asked for its whole room (a prediction
        is, whatever the drafter behind it: prediction.py)."""
        return self.trusts_matches

    def trusted(self, req: Req) -> bool:
        """Whether this step's `propose` for `req` is a draft this drafter trusts past its
        guard's length (its acceptance is also counted apart: acceptance.py)."""
        return False

    def trim(self, req: Req, draft: list[int], cap: int) -> list[int]:
        """`draft` (this step's `propose` for `req`) cut to the `cap` tokens its draft guard
        allows, unless the drafter trusts it."""
        return draft if self.trusted(req) else draft[:cap]

    def propose_tree(self, req: Req, max_depth: int, max_nodes: int,
                     max_branches: int) -> DraftTree:  # fmt: skip
        """A draft tree of at most `max_nodes` nodes, `max_branches` leaves and `max_depth`
        levels; a drafter without alternatives proposes its chain."""
        return chain(self.propose(req, min(max_depth, max_nodes)))

    def alternatives(self, req: Req, max_tokens: int, count: int) -> list[list[int]]:
        """Up to `count` other chains after req.fill_ids besides this step's `propose` (a
        constrained request takes the one its grammar allows furthest); none by default."""
        return []


class NoDrafter(BaseDrafter):
    """Speculation off: never guesses."""

    def propose(self, req: Req, max_tokens: int) -> list[int]:
        return []


class LookupDrafter(BaseDrafter):
    """Drafts by lookup, in the request's own namespace only (the cache walk is keyed by its
    extra_key, so another tenant's paths are never read).

    First the prefix cache: when all of the request's tokens are a cached path (the same
    question asked and answered before), the cached tokens after it. Then its own tokens:
    what followed the latest earlier occurrence of its last n tokens (n = ngram_max .. 1);
    the index lives on `req.draft_state`. With token `texts`, where that match is shorter
    than TRUSTED_MATCH: what follows the same key words in its prompt, if they occur there
    (keyed.py; the start of a value copied from the prompt)."""

    trusts_matches = True

    def __init__(self, cache: TreeView, ngram_max: int, branches: int = 1,
                 texts: TokenTexts | None = None) -> None:  # fmt: skip
        self.cache = cache
        self.ngram_max = ngram_max
        self.branches = branches  # the most leaves of a draft tree (1: chains only)
        self.texts = texts

    def propose(self, req: Req, max_tokens: int) -> list[int]:
        tokens = req.fill_ids
        found = continuation(self.cache, tokens, req.extra_key, max_tokens)
        own = self._own(req)
        if found:
            own.matched = len(tokens)  # the whole sequence matched a cached path
            return found
        draft = own.draft(tokens, max_tokens)
        if own.matched < TRUSTED_MATCH and own.keyed is not None:
            return own.keyed.draft(tokens, max_tokens) or draft
        return draft

    def trusted(self, req: Req) -> bool:
        """When its source matched TRUSTED_MATCH or more of the last tokens (its acceptance
        is counted apart from weak matches')."""
        state = req.draft_state
        return isinstance(state, NgramIndex) and state.matched >= TRUSTED_MATCH

    def trim(self, req: Req, draft: list[int], cap: int) -> list[int]:
        """The whole draft, a weak match's too: a lookup costs no pass, so how much of it a
        step verifies is the allotment's choice alone (DraftDepth.allot: each kind's recent
        acceptance against the measured pass times). The guard's shortened lengths and pauses
        bound drafters that pay for every drafted token, and trees."""
        return draft

    def propose_tree(self, req: Req, max_depth: int, max_nodes: int,
                     max_branches: int) -> DraftTree:  # fmt: skip
        """The cache's continuations (the most recently used first), then the request's own:
        after the latest earlier occurrence of its suffix, then after earlier ones that went
        on differently; merged into one tree within the budgets."""
        tokens = req.fill_ids
        count = min(max_branches, self.branches)
        found = continuations(self.cache, tokens, req.extra_key, max_depth, count)
        own = self._own(req)
        cands = found + [own.draft(tokens, max_depth)]
        if len(cands) < count + 1:
            cands += own.alternatives(tokens, max_depth, count)
        return merge([c for c in cands if c], max_nodes, count)

    def alternatives(self, req: Req, max_tokens: int, count: int) -> list[list[int]]:
        """What followed the latest earlier occurrence of the request's suffix and other
        occurrences of it (a constrained request keeps ALTERNATIVES of each n-gram): where
        its grammar cuts the proposed draft short, the same key in an earlier record of the
        prompt often goes on as the grammar allows."""
        tokens = req.fill_ids
        own = self._own(req)
        matched = own.matched  # this step's `propose` match (`trusted` reads it) stays
        cands = [own.draft(tokens, max_tokens)] + own.alternatives(tokens, max_tokens, count)
        own.matched = matched
        return [c for c in cands if c]

    def _own(self, req: Req) -> NgramIndex:
        """The index of `req`'s own tokens (made on first use, on req.draft_state)."""
        if not isinstance(req.draft_state, NgramIndex):
            keep = max(self.branches, ALTERNATIVES if req.grammar is not None else 1)
            req.draft_state = NgramIndex(self.ngram_max, keep)
            if self.texts is not None:
                req.draft_state.keyed = KeyedIndex(self.texts, req.input_ids)
        return req.draft_state
