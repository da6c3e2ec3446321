"""The sampler never emits an id outside the vocabulary: non-finite logits, extreme parameters
that bypassed validation, rows where a grammar and the stop-token ban leave nothing."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radixrt.core import Req, SamplingParams
from radixrt.executor.sampler import NO_TOKEN, Sampler

V = 64
EOS = 0


def raw_req(output_ids: list[int] | None = None, **sp: object) -> Req:
    """A request whose params skip validation (what a bug upstream could let through)."""
    return Req("r", [3, 4, 5, 3], SamplingParams(**sp), output_ids=list(output_ids or []))


def mask_allowing(rows: list[list[int]]) -> torch.Tensor:
    """(B, ceil(V / 32)) int32 bitmask with exactly the given tokens allowed per row."""
    words = torch.zeros(len(rows), (V + 31) // 32, dtype=torch.int64)
    for i, allowed in enumerate(rows):
        for t in allowed:
            words[i, t // 32] |= 1 << (t % 32)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


@pytest.mark.parametrize(
    "sp",
    [
        {"repetition_penalty": 1e-40},  # logits / 1e-40 overflow to inf, softmax NaN
        {"repetition_penalty": 1e-40, "temperature": 0.0},
        {"repetition_penalty": 1e-40, "top_p": 0.5},
        {"repetition_penalty": 1e-40, "top_k": 5},
        {"temperature": 3e38},
        {"temperature": 1e-30, "top_p": 0.9, "min_p": 0.1},
        {"frequency_penalty": 1e30},
    ],
)
def test_extreme_parameters_give_a_token_in_the_vocabulary(sp: dict) -> None:
    torch.manual_seed(0)
    logits = torch.randn(4, V) * 30
    reqs = [
        raw_req(output_ids=[3, 3, 7], return_logprob=True, top_logprobs_num=3, **sp)
        for _ in range(4)
    ]
    out = Sampler(V, [EOS]).sample(logits, reqs)
    assert all(0 <= t < V for t in out.next_token_ids), out.next_token_ids


@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.3])
def test_non_finite_logits(temperature: float) -> None:
    logits = torch.randn(3, V)
    logits[0] = float("nan")  # nothing usable: no token
    logits[1, :] = float("nan")
    logits[1, 9] = 2.0  # one finite logit among NaN: that one
    logits[2, 17] = float("inf")  # +inf wins
    reqs = [raw_req(temperature=temperature, return_logprob=True) for _ in range(3)]
    out = Sampler(V, [EOS]).sample(logits, reqs)
    assert out.next_token_ids == [NO_TOKEN, 9, 17]
    assert out.logprobs is not None and len(out.logprobs) == 3


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_grammar_allowing_only_eos_wins_over_min_new_tokens(temperature: float) -> None:
    """The min_new_tokens ban is lifted where the grammar allows nothing else."""
    logits = torch.randn(2, V)
    reqs = [raw_req(temperature=temperature, min_new_tokens=5) for _ in range(2)]
    mask = mask_allowing([[EOS], [EOS, 11]])
    out = Sampler(V, [EOS]).sample(logits, reqs, mask)
    assert out.next_token_ids == [EOS, 11]


def test_a_row_with_nothing_allowed_gets_no_token_and_others_are_unharmed() -> None:
    logits = torch.randn(3, V)
    reqs = [raw_req(temperature=1.0), raw_req(temperature=0.0), raw_req(top_k=3)]
    mask = mask_allowing([[], [], [20, 21]])
    out = Sampler(V, [EOS]).sample(logits, reqs, mask)
    assert out.next_token_ids[:2] == [NO_TOKEN, NO_TOKEN]
    assert out.next_token_ids[2] in (20, 21)


@settings(max_examples=60, deadline=None)
@given(
    temperature=st.one_of(st.just(0.0), st.floats(1e-6, 1e6)),
    top_p=st.floats(0.01, 1.0),
    top_k=st.sampled_from([-1, 1, 3, V, V + 10]),
    min_p=st.floats(0.0, 1.0),
    rep=st.floats(1e-3, 1e3),
    scale=st.sampled_from([1.0, 1e4, 1e30, 3e38]),
    allowed=st.lists(st.integers(0, V - 1), min_size=1, max_size=6),
)
def test_any_parameters_sample_an_allowed_token(
    temperature: float,
    top_p: float,
    top_k: int,
    min_p: float,
    rep: float,
    scale: float,
    allowed: list[int],
) -> None:
    torch.manual_seed(1)
    logits = (torch.randn(2, V) * scale).clamp(-3e38, 3e38)
    sp = dict(
        temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, repetition_penalty=rep
    )
    reqs = [raw_req(output_ids=[allowed[0]], **sp) for _ in range(2)]
    out = Sampler(V, [EOS]).sample(logits, reqs, mask_allowing([allowed, allowed]))
    assert all(t in allowed for t in out.next_token_ids), (out.next_token_ids, allowed)


DIGITS = list(range(10, 20))


def test_end_on_exit_gives_eos_the_mass_the_grammar_refuses() -> None:
    """Digits and EOS allowed; the model prefers token 40 (refused). With end_on_exit, EOS
    carries token 40's probability and wins; without, the best digit does; a min_new_tokens
    ban or a grammar that cannot end yet keeps the digits."""
    logits = torch.full((1, V), -5.0)
    logits[0, 40] = 6.0  # the model's choice, outside the grammar
    logits[0, 12] = 3.0  # the best digit
    ends = mask_allowing([[*DIGITS, EOS]])
    cannot_end = mask_allowing([DIGITS])
    sampler = Sampler(V, [EOS])
    assert sampler.sample(
        logits, [raw_req(temperature=0.0, end_on_exit=True)], ends
    ).next_token_ids == [EOS]
    assert sampler.sample(logits, [raw_req(temperature=0.0)], ends).next_token_ids == [12]
    banned = raw_req(temperature=0.0, end_on_exit=True, min_new_tokens=3)
    assert sampler.sample(logits, [banned], ends).next_token_ids == [12]
    assert sampler.sample(
        logits, [raw_req(temperature=0.0, end_on_exit=True)], cannot_end
    ).next_token_ids == [12]


def test_end_on_exit_samples_ending_with_the_refused_mass() -> None:
    logits = torch.zeros(1, V)
    # Every token has mass 1 but token 40, which has 3; only 12 and EOS are allowed, so EOS
    # carries all the mass but token 12's.
    logits[0, 40] = math.log(3.0)
    n = 4000
    batch = logits.repeat(n, 1)
    mask = mask_allowing([[12, EOS]] * n)
    reqs = [raw_req(temperature=1.0, end_on_exit=True) for _ in range(n)]
    ids = Sampler(V, [EOS]).sample(batch, reqs, mask).next_token_ids
    assert set(ids) <= {12, EOS}
    share = ids.count(EOS) / n
    total = math.exp(logits[0, 40].item()) + 1 + 1 + (V - 3) * 1.0  # every other token: e^0
    want = (total - 1) / total  # all mass but the one allowed digit's
    assert abs(share - want) < 0.03, (share, want)
