"""Each provider's caching rules on hand-made traffic, and the issue's Gemini storage figure."""

from __future__ import annotations

import pytest

from radixrt.economics.prices import AnthropicTerms, GeminiTerms, ModelPrices, Tier
from radixrt.economics.rules.anthropic import AnthropicRules
from radixrt.economics.rules.automatic import AutomaticPrefixRules
from radixrt.economics.rules.base import Bill, bill_one, replay
from radixrt.economics.rules.gemini_explicit import GeminiExplicitRules
from radixrt.economics.workload import Pin, Request, Scenario

CLAUDE = ModelPrices("anthropic", "claude", Tier(3.0, 15.0), min_cache_tokens=1024)
GPT = ModelPrices("openai", "gpt", Tier(1.0, 4.0, 0.1), extended_retention=True)
GEMINI = ModelPrices(
    "gemini", "gemini", Tier(1.25, 10.0, 0.125), min_cache_tokens=2048, storage_per_mtok_hour=4.5
)
M = 1e6


def doc(t: float, prefix: int = 5000, prompt: int = 6000, ttl: float = 300.0, **kw) -> Request:
    """A prompt whose first `prefix` tokens are one shared document, with a breakpoint there."""
    return Request(t, prompt, 10, marks=((prefix, "doc"),), breakpoints=(Pin(prefix, ttl),), **kw)


def blocks(t: float, shared: int, total: int, tag: str, block: int = 128) -> Request:
    """Log-style marks: the first `shared` blocks common to all, the rest unique to `tag`."""
    marks = tuple(((i + 1) * block, f"s{i}" if i < shared else f"{tag}{i}") for i in range(total))
    return Request(t, total * block + 7, 10, marks=marks)


def anthropic(ttl: float = 300.0) -> AnthropicRules:
    return AnthropicRules(CLAUDE, AnthropicTerms(), assumed_ttl_s=ttl)


# --- Anthropic -----------------------------------------------------------------------------------


def test_anthropic_miss_writes_hit_reads_and_output_is_billed() -> None:
    rules = anthropic()
    first = bill_one(rules, doc(0))
    assert (first.cache_write_tokens, first.cache_read_tokens, first.input_tokens) == (
        5000,
        0,
        1000,
    )
    assert first.write_usd == pytest.approx(5000 * 3.0 * 1.25 / M)
    assert first.output_usd == pytest.approx(10 * 15.0 / M)
    assert first.uncached_usd == pytest.approx(6000 * 3.0 / M + 10 * 15.0 / M)
    second = bill_one(rules, doc(60))
    assert (second.cache_read_tokens, second.cache_write_tokens) == (5000, 0)
    assert second.read_usd == pytest.approx(5000 * 3.0 * 0.1 / M)
    assert first.input_tokens + first.cache_write_tokens == first.prompt_tokens


def test_anthropic_ttl_is_refreshed_by_each_hit_and_lapses_after_it() -> None:
    rules = anthropic()
    bills = [bill_one(rules, doc(t)) for t in (0, 250, 500, 750)]  # each within 300 s of the last
    assert [b.cache_read_tokens for b in bills] == [0, 5000, 5000, 5000]
    late = bill_one(rules, doc(750 + 301))
    assert (late.cache_read_tokens, late.cache_write_tokens) == (0, 5000)


def test_anthropic_one_hour_breakpoints_write_at_twice_the_input_price() -> None:
    rules = anthropic()
    b = bill_one(rules, doc(0, ttl=3600))
    assert b.write_usd == pytest.approx(5000 * 3.0 * 2.0 / M)
    assert bill_one(rules, doc(3000, ttl=3600)).cache_read_tokens == 5000


def test_anthropic_below_the_minimum_nothing_is_cached() -> None:
    rules = anthropic()
    for t in (0, 1, 2):
        b = bill_one(rules, doc(t, prefix=1000, prompt=1200))
        assert (b.cache_write_tokens, b.cache_read_tokens, b.input_tokens) == (0, 0, 1200)


def test_anthropic_several_breakpoints_read_the_longest_live_one() -> None:
    rules = anthropic()
    marks = ((2000, "tools"), (5000, "tools+doc"))
    points = (Pin(2000, 3600.0), Pin(5000, 300.0))
    first = bill_one(rules, Request(0, 6000, 0, marks=marks, breakpoints=points))
    assert first.cache_write_tokens == 5000
    assert first.write_usd == pytest.approx((2000 * 2.0 + 3000 * 1.25) * 3.0 / M)
    # 20 minutes later the 5m breakpoint has lapsed, the 1h one has not
    later = bill_one(rules, Request(1200, 6000, 0, marks=marks, breakpoints=points))
    assert (later.cache_read_tokens, later.cache_write_tokens, later.input_tokens) == (
        2000,
        3000,
        1000,
    )


def test_anthropic_assumes_a_breakpoint_where_a_log_request_meets_an_earlier_one() -> None:
    rules = anthropic()
    a = bill_one(rules, blocks(0, shared=20, total=24, tag="a"))  # nothing earlier to share
    b = bill_one(rules, blocks(10, shared=20, total=25, tag="b"))  # shares 20 blocks: writes
    c = bill_one(rules, blocks(20, shared=20, total=22, tag="c"))  # reads them
    assert (a.cache_write_tokens, a.cache_read_tokens) == (0, 0)
    assert (b.cache_write_tokens, b.cache_read_tokens) == (20 * 128, 0)
    assert (c.cache_write_tokens, c.cache_read_tokens) == (0, 20 * 128)
    notes = " ".join(rules.notes())
    assert "2 requests with an assumed 5m breakpoint" in notes
    assert "1 request with no breakpoint" in notes


# --- OpenAI and Gemini implicit ------------------------------------------------------------------


def openai(retention: float = 600.0) -> AutomaticPrefixRules:
    return AutomaticPrefixRules("openai", GPT, 1024, 128, retention, extended_retention_s=86400.0)


def test_openai_counts_cached_tokens_from_1024_in_128_steps() -> None:
    rules = openai()
    assert [rules.cached_len(n) for n in (0, 1023, 1024, 1100, 1152, 1279, 5000)] == [
        0,
        0,
        1024,
        1024,
        1152,
        1152,
        4992,
    ]


def test_openai_reads_the_longest_prefix_used_within_the_retention() -> None:
    rules = openai()
    assert bill_one(rules, blocks(0, shared=10, total=12, tag="a")).cache_read_tokens == 0
    hit = bill_one(rules, blocks(599, shared=10, total=11, tag="b"))
    assert hit.cache_read_tokens == 1280 and hit.read_usd == pytest.approx(1280 * 0.1 / M)
    assert hit.cache_write_tokens == 0 and hit.input_tokens == hit.prompt_tokens - 1280
    # retention counts from the last use: 1198 is within 600 s of 599, then 1799 is not of 1198
    assert bill_one(rules, blocks(1198, shared=10, total=10, tag="c")).cache_read_tokens == 1280
    assert bill_one(rules, blocks(1198 + 601, shared=10, total=10, tag="d")).cache_read_tokens == 0


def test_openai_short_prompts_and_prefixes_are_not_cached() -> None:
    rules = openai()
    bill_one(rules, blocks(0, shared=7, total=7, tag="a"))  # 903 tokens
    assert bill_one(rules, blocks(1, shared=7, total=8, tag="b")).cache_read_tokens == 0


def test_openai_24h_retention_where_the_model_has_it() -> None:
    req = Request(0, 3000, 0, marks=((2048, "p"),), retention="24h")
    later = Request(20 * 3600, 3000, 0, marks=((2048, "p"),))
    rules = openai()
    bill_one(rules, req)
    assert bill_one(rules, later).cache_read_tokens == 2048
    plain = AutomaticPrefixRules("openai", GPT, 1024, 128, 600.0, extended_retention_s=None)
    bill_one(plain, req)
    assert bill_one(plain, later).cache_read_tokens == 0


def test_gemini_implicit_has_its_own_minimum() -> None:
    rules = AutomaticPrefixRules("gemini implicit", GEMINI, 2048, 1, 300.0)
    bill_one(rules, Request(0, 3000, 0, marks=((1536, "p"), (2560, "q"))))
    short = bill_one(rules, Request(10, 3000, 0, marks=((1536, "p"), (2600, "r"))))
    assert short.cache_read_tokens == 0  # shares only 1536 tokens
    long = bill_one(rules, Request(20, 3000, 0, marks=((1536, "p"), (2560, "q"))))
    assert long.cache_read_tokens == 2560 and long.read_usd == pytest.approx(2560 * 0.125 / M)


# --- Gemini explicit -----------------------------------------------------------------------------


def handle_req(t: float, ttl: float = 3600.0, sliding: bool = False) -> Request:
    return Request(t, 12000, 0, marks=((10000, "doc"),), handles=(Pin(10000, ttl, sliding),))


def test_gemini_explicit_creation_reads_and_storage_to_expiry() -> None:
    rules = GeminiExplicitRules(GEMINI, GeminiTerms())
    first = bill_one(rules, handle_req(0))
    assert first.cache_write_tokens == 10000
    assert first.write_usd == pytest.approx(10000 * 1.25 / M)  # created at the input price
    assert (first.cache_read_tokens, first.input_tokens) == (10000, 2000)
    second = bill_one(rules, handle_req(1800))
    assert (second.cache_write_tokens, second.cache_read_tokens) == (0, 10000)
    closing = Bill()
    rules.close(1800, closing)
    assert closing.storage_token_hours == pytest.approx(10000 * 1.0)  # billed to its expiry
    assert closing.storage_usd == pytest.approx(10000 * 4.5 / M)


def test_gemini_explicit_expired_caches_are_created_again_sliding_ones_extend() -> None:
    rules = GeminiExplicitRules(GEMINI, GeminiTerms())
    bill_one(rules, handle_req(0))
    again = bill_one(rules, handle_req(3601))
    assert again.cache_write_tokens == 10000
    assert again.storage_token_hours == pytest.approx(10000)  # the first one, closed
    sliding = GeminiExplicitRules(GEMINI, GeminiTerms())
    for t in (0, 3000, 6000):
        assert bill_one(sliding, handle_req(t, sliding=True)).cache_read_tokens == 10000
    closing = Bill()
    sliding.close(6000, closing)
    assert sliding.num_created == 1
    assert closing.storage_token_hours == pytest.approx(10000 * (6000 + 3600) / 3600)


def test_gemini_explicit_storage_of_the_issue_scenario_is_162_dollars() -> None:
    """10,000 requests a day for 30 days on one 50,000-token prefix with 500 output tokens: one
    explicit cache held 720 hours at $4.50 per million tokens per hour = $162."""
    scenario = Scenario(requests_per_day=10_000, days=30, shared_prefix_tokens=50_000,
                        unique_tokens=500, output_tokens=500)  # fmt: skip
    prices = ModelPrices(
        "gemini", "priced-here", Tier(1.25, 10.0, 0.125), storage_per_mtok_hour=4.50
    )
    (bill,) = replay([GeminiExplicitRules(prices, GeminiTerms())], scenario.requests())
    assert bill.num_requests == 300_000
    assert bill.storage_token_hours == 50_000 * 720
    assert bill.storage_usd == pytest.approx(162.0, abs=1e-9)
    assert bill.cache_read_tokens == 300_000 * 50_000 and bill.cache_write_tokens == 50_000


def test_replay_refuses_requests_out_of_time_order() -> None:
    with pytest.raises(ValueError, match="time order"):
        replay([anthropic()], [doc(10), doc(5)])
