"""Anthropic prompt caching: explicit breakpoints (`cache_control`, at most 4 a request).

A breakpoint caches the prompt up to it. On a request, the longest breakpoint whose prefix is
still cached is read (at `read_multiplier` x input); every later breakpoint's segment is
written (at the write multiplier of that breakpoint's TTL, 5m or 1h); the tokens after the last
breakpoint are plain input. Every breakpoint of the request is then cached for its TTL from
now: a hit refreshes the lifetime at no charge. A breakpoint shorter than the model's minimum
caches nothing (its tokens count toward the next breakpoint's segment).

Requests that carry no breakpoints (a log of other endpoints, or /v1/messages without
cache_control) get one assumed breakpoint at the longest block boundary they share with an
earlier request, the place a client that knew its traffic would put it; the first request of a
prefix therefore writes nothing. Anthropic's 20-block lookback is not modelled.
"""

from __future__ import annotations

from radixrt.economics.prices import AnthropicTerms, ModelPrices
from radixrt.economics.rules.base import (
    BaseCacheRules,
    Bill,
    charge_input,
    charge_read,
    charge_write,
    requests_note,
    start_bill,
)
from radixrt.economics.workload import Pin, Request

SWEEP_EVERY = 4096


class AnthropicRules(BaseCacheRules):
    def __init__(self, prices: ModelPrices, terms: AnthropicTerms, assumed_ttl_s: float) -> None:
        self.prices, self.terms, self.assumed_ttl_s = prices, terms, assumed_ttl_s
        self.label = "anthropic breakpoints"
        self._assumed_label = "1h" if assumed_ttl_s > terms.ttl_5m_s else "5m"
        self._expiry: dict[str, float] = {}  # breakpoint prefix -> time it leaves the cache
        self._seen: set[str] = set()  # every prefix hash of every earlier request
        self.num_given = 0  # requests whose breakpoints came with them
        self.num_assumed = 0  # requests given the assumed breakpoint
        self.num_without = 0  # requests with no usable breakpoint
        self._num_bills = 0

    def bill(self, req: Request, into: Bill) -> None:
        tier = start_bill(self.prices, req, into)
        t, terms = req.time, self.terms
        points = self._breakpoints(req)
        keys = [req.key_at(p.offset) for p in points]
        valid = [(p, k) for p, k in zip(points, keys) if k is not None]
        hit = -1
        for i, (_, key) in enumerate(valid):
            if self._expiry.get(key, -1.0) >= t:
                hit = i
        done = valid[hit][0].offset if hit >= 0 else 0
        charge_read(into, done, tier.input * terms.read_multiplier)
        for pin, _ in valid[hit + 1 :]:
            charge_write(into, pin.offset - done, tier.input * self._write_multiplier(pin))
            done = pin.offset
        charge_input(into, tier, req.prompt_tokens - done)
        for pin, key in valid:
            self._expiry[key] = max(self._expiry.get(key, -1.0), t + self._ttl(pin))
        self._seen.update(key for _, key in req.marks)
        self._num_bills += 1
        if self._num_bills % SWEEP_EVERY == 0:
            self._expiry = {k: e for k, e in self._expiry.items() if e >= t}

    def close(self, end_time: float, into: Bill) -> None:
        self._expiry.clear()
        self._seen.clear()

    def notes(self) -> list[str]:
        out = []
        if self.num_given:
            out.append(requests_note(self.num_given, "with their own breakpoints"))
        if self.num_assumed:
            out.append(
                requests_note(
                    self.num_assumed,
                    f"with an assumed {self._assumed_label} breakpoint at the longest block "
                    "boundary shared with an earlier request",
                )
            )
        if self.num_without:
            out.append(
                requests_note(self.num_without, "with no breakpoint at or above the minimum")
            )
        return out

    def _breakpoints(self, req: Request) -> list[Pin]:
        """The request's usable breakpoints, shortest first, at most `max_breakpoints`."""
        if req.breakpoints is not None:
            self.num_given += 1
            given = sorted(req.breakpoints, key=lambda p: p.offset)
            points = [p for p in given[: self.terms.max_breakpoints] if self._usable(p, req)]
        else:
            shared = req.longest_mark_in(self._seen)
            points = [Pin(shared, self.assumed_ttl_s)] if shared else []
            points = [p for p in points if self._usable(p, req)]
            self.num_assumed += bool(points)
        self.num_without += not points
        return points

    def _usable(self, pin: Pin, req: Request) -> bool:
        return self.prices.min_cache_tokens <= pin.offset <= req.prompt_tokens and pin.offset > 0

    def _ttl(self, pin: Pin) -> float:
        return self.terms.ttl_1h_s if pin.ttl_s > self.terms.ttl_5m_s else self.terms.ttl_5m_s

    def _write_multiplier(self, pin: Pin) -> float:
        if pin.ttl_s > self.terms.ttl_5m_s:
            return self.terms.write_1h_multiplier
        return self.terms.write_5m_multiplier
