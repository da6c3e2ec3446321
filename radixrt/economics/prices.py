"""PriceBook: prices.json as typed values. Each number in the file is `{"value", "source"}` (plus
an optional note and `"verified": false`); the loader keeps only the values, and
`unverified_numbers` lists the ones the file itself doubts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radixrt.economics.data import read_data

PROVIDERS = ("anthropic", "openai", "gemini")
MTOK = 1e6


@dataclass(frozen=True, slots=True)
class Tier:
    """USD per million tokens; `cached_input` None where the provider prices reads by a
    multiplier instead (Anthropic)."""

    input: float
    output: float
    cached_input: float | None = None


@dataclass(frozen=True, slots=True)
class ModelPrices:
    provider: str
    model: str
    base: Tier
    min_cache_tokens: int = 0  # shorter prefixes are never cached
    long: Tier | None = None  # prompts over `long_above_tokens` are billed at this tier
    long_above_tokens: int | None = None
    storage_per_mtok_hour: float | None = None  # explicit caches (Gemini)
    extended_retention: bool = False  # OpenAI prompt_cache_retention=24h

    def tier(self, prompt_tokens: int) -> Tier:
        """The tier a request of `prompt_tokens` is billed at."""
        if self.long is not None and self.long_above_tokens is not None:
            if prompt_tokens > self.long_above_tokens:
                return self.long
        return self.base


@dataclass(frozen=True, slots=True)
class AnthropicTerms:
    write_5m_multiplier: float = 1.25
    write_1h_multiplier: float = 2.0
    read_multiplier: float = 0.1
    ttl_5m_s: float = 300.0
    ttl_1h_s: float = 3600.0
    max_breakpoints: int = 4


@dataclass(frozen=True, slots=True)
class OpenAITerms:
    min_cache_tokens: int = 1024
    increment_tokens: int = 128
    in_memory_retention_s: float = 600.0
    extended_retention_s: float = 86400.0


@dataclass(frozen=True, slots=True)
class GeminiTerms:
    implicit_retention_s: float = 300.0
    implicit_increment_tokens: int = 1
    explicit_default_ttl_s: float = 3600.0


@dataclass(frozen=True, slots=True)
class PriceBook:
    as_of: str
    anthropic: AnthropicTerms
    openai: OpenAITerms
    gemini: GeminiTerms
    models: dict[tuple[str, str], ModelPrices] = field(default_factory=dict)  # (provider, model)

    def models_of(self, provider: str) -> list[ModelPrices]:
        return [m for (p, _), m in self.models.items() if p == provider]

    def model(self, provider: str, name: str) -> ModelPrices:
        """One model's prices; ValueError lists the provider's models."""
        if (provider, name) not in self.models:
            known = ", ".join(m.model for m in self.models_of(provider))
            raise ValueError(f"no prices for {provider} model {name!r}; known: {known}")
        return self.models[provider, name]


def load_prices(path: str | Path | None = None) -> PriceBook:
    """Parse prices.json (the bundled one, or `path`); ValueError names a bad entry."""
    raw = read_data("prices.json") if path is None else json.loads(Path(path).read_text())
    try:
        models: dict[tuple[str, str], ModelPrices] = {}
        for provider in PROVIDERS:
            for name, entry in raw[provider]["models"].items():
                models[provider, name] = _model(provider, name, entry)
        return PriceBook(
            as_of=str(raw.get("as_of", "?")),
            anthropic=AnthropicTerms(**_values(raw["anthropic"]["rules"])),
            openai=OpenAITerms(**_values(raw["openai"]["rules"])),
            gemini=GeminiTerms(**_values(raw["gemini"]["rules"])),
            models=models,
        )
    except (KeyError, TypeError) as e:
        raise ValueError(f"prices file {path or 'prices.json'}: bad or missing entry {e}") from None


def unverified_numbers(path: str | Path | None = None) -> list[str]:
    """Dotted names of the numbers the file marks `"verified": false`."""
    raw = read_data("prices.json") if path is None else json.loads(Path(path).read_text())
    out: list[str] = []

    def walk(node: Any, name: str) -> None:
        if isinstance(node, dict) and "value" in node:
            if node.get("verified") is False:
                out.append(name)
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{name}.{k}" if name else k)

    for provider in PROVIDERS:
        walk(raw[provider], provider)
    return out


def _values(node: dict[str, Any]) -> dict[str, Any]:
    return {k: v["value"] for k, v in node.items()}


def _model(provider: str, name: str, entry: dict[str, Any]) -> ModelPrices:
    v = {k: x["value"] for k, x in entry.items() if k != "long_context"}
    base = Tier(v["input_per_mtok"], v["output_per_mtok"], v.get("cached_input_per_mtok"))
    long, above = None, None
    if "long_context" in entry:
        lv = _values(entry["long_context"])
        above = int(lv["above_tokens"])
        long = Tier(lv["input_per_mtok"], lv["output_per_mtok"], lv.get("cached_input_per_mtok"))
    return ModelPrices(
        provider=provider,
        model=name,
        base=base,
        min_cache_tokens=int(v.get("min_cache_tokens", 0)),
        long=long,
        long_above_tokens=above,
        storage_per_mtok_hour=v.get("storage_per_mtok_hour"),
        extended_retention=bool(v.get("extended_retention", False)),
    )
