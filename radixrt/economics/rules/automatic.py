"""Automatic prefix caching (OpenAI, Gemini implicit): no markers, no write fee. A request
reads the longest prefix some earlier request computed, if that prefix was used within the
retention time, counted from `min_tokens` in `increment` steps; it then leaves every prefix
of its own of at least `min_tokens` cached, its retention starting over.

The replay is an upper bound on hits: the provider may route a request to a machine that does
not hold the prefix (OpenAI: above about 15 requests a minute per prefix), or evict early.
"""

from __future__ import annotations

from radixrt.economics.prices import ModelPrices
from radixrt.economics.rules.base import (
    BaseCacheRules,
    Bill,
    charge_input,
    charge_read,
    requests_note,
    start_bill,
)
from radixrt.economics.workload import Request

SWEEP_EVERY = 4096  # bills between sweeps of expired entries


class AutomaticPrefixRules(BaseCacheRules):
    def __init__(
        self,
        label: str,
        prices: ModelPrices,
        min_tokens: int,
        increment: int,
        retention_s: float,
        extended_retention_s: float | None = None,  # for requests with retention "24h"
    ) -> None:
        if increment < 1 or min_tokens < 0:
            raise ValueError("increment must be >= 1 and min_tokens >= 0")
        self.label, self.prices = label, prices
        self.min_tokens, self.increment = min_tokens, increment
        self.retention_s, self.extended_retention_s = retention_s, extended_retention_s
        self._expiry: dict[str, float] = {}  # prefix hash -> time it stops being cached
        self._num_bills = 0
        self._num_extended = 0

    def cached_len(self, matched: int) -> int:
        """Tokens billed as cached when `matched` tokens match: 0 below the minimum, else the
        minimum plus whole increments."""
        if matched < self.min_tokens or matched == 0:
            return 0
        return self.min_tokens + (matched - self.min_tokens) // self.increment * self.increment

    def bill(self, req: Request, into: Bill) -> None:
        tier = start_bill(self.prices, req, into)
        t = req.time
        matched = 0
        for length, key in reversed(req.marks):
            if length <= req.prompt_tokens and self._expiry.get(key, -1.0) >= t:
                matched = length
                break
        cached = self.cached_len(matched)
        read_price = tier.cached_input if tier.cached_input is not None else tier.input
        charge_read(into, cached, read_price)
        charge_input(into, tier, req.prompt_tokens - cached)
        ttl = self.retention_s
        if req.retention == "24h" and self.extended_retention_s is not None:
            ttl = self.extended_retention_s
            self._num_extended += 1
        for length, key in req.marks:
            if self.min_tokens <= length <= req.prompt_tokens:
                self._expiry[key] = max(self._expiry.get(key, -1.0), t + ttl)
        self._num_bills += 1
        if self._num_bills % SWEEP_EVERY == 0:
            self._expiry = {k: e for k, e in self._expiry.items() if e >= t}

    def close(self, end_time: float, into: Bill) -> None:
        self._expiry.clear()

    def notes(self) -> list[str]:
        out = [
            f"cached from {self.min_tokens} tokens in steps of {self.increment}, kept "
            f"{self.retention_s:g} s after the last use"
        ]
        if self._num_extended:
            ttl = self.extended_retention_s
            out.append(requests_note(self._num_extended, f"kept {ttl:g} s (24h retention)"))
        return out
