"""Function tools on /v1/responses through the official `openai` client against a real server
with the default model: forced calls whose arguments validate for every seed, a streamed call
equal to the whole one (and parsed by the SDK's stream helper), an agent loop of three turns
on previous_response_id each served from the cache, tool_choice none, and bad tools 400."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest

from .test_tool_calls import ORDER, WEATHER

# The chat tests' schemas: the same forced-call grammars, compiled once per server.
SCHEMAS = {"get_weather": WEATHER, "order_food": ORDER}
TOOLS: list[Any] = [
    {"type": "function", "name": n, "description": f"{n} tool", "parameters": s, "strict": True}
    for n, s in SCHEMAS.items()
]
QUESTION = "What is the weather in Paris, and order me a tea?"
NAMED = {"type": "function", "name": "get_weather"}
# This small model repeats calls until max_output_tokens when more than one may come.
ONE: dict[str, Any] = {"model": "m", "tools": TOOLS, "parallel_tool_calls": False}


@pytest.fixture(scope="module")
def client(api_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=api_server.url + "/v1", api_key="x", max_retries=0)


def calls_of(response: Any) -> list[Any]:
    return [item for item in response.output if item.type == "function_call"]


@pytest.mark.parametrize("choice", ["required", "order_food"])
def test_forced_calls_validate_for_every_seed(client, api_server, choice: str) -> None:
    tool_choice: Any = choice if choice == "required" else {"type": "function", "name": choice}
    for seed in range(2):
        # (A JSON text format is for a text answer: beside a forced call it waits.)
        fmt: Any = {"text": {"format": {"type": "json_object"}}} if seed else {}
        r = client.responses.create(
            input=QUESTION, tool_choice=tool_choice, max_output_tokens=96, temperature=1.0,
            store=False, extra_body={"seed": seed}, **ONE, **fmt,
        )  # fmt: skip
        assert r.status == "completed", r
        (call,) = r.output
        assert call.type == "function_call" and call.status == "completed"
        assert call.id.startswith("fc_") and call.call_id.startswith("call_")
        assert choice == "required" or call.name == choice
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    api_server.wait_idle_and_whole()


def test_streamed_arguments_equal_the_whole_call(client, api_server) -> None:
    """The SDK's stream helper: events in OpenAI's order, the deltas concatenating to the
    arguments of the same call made whole with the same seed, parsed (strict) at the end."""
    args: dict[str, Any] = dict(
        input=QUESTION, tool_choice="required", max_output_tokens=96, temperature=1.0,
        store=False, extra_body={"seed": 5}, **ONE,
    )  # fmt: skip
    whole = client.responses.create(**args)
    with client.responses.stream(**args) as stream:
        events = list(stream)
        parsed = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(kinds[3:-3]) == {"response.function_call_arguments.delta"} and len(kinds) > 7
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added, done = events[2].item, events[-2].item
    assert added.arguments == "" and added.status == "in_progress" and done.status == "completed"
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    (want,) = calls_of(whole)
    assert (done.name, done.arguments) == (want.name, want.arguments) == (added.name, deltas)
    assert events[-3].arguments == deltas and events[-3].item_id == done.id == added.id
    assert events[-4].snapshot == deltas  # the helper's own accumulation
    (call,) = calls_of(parsed)
    assert (call.id, call.call_id) == (done.id, done.call_id)
    assert call.parsed_arguments == json.loads(want.arguments)
    api_server.wait_idle_and_whole()


def test_an_agent_loop_on_previous_response_id_reads_each_turn_from_cache(
    client, api_server
) -> None:
    """call -> function_call_output -> answer, each turn sending only what is new. Each turn
    reads the previous one's prompt and output from the cache, but for the last output token
    (never computed) and the forced call's closing tokens that the grammar writes in one step
    (not computed either): measured 413 of turn 1's 416 tokens (93% of turn 2's prompt) and
    454 of turn 2's 455 (96% of turn 3's)."""
    greedy: dict[str, Any] = {"model": "m", "tools": TOOLS, "temperature": 0}
    first = client.responses.create(
        input="What is the weather in Paris?", tool_choice=NAMED, max_output_tokens=64, **greedy
    )
    (call,) = calls_of(first)
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}
    second = client.responses.create(
        input=[result], previous_response_id=first.id, max_output_tokens=12, **greedy
    )
    third = client.responses.create(
        input="Thanks! Should I take a coat?", previous_response_id=second.id,
        max_output_tokens=4, **greedy,
    )  # fmt: skip
    assert [i.type for i in second.output] == ["message"] and third.output_text
    for turn, before in ((second, first), (third, second)):
        cached = turn.usage.input_tokens_details.cached_tokens
        assert cached >= before.usage.total_tokens - 3, (cached, before.usage)
        assert cached > 0.85 * turn.usage.input_tokens
    assert client.responses.retrieve(first.id).output[0].call_id == call.call_id
    for r in (first, second, third):
        client.responses.delete(r.id)
    api_server.wait_idle_and_whole()


def test_tool_choice_none_answers_text_with_the_tools_in_the_prompt(client, api_server) -> None:
    args: dict[str, Any] = dict(input=QUESTION, temperature=0, store=False)
    auto = client.responses.create(max_output_tokens=1, **args, **ONE)
    none = client.responses.create(tool_choice="none", max_output_tokens=8, **args, **ONE)
    plain = client.responses.create(model="m", max_output_tokens=1, **args)
    assert [i.type for i in none.output] == ["message"] and none.output_text
    # The tools stay in the prompt: the same prompt as auto, read from the cache.
    assert none.usage.input_tokens == auto.usage.input_tokens > plain.usage.input_tokens
    assert none.usage.input_tokens_details.cached_tokens >= auto.usage.input_tokens - 1
    assert none.tool_choice == "none" and [t.name for t in none.tools] == list(SCHEMAS)
    api_server.wait_idle_and_whole()


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "no tool is named"),
        ({"tools": [{**TOOLS[0], "parameters": {"type": "array"}}]}, "type 'object'"),
        ({"tools": TOOLS + TOOLS[:1]}, "given twice"),
        ({"tool_choice": "required"}, "needs at least one tool"),
        (
            {"input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]},
            "call_x",
        ),
    ],
)
def test_bad_tools_get_400(client, extra: dict, why: str) -> None:
    body: dict[str, Any] = {"model": "m", "input": "hi", "store": False, **extra}
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(**body)
    assert why in e.value.body["message"] and e.value.body["type"] == "invalid_request_error"
