"""prices.json: every number names a dated source, and the loader reads it."""

from __future__ import annotations

import re
from typing import Any

from radixrt.economics.data import read_data
from radixrt.economics.prices import PROVIDERS, load_prices, unverified_numbers


def _numbers(node: Any, name: str = "") -> list[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict) and "value" in node:
        return [(name, node)]
    if isinstance(node, dict):
        return [x for k, v in node.items() for x in _numbers(v, f"{name}.{k}".strip("."))]
    return []


def test_every_number_has_a_dated_source() -> None:
    raw = read_data("prices.json")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw["as_of"])
    sources = raw["sources"]
    for source in sources.values():
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", source["checked"]) and source["how"]
    numbers = [x for p in PROVIDERS for x in _numbers(raw[p], p)]
    assert len(numbers) > 30
    for name, number in numbers:
        assert number["source"] in sources, name
        assert isinstance(number["value"], int | float | bool), name


def test_the_loader_reads_rules_and_models() -> None:
    book = load_prices()
    assert book.anthropic.write_5m_multiplier == 1.25 and book.anthropic.write_1h_multiplier == 2.0
    assert book.anthropic.read_multiplier == 0.1
    assert (book.openai.min_cache_tokens, book.openai.increment_tokens) == (1024, 128)
    assert {m.provider for m in book.models.values()} == set(PROVIDERS)
    for provider in PROVIDERS:
        assert len(book.models_of(provider)) >= 2
    pro = book.model("gemini", "gemini-2.5-pro")
    assert pro.storage_per_mtok_hour == 4.5 and pro.tier(100_000).input == 1.25
    assert pro.tier(250_000).input == 2.5 and pro.tier(250_000).cached_input == 0.25
    assert book.model("openai", "gpt-5.1").extended_retention


def test_doubtful_numbers_are_marked() -> None:
    doubtful = unverified_numbers()
    assert "gemini.rules.implicit_retention_s" in doubtful
    assert "gemini.models.gemini-2.5-flash.cached_input_per_mtok" in doubtful
