"""n samples of one prompt with input logprobs: the prompt's logprobs are computed once (by
the first sample) and every sample answers with them, equal to n=1's."""

from __future__ import annotations

import pytest

from radixrt.serve.engine import Engine

PROMPT = list(range(5, 45))  # 40 tokens: longer than the scheduler's shared-prefix run
LOGPROBS = {"return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 3}


@pytest.fixture(scope="module")
def engine(tiny_llama_path):
    with Engine(str(tiny_llama_path), max_total_tokens=2048) as e:
        yield e


def _rows(engine: Engine) -> int:
    return engine.scheduler.stats.input_logprob_rows


def test_n_samples_compute_the_prompt_logprobs_once(engine) -> None:
    sp = {"max_new_tokens": 3, "temperature": 1.0, "seed": 7, "ignore_eos": True}
    before = _rows(engine)
    one = engine.generate(input_ids=PROMPT, sampling_params=sp, **LOGPROBS)
    once = _rows(engine) - before
    assert once == len(PROMPT)
    assert engine.flush_cache()
    before = _rows(engine)
    many = engine.generate(input_ids=PROMPT, sampling_params={**sp, "n": 4}, **LOGPROBS)
    assert _rows(engine) - before == once  # not 4 x
    want = one["meta_info"]
    assert len(many) == 4
    for result in many:
        meta = result["meta_info"]
        assert len(meta["output_token_logprobs"]) == 3
        got = meta["input_token_logprobs"]
        assert [t for _, t, _ in got] == [t for _, t, _ in want["input_token_logprobs"]]
        for (a, _, _), (b, _, _) in zip(got[1:], want["input_token_logprobs"][1:], strict=True):
            assert a == pytest.approx(b, abs=1e-4)
        tops = meta["input_top_logprobs"]
        assert [None if t is None else [i for _, i, _ in t] for t in tops] == [
            None if t is None else [i for _, i, _ in t] for t in want["input_top_logprobs"]
        ]
