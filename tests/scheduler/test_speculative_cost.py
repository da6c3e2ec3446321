"""What a draft row must be worth: StepCost's measured row cost against a pass's fixed cost,
the acceptance rates it is weighed against, and the scheduler drafting only where the two say
a draft pays (outputs unchanged either way, the pool whole after every step)."""

from __future__ import annotations

import random

import pytest
from test_speculative import _build, _fresh, _prompt, _req, _run

from radixrt.core import Req
from radixrt.scheduler.speculative import BaseDrafter
from radixrt.scheduler.speculative.acceptance import (
    PRIOR_WEIGHT,
    Acceptance,
    engine_rates,
    paying_depth,
)
from radixrt.scheduler.speculative.draft_depth import DraftDepth
from radixrt.scheduler.speculative.step_cost import (
    MIN_SAMPLES,
    PRIOR_K,
    REFIT_EVERY,
    STALE_PASSES,
    StepCost,
)


def _feed(cost: StepCost, fixed: float, per_row: float, rows: list[int], rng: random.Random,
          stalls: bool = False) -> None:  # fmt: skip
    for i in range(4 * MIN_SAMPLES * REFIT_EVERY):
        r = rows[i % len(rows)]
        t = (fixed + per_row * r) * rng.uniform(0.97, 1.03)
        if stalls and i % 7 == 0:
            t *= 6.0  # another process took the core: the medians keep it out
        cost.observe(r, t)


def test_the_prior_holds_until_two_row_counts_are_measured() -> None:
    cost = StepCost("cpu")
    assert cost.k == PRIOR_K["cpu"] and StepCost("cuda").k == PRIOR_K["cuda"]
    _feed(cost, 4e-3, 3e-4, [8], random.Random(0))  # one row count: no slope to fit
    assert cost.k == PRIOR_K["cpu"] and not cost.fitted


@pytest.mark.parametrize("stalls", [False, True])
def test_the_fit_finds_the_fixed_cost_in_rows(stalls: bool) -> None:
    cost = StepCost("cpu")
    _feed(cost, 4e-3, 2.5e-4, [1, 4, 8, 9, 12, 16], random.Random(1), stalls)
    assert cost.fitted and cost.k == pytest.approx(16.0, rel=0.15)
    assert cost.min_accept(1, 1) < 0.1 < cost.min_accept(8, 8) < cost.min_accept(16, 16)


def test_a_falling_line_keeps_the_prior() -> None:
    cost = StepCost("cpu")
    _feed(cost, 9e-3, -2e-4, [2, 10], random.Random(2))
    assert cost.k == PRIOR_K["cpu"] and not cost.fitted


def test_rates_and_paying_depth() -> None:
    a = Acceptance()
    assert a.rate(0.5) == pytest.approx(0.5)  # nothing seen: the prior
    a.record(6, 2)  # two kept, then a miss: 3 trials
    assert a.rate(0.5) == pytest.approx((2 + PRIOR_WEIGHT * 0.5) / (3 + PRIOR_WEIGHT))
    a.record(4, 4)  # all kept: 4 trials, no miss
    assert a.hits == pytest.approx(2 * 0.8 + 4) and a.trials == pytest.approx(3 * 0.8 + 4)
    assert paying_depth(0.5, 0.2, 6) == 2  # 0.5, 0.25 clear 0.2; 0.125 does not
    assert paying_depth(0.9, 0.05, 6) == 6
    assert paying_depth(0.3, 0.4, 6) == 0
    assert paying_depth(1.0, 0.9, 5) == 5
    untrusted, trusted = engine_rates()
    assert untrusted.plain_rate() < trusted.plain_rate()


class _FirstRight(BaseDrafter):
    """Drafts the token the model picks next, then a token it never picks: half of the
    drafted tokens it tries are kept."""

    def __init__(self, ref: dict[str, list[int]]) -> None:
        self.ref = ref

    def propose(self, req: Req, max_tokens: int) -> list[int]:
        right = self.ref[req.rid][len(req.output_ids) : len(req.output_ids) + 1]
        return (right + [0] * max_tokens)[:max_tokens]


@pytest.mark.parametrize("k,adaptive", [(0.01, True), (1e6, True), (0.01, False)])
def test_drafts_only_where_rows_are_cheap_enough(tiny_llama_path, monkeypatch, k: float,
                                                 adaptive: bool) -> None:  # fmt: skip
    """The same drafts at a row cost that no acceptance repays (K = 0.01: a row costs 100 times
    a pass's fixed part) and at one where rows are free: none drafted in the first, and
    the same outputs in both; with --disable-adaptive-draft-depth drafted at any cost."""
    monkeypatch.setattr(StepCost, "_fit", lambda self: None)  # keep K as set
    plain = _build(tiny_llama_path, 0)
    s = _build(tiny_llama_path, 4, disable_adaptive_draft_depth=not adaptive)
    prompts = [_prompt(60 + i, 20) for i in range(4)]
    ref = _run(plain, [_req(f"r{i}", ids, 30) for i, ids in enumerate(prompts)])
    s.speculation.drafter = _FirstRight(ref)
    s.speculation.depths.cost.k = k
    _fresh(s)
    reqs = [_req(f"r{i}", ids, 30) for i, ids in enumerate(prompts)]
    assert _run(s, reqs) == ref
    drafted = sum(r.spec_drafted for r in reqs)
    if k < 1.0 and adaptive:
        assert drafted == 0
    else:  # each verification keeps about one: most steps emit two tokens
        assert drafted > 0 and sum(r.spec_accepted for r in reqs) > 0.3 * 4 * 30


def test_the_curve_follows_rows_that_cost_more_past_a_tile() -> None:
    """A pass costs 4 ms + 0.2 ms a row up to 16 rows and 0.6 ms a row past them: the
    curve through the buckets' medians follows both slopes, where one line would not."""
    cost = StepCost("cpu")
    rng = random.Random(3)

    def true_ms(r: int) -> float:
        return 4.0 + 0.2 * min(r, 16) + 0.6 * max(r - 16, 0)

    counts = [1, 4, 8, 12, 16, 24, 32, 48, 64]
    for i in range(4 * MIN_SAMPLES * REFIT_EVERY):
        r = counts[i % len(counts)]
        cost.observe(r, true_ms(r) * 1e-3 * rng.uniform(0.97, 1.03))
    assert cost.fitted
    for r in [2, 8, 16, 20, 40, 64, 80]:
        assert cost.seconds(r) == pytest.approx(true_ms(r) * 1e-3, rel=0.05)
    # One more row at 8 rows costs 0.2 ms of 5.6; at 48 rows 0.6 ms of 26.4.
    assert cost.min_accept(8, 8) == pytest.approx(8 * 0.2 / 5.6, rel=0.15)
    assert cost.min_accept(8, 48) == pytest.approx(8 * 0.6 / 26.4, rel=0.15)


def test_allot_takes_the_likeliest_tokens_while_tokens_per_second_grow() -> None:
    """allot on a known curve: the allotment maximises expected tokens over the pass's time,
    the likelier chain first, each chain a prefix; nothing where rows cost too much."""
    depths = DraftDepth("cpu")
    cost = depths.cost
    cost.fitted, cost.curve = True, [(1.0, 5.0), (16.0, 8.0), (64.0, 40.0)]
    chains = [(0.95, 15, 0.0), (0.5, 15, 0.0), (0.9, 15, 0.0)]
    got = depths.allot(3, 3, chains)

    def value(d: list[int]) -> float:
        kept = sum(sum(r**i for i in range(1, n + 1)) for (r, _, _), n in zip(chains, d))
        return (3 + kept) / cost.seconds(3 + sum(d))

    assert got[0] >= got[2] >= got[1] and sum(got) > 0
    # No other allotment of prefixes is better (brute force over a grid around it).
    for a in range(16):
        for c in range(16):
            for b in range(0, 16, 3):
                assert value([a, b, c]) <= value(got) + 1e-12
    cost.curve = [(1.0, 1.0), (2.0, 20.0)]  # a row costs 19 passes' fixed part: none pays
    assert depths.allot(1, 1, [(0.99, 8, 0.0)]) == [0]
    assert depths.allot(1, 1, []) == []
    # A constrained chain's tokens cost their masks too: 20 s a token on a 5 s pass.
    cost.curve = [(1.0, 5.0), (16.0, 5.5)]
    assert depths.allot(1, 1, [(0.9, 8, 0.0)]) == [8]
    assert depths.allot(1, 1, [(0.9, 8, 20.0)]) == [0]
    assert 0 < depths.allot(1, 1, [(0.9, 8, 1.0)])[0] < 8


def test_a_bucket_no_pass_falls_in_leaves_the_curve() -> None:
    """A fit that once said rows cost too much (draft rows measured during a stall) is not
    kept forever by a stream that then runs one-row passes only: the stale bucket leaves the
    curve and the prior returns, so drafts are tried and measured again."""
    cost = StepCost("cpu")
    _feed(cost, 1e-3, 2e-3, [1, 5], random.Random(4))  # rows look dear: K = 0.5
    assert cost.fitted and cost.min_accept(1, 1) > 0.5
    for _ in range(STALE_PASSES + REFIT_EVERY):
        cost.observe(1, 3e-3)
    assert not cost.fitted and cost.k == PRIOR_K["cpu"]
    assert cost.min_accept(1, 1) == pytest.approx(1 / (PRIOR_K["cpu"] + 1))
    _feed(cost, 1e-3, 2e-3, [1, 5], random.Random(5))  # measured again: the same verdict
    assert cost.fitted and cost.min_accept(1, 1) > 0.5


def test_not_adaptive_allots_every_draft_whole() -> None:
    """--disable-adaptive-draft-depth: no bar, every chain allotted whole, no pass timed,
    even where the measured rows would forbid any draft."""
    depths = DraftDepth("cpu", adaptive=False)
    depths.cost.fitted, depths.cost.curve = True, [(1.0, 1.0), (2.0, 100.0)]
    assert depths.bar([]) == 0.0
    assert depths.allot(1, 1, [(0.01, 6, 0.0), (0.5, 3, 1.0)]) == [6, 3]
    depths.observe(4, 4, 1.0)
    assert depths.cost.passes == 0
    assert DraftDepth("cpu").allot(1, 1, [(0.01, 6, 0.0)]) == [0]
