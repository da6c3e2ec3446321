"""Speculative decoding with the sampling parameters that read each row's own state, on a tiny
random Llama: logprobs (every emitted token's own row), penalties counting the accepted drafts
before a row, and min_new_tokens banning stop tokens on the rows still under it; each the same
as without speculation, greedy, with the pool whole after every step."""

from __future__ import annotations

import pytest
from test_speculative import _build, _fresh, _prompt, _repetitive, _req, _run


@pytest.fixture(scope="module")
def plain(tiny_llama_path):
    return _build(tiny_llama_path, 0)


@pytest.fixture(scope="module")
def spec(tiny_llama_path):
    return _build(tiny_llama_path, 4)


def _pair(plain, spec, make):
    """Run make() on both (the answers cached first on spec, so its drafts are accepted)."""
    _fresh(plain, spec)
    ref = make()
    _run(plain, ref)
    _run(spec, make())
    got = make()
    _run(spec, got)
    return ref, got


def test_logprobs_are_each_rows_own(plain, spec) -> None:
    def make():
        return [
            _req("a", _repetitive(31), 30, return_logprob=True, top_logprobs_num=3),
            _req("b", _prompt(32, 20), 30, return_logprob=True),
        ]

    ref, got = _pair(plain, spec, make)
    for r, g in zip(ref, got):
        assert g.output_ids == r.output_ids and g.spec_accepted > 10
        assert len(g.output_logprobs) == len(g.output_ids)
        assert g.output_logprobs == pytest.approx(r.output_logprobs, abs=1e-4)
        assert len(g.output_top_logprobs) == len(r.output_top_logprobs)
        for tg, tr in zip(g.output_top_logprobs, r.output_top_logprobs):
            assert [t for _, t in tg] == [t for _, t in tr]
            assert [v for v, _ in tg] == pytest.approx([v for v, _ in tr], abs=1e-4)


@pytest.mark.parametrize(
    "params",
    [
        {"repetition_penalty": 1.3},
        {"frequency_penalty": 0.8},
        {"presence_penalty": 1.5, "frequency_penalty": 0.3},
    ],
)
def test_penalties_count_the_accepted_drafts(plain, spec, params) -> None:
    def make():
        return [_req("a", _repetitive(33), 40, **params), _req("b", _prompt(34, 20), 40, **params)]

    ref, got = _pair(plain, spec, make)
    assert [g.output_ids for g in got] == [r.output_ids for r in ref]
    assert sum(g.spec_accepted for g in got) > 10


def test_min_new_tokens_bans_stops_on_the_rows_under_it(plain, spec) -> None:
    """Stop at a token first picked at position k, with min_new_tokens k (row k is past the
    ban, the rows before it in the same verified draft are not) and k + 1 (banned there)."""
    _fresh(plain)
    ids = _prompt(35, 20)
    free = _run(plain, [_req("f", ids, 30)])["f"]
    ks = [k for k in range(2, 12) if free.index(free[k]) == k][:3]

    def make():
        return [
            _req(f"m{k}-{m}", ids, 30, stop_token_ids=[free[k]], min_new_tokens=m)
            for k in ks
            for m in (k, k + 1)
        ]

    ref, got = _pair(plain, spec, make)
    assert [g.output_ids for g in got] == [r.output_ids for r in ref]
    assert [r.output_ids for r in ref[::2]] == [free[: k + 1] for k in ks]
    assert sum(g.spec_accepted for g in got) > 10


def test_logit_bias_on_every_verifying_row(plain, spec) -> None:
    """A bias that changes the greedy output (the free output's tokens pushed down) gives the
    same tokens with speculation as without."""
    _fresh(plain)
    ids = _repetitive(36)
    free = _run(plain, [_req("f", ids, 30)])["f"]
    bias = {free[4]: -100.0, free[9]: -2.0}

    def make():
        return [
            _req("a", ids, 30, logit_bias=bias),
            _req("b", _prompt(37, 20), 30, logit_bias=bias),
        ]

    ref, got = _pair(plain, spec, make)
    assert [g.output_ids for g in got] == [r.output_ids for r in ref]
    assert ref[0].output_ids != free and free[4] not in ref[0].output_ids
    assert sum(g.spec_accepted for g in got) > 10


def test_allowed_token_ids_on_every_verifying_row(plain, spec) -> None:
    """An allowed set that leaves out a token of the free output gives the same tokens with
    speculation as without, every one of them in the set."""
    _fresh(plain)
    ids = _repetitive(36)
    free = _run(plain, [_req("f", ids, 30)])["f"]
    allowed = sorted((set(ids) | set(free)) - {free[6]})

    def make():
        return [_req("a", ids, 30, allowed_token_ids=allowed)]

    ref, got = _pair(plain, spec, make)
    assert [g.output_ids for g in got] == [r.output_ids for r in ref]
    assert set(ref[0].output_ids) <= set(allowed) and ref[0].output_ids != free
    assert sum(g.spec_accepted for g in got) > 5


def test_prompt_logprob_passes_are_not_row_costs(spec) -> None:
    """The row cost is measured on passes whose every row is sampled: a prompt whose
    logprobs were asked has logits on every row but runs as an extend, so its pass is not
    one; the decode passes after it are."""
    _fresh(spec)
    cost = spec.speculation.depths.cost
    before = cost.passes
    _run(spec, [_req("p", _prompt(38, 20), 1, return_logprob=True, logprob_start_len=0)])
    assert cost.passes == before  # one pass: the prompt's
    _run(spec, [_req("q", _prompt(39, 20), 3)])
    assert cost.passes > before  # its decode passes (its prompt's: one sampled row of 20)
