"""Drafters: where speculative tokens come from. `LookupDrafter` is model-free: the prefix
cache's path after the request's whole sequence, else its own prompt and output (n-gram
lookup); `NoDrafter` is the "off" null object."""

from __future__ import annotations

from abc import ABC, abstractmethod

from radixrt.cache.tree_view import TreeView
from radixrt.cache.tree_walk import continuation
from radixrt.core import Req
from radixrt.scheduler.speculative.ngram import NgramIndex


def can_speculate(req: Req) -> bool:
    """Whether `req` may be speculated: any request without a grammar (its mask would have to
    follow the draft). Penalties, the stop-token ban before min_new_tokens, logprobs and
    sampling are each applied per verified row (rows.py); the rest decode one token a step."""
    p = req.sampling_params
    return req.grammar is None and p.regex is None and p.json_schema is None and p.ebnf is None


class BaseDrafter(ABC):
    """Proposes the tokens most likely to follow a request's fill_ids."""

    @abstractmethod
    def propose(self, req: Req, max_tokens: int) -> list[int]:
        """Up to `max_tokens` guessed tokens after req.fill_ids ([]: no guess)."""

    def propose_batch(self, reqs: list[Req], max_tokens: list[int]) -> list[list[int]]:
        """`propose` for each of a step's drafting requests (a drafter that runs a model
        drafts them together); each within its own budget (0: no guess)."""
        return [self.propose(r, n) if n > 0 else [] for r, n in zip(reqs, max_tokens)]


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
    the index lives on `req.draft_state`."""

    def __init__(self, cache: TreeView, ngram_max: int) -> None:
        self.cache = cache
        self.ngram_max = ngram_max

    def propose(self, req: Req, max_tokens: int) -> list[int]:
        tokens = req.fill_ids
        found = continuation(self.cache, tokens, req.extra_key, max_tokens)
        if found:
            return found
        if req.draft_state is None:
            req.draft_state = NgramIndex(self.ngram_max)
        return req.draft_state.draft(tokens, max_tokens)
