"""Tool calls through the official openai, anthropic and google-genai clients against a real
server with the default model: forced calls whose arguments validate against their schema
for every seed (enums, integer bounds, nested objects, additionalProperties false), streamed
calls equal to whole ones, `auto` beside a JSON response format (a call or the answer, within
max_tokens where a regex enforces both), the tool result turn served from cache, and bad tools
refused."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import jsonschema
import openai
import pytest
from google import genai
from google.genai import types

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
ORDER = {  # a small integer range (written as an enum) and a nested object
    "type": "object",
    "properties": {
        "item": {"type": "string", "enum": ["tea", "cake", "soup"]},
        "count": {"type": "integer", "minimum": 1, "maximum": 9},
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string", "maxLength": 20},
                "zip": {"type": "integer"},
            },
            "required": ["street", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["item", "count", "address"],
    "additionalProperties": False,
}
RATE = {  # a fractional bound the length-bounded path cannot write: llguidance, one call
    "type": "object",
    "properties": {
        "stars": {"type": "number", "minimum": 0.5, "maximum": 5},
        "text": {"type": "string", "maxLength": 40},
    },
    "required": ["stars"],
    "additionalProperties": False,
}
SCHEMAS = {"get_weather": WEATHER, "order_food": ORDER, "rate": RATE}
TOOLS = [
    {"type": "function", "function": {"name": n, "description": f"{n} tool", "parameters": s}}
    for n, s in SCHEMAS.items()
]
QUESTION = [{"role": "user", "content": "What is the weather in Paris, and order me a tea?"}]


@pytest.fixture(scope="module")
def client(api_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=api_server.url + "/v1", api_key="x", max_retries=0)


def _check(name: str, arguments: str) -> None:
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


@pytest.mark.parametrize("choice", ["required", "get_weather", "order_food", "rate"])
def test_forced_calls_validate_for_every_seed(client, api_server, choice: str) -> None:
    tool_choice: Any = choice
    if choice != "required":
        tool_choice = {"type": "function", "function": {"name": choice}}
    for seed in range(4):
        # (A JSON response format is for a text answer: beside a forced call it waits.)
        fmt: Any = {"response_format": {"type": "json_object"}} if seed % 2 else {}
        r = client.chat.completions.create(
            model="m", messages=QUESTION, tools=TOOLS, tool_choice=tool_choice,
            max_tokens=96, temperature=1.0, seed=seed, **fmt,
        )  # fmt: skip
        out = r.choices[0]
        assert out.finish_reason == "tool_calls", out
        assert out.message.tool_calls, out
        for call in out.message.tool_calls:
            assert choice == "required" or call.function.name == choice
            assert call.id.startswith("call_") and call.type == "function"
            _check(call.function.name, call.function.arguments)
    api_server.wait_idle_and_whole()


def test_streamed_call_equals_the_whole_one(client, api_server) -> None:
    args = dict(
        model="m", messages=QUESTION, tools=TOOLS, tool_choice="required", max_tokens=96,
        temperature=1.0, seed=7,
    )  # fmt: skip
    whole = client.chat.completions.create(**args).choices[0]
    names: dict[int, str] = {}
    pieces: dict[int, list[str]] = {}
    reasons = []
    for chunk in client.chat.completions.create(**args, stream=True):
        for c in chunk.choices:
            reasons.append(c.finish_reason)
            for tc in c.delta.tool_calls or ():
                if tc.function.name:
                    names[tc.index] = tc.function.name
                pieces.setdefault(tc.index, []).append(tc.function.arguments or "")
    assert reasons[-1] == "tool_calls"
    want = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls]
    assert [(names[i], "".join(pieces[i])) for i in sorted(names)] == want
    assert max(len(p) for p in pieces.values()) > 2, "arguments should stream in pieces"
    api_server.wait_idle_and_whole()


def test_auto_streams_what_it_answers_whole(client, api_server) -> None:
    args = dict(model="m", messages=QUESTION, tools=TOOLS, max_tokens=40, temperature=0)
    whole = client.chat.completions.create(**args).choices[0]
    text, calls = "", {}
    for chunk in client.chat.completions.create(**args, stream=True):
        for c in chunk.choices:
            text += c.delta.content or ""
            for tc in c.delta.tool_calls or ():
                calls.setdefault(tc.index, []).append(tc.function.arguments or "")
    assert text == (whole.message.content or "")
    assert [("".join(p)) for p in calls.values()] == [
        c.function.arguments for c in whole.message.tool_calls or ()
    ]
    for call in whole.message.tool_calls or ():  # a call the model opens is constrained
        _check(call.function.name, call.function.arguments)
    api_server.wait_idle_and_whole()


def test_the_tool_result_turn_is_served_from_cache(client, api_server) -> None:
    first = client.chat.completions.create(
        model="m", messages=QUESTION, tools=TOOLS, tool_choice={"type": "function",
        "function": {"name": "get_weather"}}, max_tokens=64, temperature=0,
    )  # fmt: skip
    call = first.choices[0].message.tool_calls[0]
    turn = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"},
    ]
    second = client.chat.completions.create(
        model="m", messages=turn, tools=TOOLS, max_tokens=8, temperature=0
    )
    # The whole first prompt is read from the cache; the call itself is computed again, as
    # the grammar's tokens of it are not the tokenizer's (`g`,`et` for `get`).
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens, (cached, first.usage)
    assert cached > 0.8 * second.usage.prompt_tokens
    api_server.wait_idle_and_whole()


REPORT = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 60}},
    "required": ["answer"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("first", ["{", "<"])
def test_auto_beside_a_response_format_calls_or_answers(client, api_server, smollm2_path,
                                                        first: str) -> None:  # fmt: skip
    """Tools in `auto` and a JSON response format (an agent's structured output type): the
    output is a call or the answer in the schema. A bias on the first character picks which
    (`{` opens the answer, `<` a Hermes call), so both are seen whatever the machine samples;
    whole and streamed alike."""
    from radixrt.model.families.loader import load_tokenizer

    (token,) = load_tokenizer(smollm2_path).encode(first, add_special_tokens=False)
    args = dict(
        model="m", messages=QUESTION, tools=TOOLS, max_tokens=120, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": REPORT}},
        logit_bias={str(token): 100}, parallel_tool_calls=False,
    )  # fmt: skip
    out = client.chat.completions.create(**args).choices[0]
    if first == "{":
        assert out.finish_reason == "stop" and not out.message.tool_calls, out
        jsonschema.validate(json.loads(out.message.content), REPORT)
    else:
        assert out.finish_reason == "tool_calls" and out.message.content is None, out
        ((call,),) = [out.message.tool_calls]
        _check(call.function.name, call.function.arguments)
    text, calls = "", []
    for chunk in client.chat.completions.create(**args, stream=True):
        for c in chunk.choices:
            text += c.delta.content or ""
            calls += [tc.function.arguments or "" for tc in c.delta.tool_calls or ()]
    assert text == (out.message.content or "")
    assert "".join(calls) == "".join(c.function.arguments for c in out.message.tool_calls or ())
    api_server.wait_idle_and_whole()


def test_auto_beside_a_response_format_ends_within_max_tokens(client, api_server) -> None:
    """Where a regex enforces every tool's schema and the answer's, calls-or-answer is
    length-bounded, as a forced call or a response format alone is: sampled, every budget
    ends with whole calls or a whole answer, never cut by max_tokens (at 12 tokens no call
    fits, so the answer is short)."""
    bounded = [t for t in TOOLS if t["function"]["name"] != "rate"]
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "r", "schema": REPORT}}
    for max_tokens in (12, 24, 48):
        for seed in range(3):
            r = client.chat.completions.create(
                model="m", messages=QUESTION, tools=bounded, response_format=fmt,
                max_tokens=max_tokens, temperature=1, seed=seed,
            )  # fmt: skip
            out = r.choices[0]
            assert r.usage.completion_tokens <= max_tokens
            if out.finish_reason == "tool_calls":
                for call in out.message.tool_calls:
                    _check(call.function.name, call.function.arguments)
            else:
                assert out.finish_reason == "stop", (max_tokens, seed, out)
                jsonschema.validate(json.loads(out.message.content), REPORT)
    api_server.wait_idle_and_whole()


def _fn(name: str, **more: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, **more}}


NAMED_NOPE = {"type": "function", "function": {"name": "nope"}}


@pytest.mark.parametrize(
    "body, why",
    [
        ({"tools": [_fn("f", parameters={"type": "array"})]}, "type 'object'"),
        ({"tools": TOOLS + TOOLS[:1]}, "given twice"),
        ({"tools": TOOLS, "tool_choice": NAMED_NOPE}, "no tool is named"),
        ({"tools": [_fn("bad name")]}, "letters, digits"),
        ({"tool_choice": "required"}, "needs tools"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": "required", "regex": "[a-z]+"}, "cannot be combined"),
    ],
)
def test_bad_tools_get_400(api_server, body: dict, why: str) -> None:
    r = api_server.post("/v1/chat/completions", json={"messages": QUESTION, **body})
    assert r.status_code == 400 and why in r.text, r.text


def test_anthropic_forced_tool_use_whole_and_streamed(api_server) -> None:
    client = anthropic.Anthropic(base_url=api_server.url, api_key="x", max_retries=0)
    bounded = {n: s for n, s in SCHEMAS.items() if n != "rate"}  # the length-bounded path
    tools = [{"name": n, "description": f"{n} tool", "input_schema": s} for n, s in bounded.items()]
    # Greedy, this small model repeats calls until max_tokens when more than one may come.
    one_call = {"type": "any", "disable_parallel_tool_use": True}
    for choice in (one_call, {"type": "tool", "name": "order_food"}):
        args: dict[str, Any] = {"model": "m", "max_tokens": 96, "messages": QUESTION}
        args.update(tools=tools, tool_choice=choice, extra_body={"temperature": 0.0})
        whole = client.messages.create(**args)
        assert whole.stop_reason == "tool_use", whole
        uses = [b for b in whole.content if b.type == "tool_use"]
        assert uses and all(b.id.startswith("toolu_") for b in uses)
        for b in uses:
            jsonschema.validate(b.input, SCHEMAS[b.name])
        with client.messages.stream(**args) as stream:
            final = stream.get_final_message()
        assert final.stop_reason == "tool_use"
        assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [
            (b.name, b.input) for b in uses
        ]
    result = [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "ordered"}]
    turn = [*QUESTION, {"role": "assistant", "content": whole.content},
            {"role": "user", "content": result}]  # fmt: skip
    again = client.messages.create(model="m", max_tokens=8, messages=turn, tools=tools)
    first_prompt = whole.usage.input_tokens + whole.usage.cache_read_input_tokens
    assert again.usage.cache_read_input_tokens >= first_prompt
    api_server.wait_idle_and_whole()


def test_gemini_function_calling_any_with_allowed_names(api_server) -> None:
    client = genai.Client(
        api_key="x", http_options=types.HttpOptions(base_url=api_server.url, api_version="v1beta")
    )
    decls = [
        types.FunctionDeclaration(name=n, description=f"{n} tool", parameters_json_schema=s)
        for n, s in SCHEMAS.items()
    ]
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=decls)],
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode="ANY", allowed_function_names=["get_weather"]
            )
        ),
        max_output_tokens=64,
        temperature=0,
    )
    text = QUESTION[0]["content"]
    r = client.models.generate_content(model="m", contents=text, config=config)
    calls = r.function_calls
    assert calls and all(c.name == "get_weather" for c in calls), r
    jsonschema.validate(calls[0].args, WEATHER)
    streamed = [
        p.function_call
        for chunk in client.models.generate_content_stream(model="m", contents=text, config=config)
        for p in chunk.candidates[0].content.parts or ()
        if p.function_call
    ]
    assert [(c.name, c.args) for c in streamed] == [(c.name, c.args) for c in calls]
    history = [
        types.Content(role="user", parts=[types.Part(text=text)]),
        r.candidates[0].content,
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="get_weather", response={"t": 18})],
        ),
    ]
    plain = types.GenerateContentConfig(tools=config.tools, max_output_tokens=8, temperature=0)
    again = client.models.generate_content(model="m", contents=history, config=plain)
    assert again.usage_metadata.cached_content_token_count >= r.usage_metadata.prompt_token_count
    api_server.wait_idle_and_whole()
