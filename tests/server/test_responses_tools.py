"""Function tools on /v1/responses without a server: tools and tool_choice into the one
internal form (400s for bad ones), function_call / function_call_output input items as the
SDKs send them, a stored call continued token for token, and output items with their events
(streamed in any split equal to the whole)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from radixrt.serve.http.api.responses.input_items import input_messages
from radixrt.serve.http.api.responses.output import OutputItems
from radixrt.serve.http.api.responses.prompt import build_prompt
from radixrt.serve.http.api.responses.protocol import ResponsesRequest, check_request
from radixrt.serve.http.api.responses.tools import tool_plan
from radixrt.serve.http.protocol import BadRequestError, Limits, decode_body
from radixrt.serve.http.tools import ToolCall, ToolChoice
from radixrt.serve.http.tools.formats import HERMES

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather of a city.",
     "parameters": WEATHER, "strict": True},
    {"type": "function", "name": "get_time", "parameters": None, "strict": False},
]  # fmt: skip
LIMITS = Limits(context_length=2048, max_total_tokens=4096, vocab_size=49152)
CALL_TEXT = '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>'


def parse(**body: Any) -> ResponsesRequest:
    return check_request(decode_body(msgspec.json.encode(body), ResponsesRequest))


@pytest.fixture(scope="module")
def tokenizer(smollm2_path: Path):
    from radixrt.model.families.loader import load_tokenizer

    return load_tokenizer(smollm2_path)


@pytest.mark.parametrize(
    ("choice", "want"),
    [
        (None, ToolChoice("auto")),
        ("none", ToolChoice("none")),
        ("required", ToolChoice("required")),
        ({"type": "function", "name": "get_time"}, ToolChoice("named", name="get_time")),
        (
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "get_time"}],
            },
            ToolChoice("required", allowed=("get_time",)),
        ),  # fmt: skip
    ],
)
def test_tool_choices_map_to_the_internal_form(choice: Any, want: ToolChoice) -> None:
    plan = tool_plan(parse(input="hi", tools=TOOLS, tool_choice=choice), HERMES)
    assert plan.choice == want and [t.name for t in plan.tools] == ["get_weather", "get_time"]
    assert plan.tools[1].parameters == {"type": "object", "properties": {}}
    one = tool_plan(parse(input="hi", tools=TOOLS, tool_choice="required",
                          parallel_tool_calls=False), HERMES)  # fmt: skip
    assert not one.choice.parallel


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"tools": [{**TOOLS[0], "parameters": {"type": "array"}}]}, "type 'object'"),
        ({"tools": TOOLS + TOOLS[:1]}, "given twice"),
        ({"tools": [{**TOOLS[0], "name": "bad name"}]}, "letters, digits"),
        ({"tools": [{**TOOLS[0], "frob": 1}]}, "tools[0]"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type: 'web_search' is a built-in"),
        ({"tools": [{"name": "f"}]}, "tools[0].type: required"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "no tool is named"),
        ({"tool_choice": "required"}, "needs at least one tool"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice must be"),
        ({"tools": TOOLS, "tool_choice": {"type": "mcp", "server_label": "x"}}, "'mcp'"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "allowed_tools", "mode": "any", "tools": []}},
            "tool_choice.mode",
        ),  # fmt: skip
        (
            {
                "tools": TOOLS,
                "tool_choice": {
                    "type": "allowed_tools",
                    "mode": "auto",
                    "tools": [{"type": "function", "name": "nope"}],
                },
            },
            "no tool is named",
        ),  # fmt: skip
    ],
)
def test_bad_tools_are_400(body: dict, named: str) -> None:
    with pytest.raises(BadRequestError, match=named.replace("[", r"\[").replace("]", r"\]")):
        tool_plan(parse(input="hi", **body), HERMES)


def test_calls_and_outputs_as_the_sdks_send_them() -> None:
    """A call dumped from the client's own model (all fields, `async_` and `caller` None)
    joins the assistant message before it; its output is a `tool` turn."""
    from openai.types.responses import ResponseFunctionToolCall

    call = ResponseFunctionToolCall(type="function_call", id="fc_1", call_id="call_1",
                                    name="get_weather", arguments='{"city":"Oslo"}',
                                    status="completed")  # fmt: skip
    history = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Checking."},
        call.model_dump(),
        {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "3 C"},
        {"type": "function_call_output", "call_id": "call_2",
         "output": [{"type": "input_text", "text": "noon"}]},
    ]  # fmt: skip
    turns = input_messages(parse(input=history, tools=TOOLS).input)
    assert turns == [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            ToolCall("call_1", "get_weather", '{"city":"Oslo"}'),
            ToolCall("call_2", "get_time", "{}")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "3 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
    ]  # fmt: skip


def test_an_output_of_no_call_is_400(tokenizer) -> None:
    req = parse(input=[{"type": "function_call_output", "call_id": "call_x", "output": "1"}])
    with pytest.raises(BadRequestError, match="call_x"):
        build_prompt(req, None, tokenizer, LIMITS, HERMES)


def test_a_stored_call_is_continued_token_for_token(tokenizer) -> None:
    """Turn 1 forces a call; turn 2 sends only its output with previous_response_id: the
    prompt starts with turn 1's prompt and output ids as they were, the call replayed in the
    layout the grammar wrote."""
    named = {"type": "function", "name": "get_weather"}
    first = build_prompt(parse(input="Weather in Paris?", tools=TOOLS, tool_choice=named),
                         None, tokenizer, LIMITS, HERMES)  # fmt: skip
    assert first.params.regex is not None and "get_weather" in first.params.regex  # forced
    assert "get_weather" in first.text and first.params.end_on_exit
    # The output as the grammar might have split it (not the tokenizer's own split).
    cut = CALL_TEXT.index("Paris") + 2
    output = [*tokenizer.encode(CALL_TEXT[:cut], add_special_tokens=False),
              *tokenizer.encode(CALL_TEXT[cut:], add_special_tokens=False)]  # fmt: skip
    items = OutputItems(first.plan.new_parser(lambda: "call_1"), True)
    items.feed(tokenizer.decode(output))
    items.finish(False)
    assert [i["type"] for i in items.items] == ["function_call"]
    kept = first.conversation(output, items.text, items.parser.calls)
    result = {"type": "function_call_output", "call_id": "call_1", "output": "18 C"}
    second = build_prompt(parse(input=[result], tools=TOOLS, previous_response_id="resp_1"),
                          kept, tokenizer, LIMITS, HERMES)  # fmt: skip
    assert second.reused == len(first.ids) + len(output)
    assert second.ids[: second.reused] == first.ids + output
    assert tokenizer.decode(second.ids) == second.text and "18 C" in second.text
    assert second.messages[-1] == {"role": "tool", "tool_call_id": "call_1",
                                   "content": "18 C", "name": "get_weather"}  # fmt: skip


def _events(plan: Any, pieces: list[str], cut: bool = False) -> tuple[list[dict], OutputItems]:
    ids = iter(f"call_{i}" for i in range(9))
    items = OutputItems(plan.new_parser(lambda: next(ids)), True)
    events = [e for p in pieces for e in items.feed(p)] + items.finish(cut)
    return events, items


def _stable(events: list[dict]) -> list[dict]:
    """Events with the random item ids taken out."""
    text = json.dumps(events)
    for e in events:
        if "item_id" in e:
            text = text.replace(e["item_id"], "ID")
    return json.loads(text)


def test_output_items_and_their_events_in_openais_order() -> None:
    plan = tool_plan(parse(input="hi", tools=TOOLS), HERMES)
    text = "Let me check.\n" + CALL_TEXT
    events, items = _events(plan, [text])
    assert [e["type"] for e in events] == [
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
    ]  # fmt: skip
    message, call = items.items
    assert message["content"][0]["text"] == "Let me check.\n" == items.text
    assert call["id"].startswith("fc_") and call["status"] == "completed"
    assert (call["call_id"], call["name"], call["arguments"]) == (
        "call_0", "get_weather", '{"city":"Paris"}'
    )  # fmt: skip
    added = events[6]["item"]
    assert added["arguments"] == "" and added["status"] == "in_progress"
    assert events[8]["arguments"] == call["arguments"] and events[-1]["output_index"] == 1
    # Character by character: the same items and events (a call in `auto` comes whole).
    streamed, again = _events(plan, list(text))
    merged = [e for e in _stable(streamed) if not e["type"].endswith(".delta")]
    assert merged == [e for e in _stable(events) if not e["type"].endswith(".delta")]
    # A forced call streams its arguments as they come; the pieces make the arguments.
    forced = tool_plan(parse(input="hi", tools=TOOLS, tool_choice="required"), HERMES)
    streamed, again = _events(forced, list(CALL_TEXT))
    deltas = [e for e in streamed if e["type"] == "response.function_call_arguments.delta"]
    assert len(deltas) > 1 and "".join(e["delta"] for e in deltas) == call["arguments"]
    assert [i["type"] for i in again.items] == ["function_call"]


def test_a_cut_call_is_incomplete_and_an_empty_output_is_an_empty_message() -> None:
    plan = tool_plan(parse(input="hi", tools=TOOLS, tool_choice="required"), HERMES)
    _, items = _events(plan, [CALL_TEXT[: CALL_TEXT.index("Paris")]], cut=True)
    (call,) = items.items
    assert call["status"] == "incomplete" and call["arguments"] == '{"city":"'
    _, empty = _events(tool_plan(parse(input="hi"), HERMES), [])
    assert [(i["type"], i["content"][0]["text"]) for i in empty.items] == [("message", "")]
    none = tool_plan(parse(input="hi", tools=TOOLS, tool_choice="none"), HERMES)
    _, plain = _events(none, [CALL_TEXT])
    assert [i["type"] for i in plain.items] == ["message"] and plain.text == CALL_TEXT


def test_a_text_format_beside_auto_tools_is_one_grammar_of_both(tokenizer) -> None:
    """`text.format` json_schema with tools in `auto` (an agent's structured output type): one
    grammar whose output is a call or the answer, the schema no longer a spec of its own."""
    fmt = {"type": "json_schema", "name": "r", "schema": WEATHER}
    p = build_prompt(parse(input="Weather in Paris?", tools=TOOLS, text={"format": fmt}),
                     None, tokenizer, LIMITS, HERMES)  # fmt: skip
    grammar = p.params.regex or p.params.ebnf  # (a regex where one enforces both schemas)
    assert p.params.json_schema is None and grammar is not None
    assert "tool_call>" in grammar and "city" in grammar
    none = build_prompt(parse(input="Hi", tools=TOOLS, tool_choice="none", text={"format": fmt}),
                        None, tokenizer, LIMITS, HERMES)  # fmt: skip
    assert none.params.json_schema is not None and none.params.ebnf is None  # the answer alone
    assert none.params.regex is None
