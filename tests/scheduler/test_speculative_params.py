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
