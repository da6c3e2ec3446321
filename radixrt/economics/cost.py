"""The cost report: every chosen model's bill under its provider's caching rules, beside the
same traffic without caching, and the self-hosted cost with the radix cache on and off."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from radixrt.economics.prices import ModelPrices, PriceBook
from radixrt.economics.rules.anthropic import AnthropicRules
from radixrt.economics.rules.automatic import AutomaticPrefixRules
from radixrt.economics.rules.base import BaseCacheRules, Bill, replay
from radixrt.economics.rules.gemini_explicit import GeminiExplicitRules
from radixrt.economics.self_hosted import SelfHostedRow
from radixrt.economics.workload import DAY_S, Request, Scenario

MONTH_DAYS = 30
SWEEP_PREFIX_TOKENS = (0, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000)


@dataclass(frozen=True, slots=True)
class CostRow:
    provider: str
    model: str
    rules: str
    bill: Bill
    notes: tuple[str, ...] = ()

    @property
    def saving_usd(self) -> float:
        return self.bill.uncached_usd - self.bill.cost_usd

    @property
    def saving_frac(self) -> float:
        return self.saving_usd / self.bill.uncached_usd if self.bill.uncached_usd else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "rules": self.rules,
            "uncached_usd": self.bill.uncached_usd,
            "cached_usd": self.bill.cost_usd,
            "saving_usd": self.saving_usd,
            "saving_frac": self.saving_frac,
            "hit_rate": self.bill.hit_rate,
            "bill": self.bill.to_dict(),
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class CostReport:
    workload: str
    num_requests: int
    span_s: float  # the time the requests cover
    prices_as_of: str
    rows: list[CostRow]
    self_hosted: list[SelfHostedRow] = field(default_factory=list)
    throughput_source: str | None = None
    radixrt_hit_rate: float | None = None  # what radixrt's own cache served, from a log
    notes: list[str] = field(default_factory=list)
    # The measured server's KV pool (self_hosted.Throughput): dtype and bytes per token.
    kv_dtype: str | None = None
    kv_bytes_per_token: int | None = None

    @property
    def month_scale(self) -> float | None:
        """Factor from the requests' span to 30 days (None for an instant)."""
        return MONTH_DAYS * DAY_S / self.span_s if self.span_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "num_requests": self.num_requests,
            "span_days": self.span_s / DAY_S,
            "month_scale": self.month_scale,
            "prices_as_of": self.prices_as_of,
            "providers": [r.to_dict() for r in self.rows],
            "self_hosted": [r.to_dict() for r in self.self_hosted],
            "throughput_source": self.throughput_source,
            "radixrt_hit_rate": self.radixrt_hit_rate,
            "notes": self.notes,
            "kv_dtype": self.kv_dtype,
            "kv_bytes_per_token": self.kv_bytes_per_token,
        }


def make_rules(
    book: PriceBook, prices: ModelPrices, anthropic_ttl_s: float
) -> list[BaseCacheRules]:
    """The caching rules a model is billed under (Gemini: implicit and explicit caches)."""
    if prices.provider == "anthropic":
        return [AnthropicRules(prices, book.anthropic, anthropic_ttl_s)]
    if prices.provider == "openai":
        o = book.openai
        extended = o.extended_retention_s if prices.extended_retention else None
        auto = AutomaticPrefixRules(
            "openai automatic",
            prices,
            min_tokens=o.min_cache_tokens,
            increment=o.increment_tokens,
            retention_s=o.in_memory_retention_s,
            extended_retention_s=extended,
        )
        return [auto]
    if prices.provider == "gemini":
        g = book.gemini
        out: list[BaseCacheRules] = [
            AutomaticPrefixRules(
                "gemini implicit",
                prices,
                min_tokens=prices.min_cache_tokens,
                increment=g.implicit_increment_tokens,
                retention_s=g.implicit_retention_s,
            )
        ]
        if prices.storage_per_mtok_hour is not None:
            out.append(GeminiExplicitRules(prices, g))
        return out
    raise ValueError(f"unknown provider {prices.provider!r}")


def estimate_costs(
    book: PriceBook,
    requests: Iterable[Request],
    models: Sequence[ModelPrices],
    anthropic_ttl_s: float,
) -> list[CostRow]:
    """One row per model and rule set, all replayed in one pass over `requests`."""
    rules = [r for prices in models for r in make_rules(book, prices, anthropic_ttl_s)]
    bills = replay(rules, requests)
    return [
        CostRow(r.prices.provider, r.prices.model, r.label, bill, tuple(r.notes()))
        for r, bill in zip(rules, bills)
    ]


def prefix_sweep(
    book: PriceBook,
    scenario: Scenario,
    models: Sequence[ModelPrices],
    lengths: Sequence[int] = SWEEP_PREFIX_TOKENS,
    replay_days: float = 1.0,
) -> dict[str, list[tuple[int, float, float]]]:
    """(shared prefix tokens, uncached, cached USD per 30 days) per model and rule set, with the
    scenario's prefix length varied. Each point replays `replay_days` and scales to 30 days
    (the first day's cold start is thus counted each day: a small overestimate)."""
    days = min(replay_days, scenario.days)
    scale = MONTH_DAYS / days
    out: dict[str, list[tuple[int, float, float]]] = {}
    for length in lengths:
        s = replace(scenario, shared_prefix_tokens=length, days=days)
        if s.shared_prefix_tokens + s.unique_tokens < 1:
            continue
        for row in estimate_costs(book, s.requests(), models, scenario.anthropic_ttl_s):
            key = f"{row.model} ({row.rules})"
            point = (length, row.bill.uncached_usd * scale, row.bill.cost_usd * scale)
            out.setdefault(key, []).append(point)
    return out


def format_report(report: CostReport) -> str:
    """Markdown: one table per provider, then the self-hosted table and the notes."""
    days = report.span_s / DAY_S
    lines = [
        f"workload: {report.workload}",
        f"{report.num_requests:,} requests over {days:,.2f} days; prices as of "
        f"{report.prices_as_of}",
    ]
    scale = report.month_scale
    if scale is not None and abs(scale - 1) > 1e-9:
        lines.append(f"(costs are for that span; x{scale:,.2f} for 30 days at the same rate)")
    for provider in dict.fromkeys(r.provider for r in report.rows):
        lines += [
            "",
            f"{provider}",
            "",
            "| model | caching | without caching | with caching | saving | hit rate |",
            "|---|---|---:|---:|---:|---:|",
        ]
        rows = [r for r in report.rows if r.provider == provider]
        for r in rows:
            lines.append(
                f"| {r.model} | {r.rules} | {_usd(r.bill.uncached_usd)} | {_usd(r.bill.cost_usd)} "
                f"| {_usd(r.saving_usd)} ({_pct(r.saving_frac)}) | {r.bill.hit_rate:.3f} |"
            )
        by_note: dict[str, list[str]] = {}
        for r in rows:
            for n in r.notes:
                by_note.setdefault(f"{r.rules}: {n}", []).append(r.model)
        for note, models in by_note.items():
            lines.append(f"- {', '.join(dict.fromkeys(models))}, {note}")
        for r in rows:
            if r.bill.storage_usd:
                lines.append(
                    f"- {r.model}: storage {r.bill.storage_token_hours:,.0f} token-hours = "
                    f"{_usd(r.bill.storage_usd)}"
                )
    if report.self_hosted:
        lines += [
            "",
            f"self-hosted (throughput: {report.throughput_source})",
            "",
            "| radixrt | requests/s | per million requests | GPU-hours | cost | mean TTFT |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for s in report.self_hosted:
            ttft = "-" if s.ttft_s is None else f"{s.ttft_s:.3f} s"
            lines.append(
                f"| {s.label} | {s.requests_per_s:,.3f} | {_usd(s.usd_per_million_requests)} "
                f"| {s.gpu_hours:,.1f} | {_usd(s.cost_usd)} | {ttft} |"
            )
        if report.kv_bytes_per_token:
            per_gib = 2**30 // report.kv_bytes_per_token
            lines.append(
                f"\nKV cache of the measured server: {report.kv_bytes_per_token:,} bytes per "
                f"token ({report.kv_dtype or 'its'} pool): {per_gib:,} tokens per GiB"
            )
    if report.radixrt_hit_rate is not None:
        lines.append(f"\nradixrt's own cache served {report.radixrt_hit_rate:.3f} of prompt tokens")
    if report.notes:
        lines += [""] + [f"- {n}" for n in report.notes]
    return "\n".join(lines)


def _usd(x: float) -> str:
    return f"-${-x:,.2f}" if x <= -0.005 else f"${abs(x):,.2f}"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if abs(x) >= 0.005 else "0%"
