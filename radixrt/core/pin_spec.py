"""PinSpec and PinOutcome: a request's ask to pin a prefix of its prompt, and what became of
it (radixrt/cache/pins.py holds the table that applies them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PinSpec:
    """Pin the first `offset` tokens of a prompt (rounded down to whole pages) for `ttl_s`."""

    offset: int
    ttl_s: float
    pin_id: str | None = None  # None: the prefix's own pin, shared by every spec naming it
    sliding: bool = True  # a hit on the prefix moves the expiry to now + ttl_s
    owner: str | None = None  # whose bound it counts against (a tenant); None: nobody's


@dataclass(frozen=True, slots=True)
class PinOutcome:
    """What became of one PinSpec."""

    offset: int
    pinned: bool
    tokens: int = 0  # tokens the pin holds (offset rounded down to a page)
    new_tokens: int = 0  # tokens this call added to the pinned set
    expire_at: float = 0.0  # wall clock
    pin_id: str = ""
    reason: str | None = None  # why not, when not pinned
