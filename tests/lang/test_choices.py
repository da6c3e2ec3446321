"""The three choice methods on fixed logprobs."""

from __future__ import annotations

import pytest
from radixrt_lang.choices import ChoiceResult

import radixrt.lang as rt

CHOICES = ["yes", "no way", "maybe"]


def test_token_length_normalized_picks_best_mean() -> None:
    # sums: -1.0, -1.2, -0.9; means: -1.0, -0.4, -0.9 -> the long choice wins on the mean
    logprobs = [[-1.0], [-0.4, -0.4, -0.4], [-0.45, -0.45]]
    r = rt.token_length_normalized(CHOICES, logprobs)
    assert isinstance(r, ChoiceResult)
    assert (r.index, r.decision, r.method) == (1, "no way", "token_length_normalized")
    assert r.normalized_prompt_logprobs == pytest.approx([-1.0, -0.4, -0.45])


def test_token_length_normalized_tie_goes_to_first() -> None:
    assert rt.token_length_normalized(["a", "b"], [[-0.5], [-0.25, -0.75]]).index == 0


def test_greedy_token_selection_decides_at_first_difference() -> None:
    # First token: choices 0 and 1 tie at -0.1, choice 2 drops out although its mean is best.
    # Second token: choice 1 (-0.2) beats choice 0 (-2.0).
    logprobs = [[-0.1, -2.0], [-0.1, -0.2, -5.0], [-0.3]]
    assert rt.greedy_token_selection(CHOICES, logprobs).index == 1
    assert rt.token_length_normalized(CHOICES, logprobs).index == 2


def test_greedy_token_selection_pads_short_choices_with_their_mean() -> None:
    # Tie on the first token; choice 0 has ended and counts its mean (-0.5) against -0.7.
    assert rt.greedy_token_selection(["a", "b"], [[-0.5], [-0.5, -0.7]]).index == 0
    assert rt.greedy_token_selection(["a", "b"], [[-0.5], [-0.5, -0.3]]).index == 1


def test_unconditional_likelihood_normalized() -> None:
    cond = [[-1.0, -1.0], [-2.0, -0.5]]
    # choice 0 is likely anyway (-0.9 / token unconditionally); choice 1 gains from the prompt
    unc = [[0.0, -0.9], [0.0, -3.0]]
    r = rt.unconditional_likelihood_normalized(["common", "specific"], cond, unc)
    assert r.index == 1
    assert r.unconditional_token_logprobs == unc
    assert rt.token_length_normalized(["common", "specific"], cond).index == 0
    with pytest.raises(ValueError, match="unconditional"):
        rt.unconditional_likelihood_normalized(["a"], [[-1.0]])


def test_methods_reject_empty_logprobs() -> None:
    with pytest.raises(ValueError):
        rt.token_length_normalized(["a", "b"], [[-1.0], []])
