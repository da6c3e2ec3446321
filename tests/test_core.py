"""SamplingParams validation and the Engine's option routing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from radixrt.core import FinishKind, FinishReason, SamplingParams
from radixrt.core.config import split_kwargs


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_k", -2),
        ("min_p", 1.5),
        ("max_new_tokens", -1),
        ("min_new_tokens", 500),
        ("repetition_penalty", 0.0),
        ("frequency_penalty", 3.0),
        ("presence_penalty", -3.0),
        ("n", 0),
        ("stop", [""]),
        ("stop_token_ids", [-1]),
        ("allowed_token_ids", [-1]),
        ("allowed_token_ids", [1.5]),
        ("allowed_token_ids", list(range(2**18 + 1))),
        ("top_logprobs_num", -1),
        ("logprob_start_len", -2),
        ("seed", "x"),
    ],
)
def test_invalid_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams.from_dict({field: value})


def test_defaults_aliases_and_normalisation() -> None:
    p = SamplingParams.from_dict(
        {"max_tokens": 5, "stop": "\n", "top_k": 0, "json_schema": {"type": "object"}}
    )
    assert p.max_new_tokens == 5 and p.stop == ["\n"] and p.top_k == -1
    assert p.json_schema == '{"type": "object"}'
    assert SamplingParams.from_dict({"temperature": 0}).is_greedy
    with pytest.raises(ValueError, match="unknown sampling parameter 'bogus'"):
        SamplingParams.from_dict({"bogus": 1})
    with pytest.raises(ValueError, match="at most one"):
        SamplingParams.from_dict({"regex": "a", "ebnf": "b"})
    with pytest.raises(ValueError, match="allowed_token_ids cannot be combined with regex"):
        SamplingParams.from_dict({"regex": "a", "allowed_token_ids": [1]})
    assert SamplingParams.from_dict({"allowed_token_ids": None}).allowed_token_ids == []
    for sp in (SamplingParams(), SamplingParams(allowed_token_ids=[3], logit_bias={1: 2.0})):
        assert SamplingParams.from_dict(sp.to_dict()) == sp  # (the Engine adds logprob args so)
    assert SamplingParams(allowed_token_ids=[9]).check_against(3, 5) == (
        "allowed_token_ids: token id 9 is outside the vocabulary [0, 5)"
    )


def test_finish_reason_shape() -> None:
    assert FinishReason(FinishKind.STOP, matched=2).to_dict() == {"type": "stop", "matched": 2}
    assert FinishReason(FinishKind.LENGTH).to_dict()["type"] == "length"


def test_engine_options_route_to_configs() -> None:
    model, cache, sched = split_kwargs(
        {"model_path": "x", "max_total_tokens": 10, "schedule_policy": "fcfs", "dtype": "float32"}
    )
    assert model.model_path == "x" and model.dtype == "float32"
    assert cache.max_total_tokens == 10 and sched.schedule_policy == "fcfs"
    with pytest.raises(TypeError, match="unknown engine option 'max_tokens_total'"):
        split_kwargs({"max_tokens_total": 1})
    with pytest.raises(ValueError, match="schedule_policy"):
        split_kwargs({"schedule_policy": "best"})
    with pytest.raises(ValueError, match="dtype"):
        split_kwargs({"dtype": "int3"})


def test_import_radixrt_does_not_import_torch() -> None:
    code = "import sys, radixrt; radixrt.SamplingParams(); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_check_fit_is_the_one_set_of_fit_rules() -> None:
    from radixrt.core import FitLimits, check_fit

    limits = FitLimits(context_len=8, capacity=6, vocab_size=100)
    sp = SamplingParams()
    assert check_fit([1, 2], sp, limits) is None and limits.room == 6
    assert check_fit([], sp, limits) == "the prompt is empty"
    assert "outside the vocabulary [0, 100)" in check_fit([1, 100], sp, limits)
    assert "context length is 8" in check_fit([1] * 8, sp, FitLimits(8, 64, 100))
    assert "KV pool holds only 6" in check_fit([1] * 6, sp, limits)
    assert "top_k" in check_fit([1], SamplingParams(top_k=101), limits)
    assert check_fit([1], SamplingParams(max_new_tokens=10**6), limits) is None  # ends early
