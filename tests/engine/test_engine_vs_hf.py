"""Greedy outputs and logprobs equal Hugging Face transformers on the same weights."""

from __future__ import annotations

import random

import pytest
from conftest import assert_pool_whole
from hf_reference import hf_greedy, hf_greedy_nocache, load_hf

from radixrt import Engine

GREEDY = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True, "return_logprob": True}


def _random_prompts(seed: int, lengths: list[int]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 49000) for _ in range(n)] for n in lengths]


@pytest.mark.parametrize("fixture", ["tiny_llama_path", "tiny_qwen2_path", "tiny_llama3_path"])
def test_tiny_models_match_hf(fixture: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(fixture)
    prompts = _random_prompts(1, [1, 5, 17, 40, 90])
    hf = load_hf(path)
    expected = [hf_greedy_nocache(hf, ids, GREEDY["max_new_tokens"]) for ids in prompts]
    with Engine(str(path), max_total_tokens=2048, context_length=256) as engine:
        one_by_one = [engine.generate(input_ids=ids, sampling_params=GREEDY) for ids in prompts]
        batched = engine.generate(input_ids=prompts, sampling_params=GREEDY)
        for (tokens, logprobs), a, b in zip(expected, one_by_one, batched):
            assert a["output_ids"] == tokens
            assert b["output_ids"] == tokens
            got = [lp for lp, _, _ in b["meta_info"]["output_token_logprobs"]]
            assert got == pytest.approx(logprobs, abs=1e-4)
        assert_pool_whole(engine)


def test_smollm2_matches_hf_generate(smollm2_path) -> None:
    questions = [
        "What is the capital of France?",
        "Write a haiku about the sea.",
        "hi",
        "Explain in two sentences why the sky is blue, and mention Rayleigh scattering by name.",
        "List three prime numbers greater than 100 and say how you know they are prime. "
        "Then name the largest known prime type, and give one fact about the person who "
        "discovered the first such prime.",
    ]
    params = {"temperature": 0, "max_new_tokens": 32, "return_logprob": True}
    with Engine(str(smollm2_path), max_total_tokens=4096) as engine:
        tok = engine.tokenizer
        prompts = [
            tok.apply_chat_template(
                [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
            )
            for q in questions
        ]
        ids = [tok.encode(p) for p in prompts]
        assert len({len(x) for x in ids}) == 5
        one_by_one = [engine.generate(p, params) for p in prompts]
        batched = engine.generate(prompts, params)
        eos = set(engine.scheduler.finish.eos_token_ids)
        hf = load_hf(smollm2_path)
        for x, a, b in zip(ids, one_by_one, batched):
            tokens, logprobs = hf_greedy(hf, x, 32, eos)
            assert a["output_ids"] == tokens, (tok.decode(a["output_ids"]), tok.decode(tokens))
            assert b["output_ids"] == tokens
            got = [lp for lp, _, _ in a["meta_info"]["output_token_logprobs"]]
            assert got == pytest.approx(logprobs, abs=1e-4)
        assert "Paris" in one_by_one[0]["text"]
        assert_pool_whole(engine)
