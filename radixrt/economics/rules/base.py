"""Bill, and the interface every provider's caching rules implement."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from radixrt.economics.prices import MTOK, ModelPrices, Tier
from radixrt.economics.workload import Request

HOUR_S = 3600.0


@dataclass(slots=True)
class Bill:
    """Tokens by how they were billed, and the dollars for each kind. `input_tokens` and
    `cache_read_tokens` (and Anthropic's `cache_write_tokens`) add up to `prompt_tokens`; a
    Gemini explicit cache's creation is a call of its own, so its tokens come on top."""

    num_requests: int = 0
    prompt_tokens: int = 0
    input_tokens: int = 0  # at the full input price
    cache_write_tokens: int = 0  # Anthropic writes (surcharged), Gemini explicit creation
    cache_read_tokens: int = 0  # at the cached price
    output_tokens: int = 0
    storage_token_hours: float = 0.0  # Gemini explicit caches
    input_usd: float = 0.0
    write_usd: float = 0.0
    read_usd: float = 0.0
    output_usd: float = 0.0
    storage_usd: float = 0.0
    uncached_usd: float = 0.0  # the same requests with no caching at all

    @property
    def cost_usd(self) -> float:
        return self.input_usd + self.write_usd + self.read_usd + self.output_usd + self.storage_usd

    @property
    def hit_rate(self) -> float:
        """Share of prompt tokens billed as cache reads."""
        return self.cache_read_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def add(self, other: Bill) -> None:
        for name in Bill.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "cost_usd": self.cost_usd, "hit_rate": self.hit_rate}


class BaseCacheRules(ABC):
    """One provider's prompt-caching contract, replayed over requests in time order.

    Contract: `bill(req, into)` is called once per request, with non-decreasing
    `Request.time`; it reads and updates this object's cache state (it mutates `self`) and adds
    what that request is billed to `into`, including `uncached_usd`, its price without any
    caching. `close(end_time, into)` adds what accrues with time rather than per request
    (explicit cache storage, up to each cache's expiry) and empties the state; it adds nothing
    where nothing accrues. Neither raises on a valid Request. A fresh object has an empty cache.
    """

    label: str  # e.g. "openai automatic (in_memory)"
    prices: ModelPrices

    @abstractmethod
    def bill(self, req: Request, into: Bill) -> None: ...

    def close(self, end_time: float, into: Bill) -> None:
        return None

    def notes(self) -> list[str]:
        """What the replay assumed, for the report (after the replay)."""
        return []


def replay(rules: Sequence[BaseCacheRules], requests: Iterable[Request]) -> list[Bill]:
    """Bill every request under each of `rules` (one pass over `requests`), then close them;
    ValueError if time goes backwards."""
    totals = [Bill() for _ in rules]
    pairs = list(zip(rules, totals))
    last = None
    for req in requests:
        if last is not None and req.time < last:
            raise ValueError(f"requests out of time order: {req.time} after {last}")
        for r, total in pairs:
            r.bill(req, total)
        last = req.time
    for r, total in pairs:
        r.close(last if last is not None else 0.0, total)
    return totals


def bill_one(rules: BaseCacheRules, req: Request) -> Bill:
    """What one request is billed (the rules' state moves on, as in a replay)."""
    bill = Bill()
    rules.bill(req, bill)
    return bill


def start_bill(prices: ModelPrices, req: Request, bill: Bill) -> Tier:
    """Add a request's output and its uncached price to `bill`; return its price tier."""
    tier = prices.tier(req.prompt_tokens)
    out_usd = req.output_tokens * tier.output / MTOK
    bill.num_requests += 1
    bill.prompt_tokens += req.prompt_tokens
    bill.output_tokens += req.output_tokens
    bill.output_usd += out_usd
    bill.uncached_usd += req.prompt_tokens * tier.input / MTOK + out_usd
    return tier


def charge_input(bill: Bill, tier: Tier, tokens: int) -> None:
    """Add `tokens` at the full input price."""
    bill.input_tokens += tokens
    bill.input_usd += tokens * tier.input / MTOK


def charge_read(bill: Bill, tokens: int, usd_per_mtok: float) -> None:
    bill.cache_read_tokens += tokens
    bill.read_usd += tokens * usd_per_mtok / MTOK


def charge_write(bill: Bill, tokens: int, usd_per_mtok: float) -> None:
    bill.cache_write_tokens += tokens
    bill.write_usd += tokens * usd_per_mtok / MTOK


def requests_note(n: int, what: str) -> str:
    """'1 request with ...', '2,000 requests with ...'."""
    return f"{n:,} request{'' if n == 1 else 's'} {what}"
