"""Predicted outputs (SamplingParams.prediction_ids) on a tiny random Llama: drafts from the
prediction with speculation off and on, greedy and seeded outputs identical to those without
a prediction (right, partly right, wrong), the prediction's counts on the request alone (the
engine's acceptance rates untouched), the pool whole after every step and after an abort in
the middle; and PredictionIndex's alignment of the output with the prediction."""

from __future__ import annotations

import pytest
from test_speculative import _build, _check, _fresh, _prompt, _req, _run

from radixrt.core import SamplingParams
from radixrt.scheduler.speculative.prediction import (
    PREDICTION_DRAFT_TOKENS,
    RECENT_PREDICTION_TOKENS,
    RECENT_PREDICTIONS,
    PredictionIndex,
)
from radixrt.scheduler.speculative.step_cost import PRIOR_K, StepCost


def _prior_cost(s):
    # The prior row cost, not this machine's measured one (test_speculative.py says why).
    s.speculation.depths.cost = StepCost(fixed_k=PRIOR_K["cpu"])
    return s


@pytest.fixture(scope="module")
def off(tiny_llama_path):
    return _prior_cost(_build(tiny_llama_path, 0))


@pytest.fixture(scope="module")
def lookup(tiny_llama_path):
    return _prior_cost(_build(tiny_llama_path, 4))


def _greedy(s, ids, n=48, **params):
    _fresh(s)
    r = _req("ref", ids, n, **params)
    _run(s, [r])
    assert r.spec_drafted == 0
    return r.output_ids


def test_index_starts_at_the_prediction_and_realigns_after_a_change() -> None:
    pred = [10, 11, 12, 13, 14, 15, 16, 17]
    idx = PredictionIndex(pred)
    assert idx.draft([], 3) == [10, 11, 12]
    assert idx.draft([10, 11], 3) == [12, 13, 14]
    # The output replaced 13 by 99 and went on with 14: drafting resumes after 14.
    assert idx.draft([10, 11, 12, 99, 14], 4) == [15, 16, 17]
    assert idx.draft([10, 11, 12, 99, 14, 15, 16, 17], 4) == []  # the prediction's end
    assert idx.draft([7, 8], 4) == []  # nothing of the output occurs in it
    assert idx.draft([1], 0) == []


def test_index_takes_a_repeated_line_in_order() -> None:
    line = [5, 6, 7]
    pred = [1, *line, 2, *line, 3]
    idx = PredictionIndex(pred)
    assert idx.draft([1, 5], 2) == [6, 7]
    assert idx.draft([1, 5, 6, 7, 2, 5], 2) == [6, 7]  # the second occurrence, not the first
    assert idx.cursor == 6
    assert idx.draft([1, 5, 6, 7, 2, 5, 6, 7], 2) == [3]


def test_index_goes_back_only_on_a_longer_match() -> None:
    idx = PredictionIndex([5, 6, 7, 8, 9])
    assert idx.draft([5, 6, 7], 2) == [8, 9]  # cursor at 3
    assert idx.draft([5, 6, 7, 99, 6], 2) == []  # one token behind the cursor: no evidence
    assert idx.draft([1, 5, 6], 2) == [7, 8]  # two tokens behind it: taken


def test_index_prefers_the_longest_match_and_bounds_a_frequent_token() -> None:
    idx = PredictionIndex([5, 1, 2, 9, 6, 1, 2, 3, 4])
    assert idx.draft([8, 6, 1, 2], 4) == [3, 4]  # "6 1 2" at 4..6 beats "1 2" at 1..2
    # A prediction as long as a context of one token: built and matched in one pass each.
    flat = PredictionIndex([13] * 8192)
    assert flat.draft([13] * 40, 3) == [13, 13, 13]
    assert flat.cursor < 8192


def test_prediction_drafts_with_speculation_off(off) -> None:
    ids = _prompt(71, 24)
    ref = _greedy(off, ids)
    _fresh(off)
    r = _req("p", ids, 48, prediction_ids=ref)
    _run(off, [r])
    assert r.output_ids == ref
    # The whole output but the tokens each pass picks itself came from the prediction.
    assert r.prediction_drafted == r.spec_drafted > 0
    assert r.prediction_accepted >= len(ref) - len(ref) // PREDICTION_DRAFT_TOKENS - 2
    assert r.sampling_steps <= len(ref) // 4
    assert off.stats.spec_accepted_tokens >= r.prediction_accepted


@pytest.mark.parametrize("which", ["changed", "wrong", "short"])
def test_outputs_are_the_same_whatever_the_prediction(off, lookup, which) -> None:
    ids = _prompt(72, 20)
    ref = _greedy(off, ids)
    pred = {
        "changed": ref[:10] + [4242, 4243] + ref[12:30] + ref[35:],  # two edits
        "wrong": _prompt(73, 40),
        "short": ref[:3],
    }[which]
    for s in (off, lookup):
        _fresh(s)
        r = _req("p", ids, 48, prediction_ids=pred)
        _run(s, [r])
        assert r.output_ids == ref
        assert r.prediction_accepted <= r.prediction_drafted <= r.spec_drafted
        if which == "changed":
            assert r.prediction_accepted > 20
            assert r.prediction_drafted > r.prediction_accepted  # the edits were rejected


def test_predicted_drafts_leave_the_engine_rates_alone(off) -> None:
    ids = _prompt(74, 20)
    ref = _greedy(off, ids)
    rates = off.speculation.depths.rates
    before = [(a.hits, a.trials) for a in rates]
    prompt_ends = off.speculation.depths.after_prompts
    before_prompt = (prompt_ends.hits, prompt_ends.trials)
    _fresh(off)
    wrong = _prompt(75, 48)
    reqs = [_req("w", ids, 48, prediction_ids=wrong), _req("r", ids, 48, prediction_ids=ref)]
    _run(off, reqs)
    assert [r.output_ids for r in reqs] == [ref, ref]
    assert reqs[1].prediction_accepted > 0
    assert reqs[0].prediction_drafted > reqs[0].prediction_accepted
    assert [(a.hits, a.trials) for a in rates] == before
    assert (prompt_ends.hits, prompt_ends.trials) == before_prompt


def test_beside_requests_without_one_and_seeded_sampling(off) -> None:
    a, b = _prompt(76, 20), _prompt(77, 30)
    seeded = {"temperature": 1.0, "seed": 11}
    _fresh(off)
    plain = [_req("a", a, 40), _req("b", b, 40)]
    plain.append(_req_sampled("s", a, 40, **seeded))
    _run(off, plain)
    _fresh(off)
    got = [
        _req("a", a, 40, prediction_ids=plain[0].output_ids),
        _req("b", b, 40),
        _req_sampled("s", a, 40, prediction_ids=plain[2].output_ids, **seeded),
    ]
    _run(off, got)
    assert [g.output_ids for g in got] == [p.output_ids for p in plain]
    assert got[0].prediction_accepted > 10 and got[1].spec_drafted == 0
    assert got[2].prediction_drafted > 0


def test_samples_with_one_prediction_share_its_positions(off) -> None:
    """Samples of n (each its own copy of the ids, as they arrive) share the prediction's
    positions, built once, each with its own cursor; at most RECENT_PREDICTIONS are kept."""
    a = _prompt(81, 20)
    seeded = [{"temperature": 1.0, "seed": seed} for seed in (5, 6)]
    _fresh(off)
    plain = [_req_sampled(f"s{i}", a, 40, **p) for i, p in enumerate(seeded)]
    _run(off, plain)
    _fresh(off)
    predicted = list(plain[0].output_ids)
    got = [_req_sampled(f"s{i}", a, 40, prediction_ids=list(predicted), **p)
           for i, p in enumerate(seeded)]  # fmt: skip
    _run(off, got)
    assert [g.output_ids for g in got] == [p.output_ids for p in plain]
    first, second = (g.prediction for g in got)
    assert isinstance(first, PredictionIndex) and isinstance(second, PredictionIndex)
    assert first._after is second._after and first is not second
    drafter = off.speculation.source
    for i in range(RECENT_PREDICTIONS + 2):
        drafter._index([i, i + 1])
    assert len(drafter._recent) == RECENT_PREDICTIONS
    assert tuple(predicted) not in drafter._recent
    half = RECENT_PREDICTION_TOKENS // 2
    drafter._index([1] * half)
    drafter._index([2] * half)  # the two fill the budget: every short one before goes
    assert [len(k) for k in drafter._recent] == [half, half]
    drafter._index([3] * (RECENT_PREDICTION_TOKENS + 1))  # too long to keep: built, not kept
    assert drafter._recent_tokens == 2 * half == sum(len(k) for k in drafter._recent)


def _req_sampled(rid, ids, n, **params):
    from radixrt.core import Req

    return Req(rid, list(ids), SamplingParams(max_new_tokens=n, ignore_eos=True, **params))


def test_abort_in_the_middle_leaves_the_pool_whole(off) -> None:
    ids = _prompt(78, 20)
    ref = _greedy(off, ids, 64)
    _fresh(off)
    r = _req("p", ids, 64, prediction_ids=ref)
    off.add_request(r)
    while len(r.output_ids) < 10:
        off.step()
        _check(off)
    assert r.prediction_accepted > 0
    off.abort("p")
    while not off.is_idle:
        off.step()
        _check(off)
    off.check_pool_whole()
    assert off.kv.cache.protected_size == 0


def test_prediction_ids_are_validated() -> None:
    with pytest.raises(ValueError, match="prediction_ids"):
        SamplingParams.from_dict({"prediction_ids": [1, -2]})
    with pytest.raises(ValueError, match="prediction_ids"):
        SamplingParams.from_dict({"prediction_ids": "abc"})
    sp = SamplingParams.from_dict({"prediction_ids": [1, 70000]})
    assert "prediction token id 70000" in (sp.check_against(4, 49152) or "")
    assert SamplingParams.from_dict({"prediction_ids": None}).prediction_ids == []


def test_a_drafter_that_pays_per_token_is_asked_as_without_a_prediction(tiny_llama_path):
    """Where the prediction has no draft, the configured drafter (here one that, like a draft
    model, does not trust matches) is asked for no more than its own K."""
    from radixrt.scheduler.speculative.drafter import BaseDrafter

    class Recorder(BaseDrafter):
        asked: list[int] = []

        def propose(self, req, max_tokens):
            self.asked.append(max_tokens)
            return []

    s = _prior_cost(_build(tiny_llama_path, 3))
    s.speculation.drafter = Recorder()
    ids = _prompt(79, 20)
    r = _req("p", ids, 40, prediction_ids=_prompt(80, 30))
    _run(s, [r])
    assert Recorder.asked and max(Recorder.asked) <= 3
    assert r.prediction_drafted > 0  # its first draft was the prediction's
