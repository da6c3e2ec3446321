"""A forced call's own tokens are reused when the next turn replays it: on the default model,
turn 2 reads turn 1's whole prompt and call from the cache (all but the new message and the
template's turn marks), though the grammar's tokens of the call are not the tokenizer's."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from .test_tool_calls import QUESTION
from .test_tool_calls import TOOLS as ALL_TOOLS

TOOLS = ALL_TOOLS[:2]  # the length-bounded ones: the call always closes within max_tokens


@pytest.fixture(scope="module")
def client(api_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=api_server.url + "/v1", api_key="x", max_retries=0)


@pytest.mark.parametrize("choice", ["required", "order_food"])
def test_the_turn_after_a_forced_call_reads_the_call_from_cache(
    client, api_server, smollm2_path, choice: str
) -> None:
    from radixrt.model.families.loader import load_tokenizer

    tok = load_tokenizer(smollm2_path)
    forced = (
        "required" if choice == "required" else {"type": "function", "function": {"name": choice}}
    )
    # The length bound holds once the call's automata are compiled: a compile slower than its
    # share of the time limit (a loaded machine) serves the first requests on llguidance,
    # unbounded (grammar/auto_backend.py), so the turn is asked until the automata are ready.
    for _ in range(10):
        first = client.chat.completions.create(
            model="m", messages=QUESTION, tools=TOOLS, tool_choice=forced, max_tokens=64,
            temperature=0, parallel_tool_calls=False,
        )  # fmt: skip
        if first.choices[0].finish_reason != "length":
            break
    assert first.choices[0].finish_reason == "tool_calls"
    call = first.choices[0].message.tool_calls[0]
    result = "18 degrees, sunny"
    turn: list[Any] = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": result},
    ]
    second = client.chat.completions.create(
        model="m", messages=turn, tools=TOOLS, tool_choice=forced, max_tokens=64, temperature=0
    )
    cached = second.usage.prompt_tokens_details.cached_tokens
    computed = first.usage.prompt_tokens + first.usage.completion_tokens
    # Turn 2's ids are turn 1's prompt and output as they were, then the new message: the
    # template's end of turn 1 (if the output did not end with it), the result in a user
    # turn, the assistant's opening.
    result = f"<tool_response>\n{result}\n</tool_response>"
    rest = f"\n<|im_start|>user\n{result}<|im_end|>\n<|im_start|>assistant\n"
    new = [len(tok.encode(t, add_special_tokens=False)) for t in (rest, "<|im_end|>" + rest)]
    assert second.usage.prompt_tokens - computed in new, (first.usage, second.usage, new)
    # All of it cached, the output's last tokens too: those the grammar forced after the last
    # sampled one (jump-forward appends them: up to `"}}` and `\n</tool_call>`) are computed
    # by one more step before the request goes to the cache.
    assert cached >= computed, (cached, first.usage, second.usage)
    # The first turn is as the grammar and the model made it (greedy): the same call again.
    again = client.chat.completions.create(
        model="m", messages=QUESTION, tools=TOOLS, tool_choice=forced, max_tokens=64,
        temperature=0, parallel_tool_calls=False,
    )  # fmt: skip
    assert again.choices[0].message.tool_calls[0].function == call.function
    api_server.wait_idle_and_whole()
