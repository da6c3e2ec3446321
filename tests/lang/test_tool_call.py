"""`tool_call` in programs: tools from functions and dicts, a forced call whose arguments
validate against the tool's schema on every backend that enforces json_schema, run."""

from __future__ import annotations

from typing import Any, Literal

import jsonschema
import pytest
from radixrt_lang.errors import OutputParseError
from radixrt_lang.tools import call_schema, parse_call

import radixrt.lang as rt


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
    """The weather in a city.

    More words that are not the description."""
    return f"18 {unit} in {city}"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_specs_from_functions_and_dicts() -> None:
    spec = rt.tool_spec(get_weather)
    assert spec["description"] == "The weather in a city."
    assert spec["parameters"]["required"] == ["city"]
    assert spec["parameters"]["properties"]["unit"] == {"enum": ["celsius", "fahrenheit"]}
    openai_style = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    assert rt.tool_spec(openai_style)["name"] == "f"
    with pytest.raises(ValueError, match="differ"):
        call_schema([rt.tool_spec(add), rt.tool_spec(add)])
    with pytest.raises(ValueError, match="JSON type"):
        rt.tool_spec(_takes_a_set)
    with pytest.raises(OutputParseError):
        parse_call('{"name": "nope", "arguments": {}}', {"add"})
    assert parse_call('{"name":"add","arguments":{"a":1,"b":2}}', {"add"})["arguments"] == {
        "a": 1,
        "b": 2,
    }


def _takes_a_set(x: set[int]) -> None: ...


@rt.function
def agent(s: Any, question: str) -> None:
    s += rt.user(question)
    s += rt.assistant(rt.tool_call("call", tools=[get_weather, add], max_tokens=48, temperature=0))


def test_a_forced_call_in_a_program_validates_and_runs(backend: Any) -> None:
    state = agent.run(question="What is 2 plus 40?", backend=backend)
    call = state["call"]
    spec = {"add": rt.tool_spec(add), "get_weather": rt.tool_spec(get_weather)}[call["name"]]
    jsonschema.validate(call["arguments"], spec["parameters"])
    assert rt.run_call(call, [get_weather, add]) is not None
    written = state.text().split("assistant")[-1]
    assert parse_call(written.split("<|im_end|>")[0].strip(), {"add", "get_weather"}) == call
