"""The requests a cost is computed over: a synthetic Scenario, or a server's request log.

A Request knows its prefixes only by hash: `marks` are (prefix length, hash of that prefix)
pairs, so two requests share their first L tokens exactly when both have a mark at L with the
same hash. A log has a mark at every block boundary; a scenario only at the end of its shared
prefix (its unique tails never repeat). Each provider's rules read the fields they need:
Anthropic the `breakpoints`, OpenAI the `retention`, Gemini's explicit caches the `handles`;
None there means the request did not say, and the rules assume (see rules/).

Request log format (one JSON object a line, written by the server):
  {"time": 1796160000.5, "tenant": "a" | null, "endpoint": "/v1/messages",
   "prompt_tokens": 5210, "cached_tokens": 5120, "output_tokens": 64, "block": 128,
   "prefix_hashes": ["9f1c2a4b5d6e7f80", ...],
   "pins": [{"offset": 5120, "ttl_s": 300.0, "sliding": true, "handle": false}],
   "ttft_s": 0.21, "e2e_s": 1.9}
prefix_hashes[i] is a chained hash of the first (i + 1) * block tokens (a last partial block is
not hashed). Pins are the cache markers the request asked for: breakpoints on /v1/messages,
retention on the OpenAI endpoints (ttl 600 sliding: in_memory, 86400: 24h), handles
(`handle: true`) for Gemini cachedContents and /v1/caches.
"""

from __future__ import annotations

import json
import random
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DAY_S = 86400.0
ARRIVALS = ("uniform", "poisson", "burst")
ANTHROPIC_ENDPOINTS = ("/v1/messages",)
OPENAI_ENDPOINTS = ("/v1/chat/completions", "/v1/completions")
BURST_START_HOUR = 9.0  # burst arrivals: each day's requests come from 09:00 on
Marks = tuple[tuple[int, str], ...]  # (prefix length, prefix hash), lengths increasing


@dataclass(frozen=True, slots=True)
class Pin:
    """Keep the prompt's first `offset` tokens for `ttl_s` (sliding: from each use)."""

    offset: int
    ttl_s: float
    sliding: bool = True


@dataclass(frozen=True, slots=True)
class Request:
    time: float  # seconds (any epoch); requests are replayed in this order
    prompt_tokens: int
    output_tokens: int
    marks: Marks = ()
    breakpoints: tuple[Pin, ...] | None = None  # Anthropic cache_control; None: not given
    retention: str | None = None  # OpenAI prompt_cache_retention: "in_memory" or "24h"
    handles: tuple[Pin, ...] | None = None  # explicit caches used; None: not given
    cached_tokens: int | None = None  # what radixrt's own cache served (logs only)
    ttft_s: float | None = None

    def key_at(self, offset: int) -> str | None:
        """A name for the prompt's first `offset` tokens: the hash of the longest mark at or
        before it (plus the offset when it is not on a mark; the tokens between are assumed
        shared too). None below the first mark: too short to tell prompts apart."""
        i = bisect_right(self.marks, offset, key=lambda m: m[0])
        if i == 0:
            return None
        length, key = self.marks[i - 1]
        return key if length == offset else f"{key}+{offset}"

    def longest_mark_in(self, keys: set[str] | dict[str, Any]) -> int:
        """Length of the longest mark whose hash is in `keys`; 0 if none."""
        for length, key in reversed(self.marks):
            if key in keys:
                return length
        return 0


@dataclass(frozen=True, slots=True)
class Scenario:
    """Synthetic traffic: each request is one of `prefixes` shared prefixes followed by unique
    tokens, asking for `output_tokens`. Clients mark the shared prefix the way each API lets
    them: an Anthropic breakpoint after it (`anthropic_ttl_s`), OpenAI `openai_retention`, and
    a Gemini explicit cache per prefix, kept for the whole scenario (`gemini_cache_ttl_s` None)
    or for that TTL after each use (created again when a request finds it expired)."""

    requests_per_day: float = 10_000
    days: float = 30
    shared_prefix_tokens: int = 50_000
    unique_tokens: int = 500
    output_tokens: int = 500
    arrival: str = "uniform"  # uniform | poisson | burst (each day's requests in burst_hours)
    prefixes: int = 1
    burst_hours: float = 8.0
    anthropic_ttl_s: float = 300.0
    openai_retention: str = "in_memory"
    gemini_cache_ttl_s: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.arrival not in ARRIVALS:
            raise ValueError(f"arrival must be one of {ARRIVALS}, got {self.arrival!r}")
        if self.requests_per_day <= 0 or self.days <= 0 or self.prefixes < 1:
            raise ValueError("requests_per_day and days must be > 0, prefixes >= 1")
        if min(self.shared_prefix_tokens, self.unique_tokens, self.output_tokens) < 0:
            raise ValueError("token counts must be >= 0")
        if self.shared_prefix_tokens + self.unique_tokens < 1:
            raise ValueError("a prompt needs at least one token")
        if self.gemini_cache_ttl_s is not None and self.gemini_cache_ttl_s <= 0:
            raise ValueError("gemini_cache_ttl_s must be > 0")
        if not 0 < self.burst_hours <= 24:
            raise ValueError(f"burst_hours must be in (0, 24], got {self.burst_hours}")

    @property
    def duration_s(self) -> float:
        return self.days * DAY_S

    def requests(self) -> Iterator[Request]:
        """The scenario's requests in time order (deterministic for a seed)."""
        rng = random.Random(self.seed)
        shapes = [self._shape(p) for p in range(self.prefixes)]
        prompt = self.shared_prefix_tokens + self.unique_tokens
        for i, t in enumerate(self._times(rng)):
            p = i % self.prefixes if self.arrival == "uniform" else rng.randrange(self.prefixes)
            marks, breakpoints, handles = shapes[p]
            yield Request(
                t, prompt, self.output_tokens, marks, breakpoints, self.openai_retention, handles
            )

    def describe(self) -> str:
        return (
            f"{self.requests_per_day:,g} requests/day for {self.days:g} days ({self.arrival}), "
            f"{self.prefixes} shared prefix{'es' if self.prefixes > 1 else ''} of "
            f"{self.shared_prefix_tokens:,} tokens + {self.unique_tokens:,} unique tokens, "
            f"{self.output_tokens:,} output tokens"
        )

    def _shape(self, p: int) -> tuple[Marks, tuple[Pin, ...], tuple[Pin, ...]]:
        """Prefix p's marks, breakpoints and handles, shared by all its requests."""
        s = self.shared_prefix_tokens
        if s == 0:
            return (), (), ()
        if self.gemini_cache_ttl_s is None:
            handle = Pin(s, self.duration_s, sliding=False)
        else:
            handle = Pin(s, self.gemini_cache_ttl_s, sliding=True)
        return ((s, f"prefix-{p}"),), (Pin(s, self.anthropic_ttl_s),), (handle,)

    def _times(self, rng: random.Random) -> Iterator[float]:
        if self.arrival == "poisson":
            rate, t = self.requests_per_day / DAY_S, 0.0
            while (t := t + rng.expovariate(rate)) < self.duration_s:
                yield t
            return
        per_day = round(self.requests_per_day)
        for day in range(int(self.days)):
            if self.arrival == "uniform":
                yield from (day * DAY_S + i * DAY_S / per_day for i in range(per_day))
            else:
                start, span = day * DAY_S + BURST_START_HOUR * 3600, self.burst_hours * 3600
                yield from sorted(start + rng.random() * span for _ in range(per_day))


def read_request_log(path: str | Path) -> list[Request]:
    """Parse a JSONL request log into Requests sorted by time; ValueError names the line."""
    out = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(log_record_to_request(json.loads(line)))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{lineno}: {e!r}") from None
    out.sort(key=lambda r: r.time)
    return out


def log_record_to_request(rec: dict[str, Any]) -> Request:
    """One log line as a Request: hashes namespaced by tenant, pins read per endpoint."""
    block = int(rec.get("block") or 0)
    hashes = rec.get("prefix_hashes") or []
    if hashes and block < 1:
        raise ValueError("prefix_hashes without a block size")
    tenant = rec.get("tenant")
    ns = f"{tenant}:" if tenant is not None else ""
    marks = tuple(((i + 1) * block, ns + str(h)) for i, h in enumerate(hashes))
    pins = rec.get("pins") or []
    endpoint = str(rec.get("endpoint") or "")
    cache_pins = tuple(_pin(p) for p in pins if not p.get("handle"))
    handles = tuple(_pin(p) for p in pins if p.get("handle"))
    retention = None
    if endpoint in OPENAI_ENDPOINTS and cache_pins:
        retention = "24h" if max(p.ttl_s for p in cache_pins) >= DAY_S else "in_memory"
    breakpoints = cache_pins if endpoint in ANTHROPIC_ENDPOINTS and cache_pins else None
    prompt = int(rec["prompt_tokens"])
    if prompt < 0 or int(rec["output_tokens"]) < 0:
        raise ValueError("negative token count")
    cached = rec.get("cached_tokens")
    ttft = rec.get("ttft_s")
    return Request(
        time=float(rec["time"]),
        prompt_tokens=prompt,
        output_tokens=int(rec["output_tokens"]),
        marks=marks,
        breakpoints=breakpoints,
        retention=retention,
        handles=handles or None,
        cached_tokens=None if cached is None else int(cached),
        ttft_s=None if ttft is None else float(ttft),
    )


def _pin(p: dict[str, Any]) -> Pin:
    return Pin(int(p["offset"]), float(p["ttl_s"]), bool(p.get("sliding", True)))
