"""Speculative decoding on the default model through the Engine: greedy text identical with
and without it (repeated text, chat, stop strings, max_new_tokens, n > 1, mixed batches), the
acceptance counts in meta_info, and the pool whole after every test."""

from __future__ import annotations

import pytest
from conftest import assert_pool_whole

from radixrt import Engine


@pytest.fixture(scope="module")
def engines(smollm2_path):
    with (
        Engine(str(smollm2_path), max_total_tokens=4096) as plain,
        Engine(str(smollm2_path), max_total_tokens=4096, speculative_num_draft_tokens=5) as spec,
    ):
        yield plain, spec


@pytest.fixture(autouse=True)
def _whole(engines):
    yield
    for e in engines:
        assert_pool_whole(e)


def _chat(engine, text: str) -> str:
    return engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )


REPEAT = "The quick brown fox jumps over the lazy dog. " * 3  # continued by more of it


def _both(engines, prompt, params):
    plain, spec = engines
    return plain.generate(prompt, params), spec.generate(prompt, params)


def test_repeated_text_is_identical_and_accepted(engines) -> None:
    params = {"temperature": 0, "max_new_tokens": 48}
    ref, got = _both(engines, REPEAT, params)
    assert got["output_ids"] == ref["output_ids"] and got["text"] == ref["text"]
    meta = got["meta_info"]
    assert meta["spec_accepted_tokens"] > 10, meta
    assert meta["spec_draft_tokens"] >= meta["spec_accepted_tokens"]
    assert "spec_draft_tokens" not in ref["meta_info"]
    # its speed-up in steps: at least one step per token not accepted from a draft
    assert meta["completion_tokens"] - meta["spec_accepted_tokens"] <= meta["spec_steps"]
    assert meta["spec_steps"] < meta["completion_tokens"]
    assert meta["spec_tokens_per_step"] == round(meta["completion_tokens"] / meta["spec_steps"], 3)
    again = engines[1].generate(REPEAT, params)  # the answer is cached
    assert again["output_ids"] == ref["output_ids"]
    assert again["meta_info"]["spec_accepted_tokens"] > meta["spec_accepted_tokens"]
    stats = engines[1].get_stats()
    assert stats["spec_accepted_tokens"] > 0
    accepted, steps = stats["spec_accepted_tokens"], stats["spec_verify_steps"]
    assert accepted < stats["spec_emitted_tokens"] <= accepted + steps  # + each step's own


def test_chat_stop_strings_and_length(engines) -> None:
    france = _chat(engines[0], "What is the capital of France?")
    for params in (
        {"temperature": 0, "max_new_tokens": 16},
        {"temperature": 0, "max_new_tokens": 16, "stop": ["of Fr"]},
        {"temperature": 0, "max_new_tokens": 3},
        {"temperature": 0, "max_new_tokens": 7},
    ):
        engines[1].generate(france, {"temperature": 0, "max_new_tokens": 16})  # drafts cached
        ref, got = _both(engines, france, params)
        assert got["text"] == ref["text"] and got["output_ids"] == ref["output_ids"], params
        assert got["meta_info"]["finish_reason"] == ref["meta_info"]["finish_reason"]
    assert got["meta_info"]["spec_accepted_tokens"] > 0


def test_stop_string_inside_an_accepted_draft(engines) -> None:
    prompt = REPEAT
    params = {"temperature": 0, "max_new_tokens": 48, "stop": ["lazy dog. The"]}
    engines[1].generate(prompt, {"temperature": 0, "max_new_tokens": 48})
    ref, got = _both(engines, prompt, params)
    assert got["text"] == ref["text"] and got["output_ids"] == ref["output_ids"]
    assert got["meta_info"]["finish_reason"] == ref["meta_info"]["finish_reason"]
    assert ref["meta_info"]["finish_reason"]["type"] == "stop"
    assert got["meta_info"]["spec_accepted_tokens"] > 0


def test_n_greedy_and_a_mixed_batch(engines) -> None:
    prompts = [REPEAT, _chat(engines[0], "Count from 1 to 20.")]
    params = [
        {"temperature": 0, "max_new_tokens": 40, "n": 2},
        {"temperature": 0.7, "seed": 5, "max_new_tokens": 40},
    ]
    ref = engines[0].generate(prompts, params)
    got = engines[1].generate(prompts, params)
    assert [g["output_ids"] for g in got] == [r["output_ids"] for r in ref]
    assert got[0]["meta_info"].get("spec_accepted_tokens", 0) > 0
    assert got[2]["meta_info"].get("spec_draft_tokens", 0) > 0  # seeded sampling: the same


def test_an_agent_turn_identical_with_a_draft_in_the_prompts_pass(engines) -> None:
    """A third turn of a tool-calling agent: its reply starts as its earlier calls did, so
    the prompt's own pass verifies that start (a trusted match of the chat template's tail;
    tests/scheduler/test_speculative_prompt_end.py checks the pass itself); the tokens are
    identical under a regex constraint, many of them accepted drafts."""
    system = "To call a tool, write <tool_call>{...}</tool_call>. Tool: get_weather(city)."
    messages = [{"role": "system", "content": system}]
    for city in ("Paris", "Oslo"):
        call = '<tool_call>{"name": "get_weather", "arguments": {"city": "%s"}}</tool_call>'
        messages += [
            {"role": "user", "content": f"Weather in {city}?"},
            {"role": "assistant", "content": call % city},
            {"role": "user", "content": f"Tool result: {city}: 12 C."},
            {"role": "assistant", "content": f"It is 12 C in {city}."},
        ]
    messages.append({"role": "user", "content": "Weather in Lima?"})
    prompt = engines[0].tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    regex = (
        r'<tool_call>\{"name": "get_weather", "arguments": \{"city": "[A-Z][a-z]+"\}\}</tool_call>'
    )
    params = {"temperature": 0, "max_new_tokens": 40, "regex": regex}
    ref, got = _both(engines, prompt, params)
    assert got["output_ids"] == ref["output_ids"] and got["text"].startswith("<tool_call>")
    meta = got["meta_info"]
    assert meta["spec_accepted_tokens"] >= meta["completion_tokens"] // 3, meta
