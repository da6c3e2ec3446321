"""Gemini explicit context caches (cachedContents): created once, then used by reference.

Creating a cache bills its tokens at the standard input price; while it lives it bills storage
per token-hour, from creation to its expiry (a cache is billed to its expiry even if no request
comes after the last one); a request that uses it reads the cached tokens at the cached price.
A request past the expiry creates it again. A sliding handle's expiry moves to now + TTL on
each use, as a client that PATCHes the TTL would; a fixed one keeps its expiry.

Requests that name no handle get one assumed at the longest block boundary they share with an
earlier request, with the default TTL (1 hour), extended on use.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixrt.economics.prices import MTOK, GeminiTerms, ModelPrices
from radixrt.economics.rules.base import (
    HOUR_S,
    BaseCacheRules,
    Bill,
    charge_input,
    charge_read,
    charge_write,
    requests_note,
    start_bill,
)
from radixrt.economics.workload import Pin, Request


@dataclass(slots=True)
class _Cache:
    tokens: int
    created: float
    expiry: float


class GeminiExplicitRules(BaseCacheRules):
    def __init__(self, prices: ModelPrices, terms: GeminiTerms) -> None:
        if prices.storage_per_mtok_hour is None:
            raise ValueError(f"{prices.model} has no explicit cache storage price")
        self.prices, self.terms = prices, terms
        self.storage_per_mtok_hour = prices.storage_per_mtok_hour
        self.label = "gemini explicit caches"
        self._caches: dict[str, _Cache] = {}
        self._seen: set[str] = set()
        self.num_created = 0
        self.num_assumed = 0

    def bill(self, req: Request, into: Bill) -> None:
        tier = start_bill(self.prices, req, into)
        t = req.time
        handle = self._handle(req)
        key = req.key_at(handle.offset) if handle is not None else None
        self._seen.update(k for _, k in req.marks)
        if handle is None or key is None:
            charge_input(into, tier, req.prompt_tokens)
            return
        cache = self._caches.get(key)
        if cache is None or cache.expiry < t:
            if cache is not None:
                self._bill_storage(into, cache)
            cache = self._caches[key] = _Cache(handle.offset, t, t + handle.ttl_s)
            charge_write(into, handle.offset, tier.input)  # creation, at the input price
            self.num_created += 1
        elif handle.sliding:
            cache.expiry = max(cache.expiry, t + handle.ttl_s)
        read_price = tier.cached_input if tier.cached_input is not None else tier.input
        charge_read(into, cache.tokens, read_price)
        charge_input(into, tier, req.prompt_tokens - cache.tokens)

    def close(self, end_time: float, into: Bill) -> None:
        for cache in self._caches.values():
            self._bill_storage(into, cache)
        self._caches.clear()
        self._seen.clear()

    def notes(self) -> list[str]:
        out = [f"caches created: {self.num_created:,}"]
        if self.num_assumed:
            ttl = self.terms.explicit_default_ttl_s
            out.append(
                requests_note(
                    self.num_assumed,
                    "used an assumed cache of the longest block boundary shared with an earlier "
                    f"request ({ttl:g} s TTL, extended on use)",
                )
            )
        return out

    def _handle(self, req: Request) -> Pin | None:
        """The cache a request uses (the longest of its handles) if long enough to cache."""
        if req.handles is not None:
            handles = [h for h in req.handles if h.offset <= req.prompt_tokens]
            handle = max(handles, key=lambda h: h.offset, default=None)
        else:
            shared = req.longest_mark_in(self._seen)
            handle = Pin(shared, self.terms.explicit_default_ttl_s) if shared else None
            self.num_assumed += handle is not None
        if handle is None or handle.offset < max(self.prices.min_cache_tokens, 1):
            return None
        return handle

    def _bill_storage(self, bill: Bill, cache: _Cache) -> None:
        token_hours = cache.tokens * (cache.expiry - cache.created) / HOUR_S
        bill.storage_token_hours += token_hours
        bill.storage_usd += token_hours * self.storage_per_mtok_hour / MTOK
