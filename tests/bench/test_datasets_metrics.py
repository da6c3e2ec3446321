"""Serving-benchmark datasets (seeded, lengths as asked) and metrics from synthetic timestamps."""

from __future__ import annotations

import pytest

from benchmarks.load.datasets import DATASETS, WordSource, make_dataset
from benchmarks.load.metrics import RequestRecord, stats, summarize, ttft_by_turn

WORDS = [f"w{i}" for i in range(500)]


def _words(seed: int = 0) -> WordSource:
    return WordSource(WORDS, seed)


@pytest.mark.parametrize("name", DATASETS)
def test_same_seed_same_dataset(name: str) -> None:
    a, b = make_dataset(name, _words(1)), make_dataset(name, _words(1))
    assert a == b
    assert a != make_dataset(name, _words(2))


def test_shared_prefix_lengths_and_sharing() -> None:
    d = make_dataset(
        "shared-prefix",
        _words(),
        num_groups=3,
        prompts_per_group=4,
        system_len=20,
        question_len=5,
        output_len=7,
    )
    assert len(d.sessions) == 12 and d.num_requests == 12
    for i, s in enumerate(d.sessions):
        assert len(s.turns[0].split()) == 25 and s.turn_lens == (25,) and s.output_len == 7
        group_first = d.sessions[i % 3].turns[0].split()
        assert s.turns[0].split()[:20] == group_first[:20]  # the group's system prompt
        assert s.shared_len == (0 if i < 3 else 20)
    assert d.optimal_hit_rate() == pytest.approx((12 - 3) * 20 / (12 * 25))


def test_random_has_the_asked_lengths() -> None:
    d = make_dataset("random", _words(), num_prompts=5, input_len=33, output_len=4)
    assert [len(s.turns[0].split()) for s in d.sessions] == [33] * 5
    assert d.optimal_hit_rate() == 0.0


def test_multi_turn_and_agent_optimal_hits() -> None:
    mt = make_dataset(
        "multi-turn", _words(), num_conversations=2, num_turns=3, turn_len=10, output_len=4
    )
    s = mt.sessions[0]
    assert [len(t.split()) for t in s.turns] == [10, 10, 10]
    assert s.prompt_lens() == [10, 24, 38] and s.optimal_cached() == [0, 13, 27]
    assert mt.optimal_hit_rate() == pytest.approx(40 / 72)

    ag = make_dataset(
        "agent",
        _words(),
        num_agents=3,
        num_steps=2,
        tools_len=50,
        task_len=5,
        observation_len=6,
        output_len=3,
    )
    tools = ag.sessions[0].turns[0].split()[:50]
    assert all(s.turns[0].split()[:50] == tools for s in ag.sessions)
    assert [len(t.split()) for t in ag.sessions[1].turns] == [55, 6]
    assert ag.sessions[1].optimal_cached() == [50, 57]


def test_words_are_single_tokens(smollm2_path) -> None:
    from radixrt.model.families.loader import load_tokenizer

    tok = load_tokenizer(smollm2_path)
    d = make_dataset(
        "shared-prefix",
        WordSource.from_tokenizer(tok, 0),
        num_groups=2,
        prompts_per_group=2,
        system_len=40,
        question_len=9,
    )
    for s in d.sessions:
        assert len(tok.encode(s.turns[0], add_special_tokens=False)) == 49


def _record(
    start: float,
    chunks: list[float],
    end: float,
    out: int,
    turn: int = 0,
    cached: int | None = None,
    prompt: int = 10,
) -> RequestRecord:
    return RequestRecord(0, turn, start, chunks, end, prompt, out, cached)


def test_ttft_tpot_itl_from_timestamps() -> None:
    r = _record(1.0, [1.5, 1.6, 1.8, 2.1], 2.1, out=5)  # the second chunk held two tokens
    assert r.ttft == pytest.approx(0.5)
    assert r.tpot == pytest.approx(0.6 / 4)
    assert r.itls == pytest.approx([0.1, 0.2, 0.3])
    assert r.e2e == pytest.approx(1.1)
    assert _record(0.0, [0.2], 0.2, out=1).tpot is None


def test_summary_percentiles_and_hit_rate() -> None:
    recs = [
        _record(0.0, [0.1 * (i + 1), 0.1 * (i + 1) + 0.05], 0.1 * (i + 1) + 0.05, out=2, cached=5)
        for i in range(100)
    ]
    failed = RequestRecord(0, 0, 0.0, error="HTTP 500")
    s = summarize([*recs, failed], duration_s=10.0)
    assert s["completed"] == 100 and s["failed"] == 1 and s["errors"] == ["HTTP 500"]
    assert s["request_throughput"] == pytest.approx(10.0)
    assert s["output_throughput"] == pytest.approx(20.0)
    assert s["mean_ttft_s"] == pytest.approx(5.05)
    assert s["median_ttft_s"] == pytest.approx(5.05)
    assert s["p99_ttft_s"] == pytest.approx(9.9)
    assert s["mean_itl_s"] == pytest.approx(0.05) and s["mean_tpot_s"] == pytest.approx(0.05)
    assert s["hit_rate"] == pytest.approx(0.5) and s["cached_tokens"] == 500
    assert s["mean_ttft_hit_s"] == pytest.approx(5.05) and s["mean_ttft_miss_s"] is None


def test_summary_without_cache_reports_and_by_turn() -> None:
    recs = [
        _record(0.0, [1.0], 1.0, 1, turn=0),
        _record(0.0, [3.0], 3.0, 1, turn=0),
        _record(5.0, [5.5], 5.5, 1, turn=1),
    ]
    s = summarize(recs, 6.0)
    assert s["hit_rate"] is None and s["cached_tokens"] is None
    assert ttft_by_turn(recs) == {0: pytest.approx(2.0), 1: pytest.approx(0.5)}
    assert stats([]) == {"mean": None, "median": None, "p99": None}
    assert stats([3.0])["p99"] == 3.0
