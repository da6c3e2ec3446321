"""The tool-call parser on outputs written the way each family writes calls (Hermes/Qwen
tags, Llama 3 JSON, Mistral's [TOOL_CALLS] list): the calls found, the text left, the same
result however the output is split into pieces, and argument pieces that concatenate to
exactly the call's arguments."""

from __future__ import annotations

import random

import pytest

from radixrt.serve.http.tools import ArgsPiece, CallStart, TextPiece, ToolCall, ToolChoice, ToolPlan
from radixrt.serve.http.tools.formats import (
    CALL_FORMATS,
    GRANITE,
    HERMES,
    LLAMA3_JSON,
    MISTRAL,
    detect_format,
)
from radixrt.serve.http.tools.parser import ToolCallParser

NAMES = {"get_weather", "add"}

# (format, output, forced, expected text, expected calls as (name, arguments))
RECORDED = [
    # Qwen 2.5 / Hermes: text, then a call in tags.
    (
        "hermes",
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
        '"unit": "celsius"}}\n</tool_call>',
        False,
        "Let me check.\n",
        [("get_weather", '{"city": "Paris", "unit": "celsius"}')],
    ),
    # Two parallel calls, forced layout; braces inside strings do not end a call.
    (
        "hermes",
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "note": "x}{y"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
        True,
        "",
        [("add", '{"a": 1, "note": "x}{y"}'), ("get_weather", '{"city": "Oslo"}')],
    ),
    # Keys in another order (auto): the arguments re-encoded.
    (
        "hermes",
        '<tool_call>\n{"arguments": {"a": 2}, "name": "add"}\n</tool_call>',
        False,
        "",
        [("add", '{"a": 2}')],
    ),
    # An unknown tool and unclosed tags are text.
    (
        "hermes",
        'Try <tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call> then stop',
        False,
        'Try <tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call> then stop',
        [],
    ),
    ("hermes", "half an opener <tool_c", False, "half an opener <tool_c", []),
    (
        "hermes",
        '<tool_call>\n{"name": "add", "arguments": {"a": 1',
        False,
        '<tool_call>\n{"name": "add", "arguments": {"a": 1',
        [],
    ),
    # Cut short while forced: the call with the arguments it got.
    ("hermes", '<tool_call>\n{"name": "add", "arguments": {"a": 1', True, "", [("add", '{"a": 1')]),
    # Llama 3.1/3.2: a bare JSON object (or several, ';'-separated), maybe after python_tag.
    (
        "llama3_json",
        '{"name": "add", "parameters": {"a": 1, "b": 2}}; {"name": "add", "parameters": {"a": 3}}',
        False,
        "",
        [("add", '{"a": 1, "b": 2}'), ("add", '{"a": 3}')],
    ),
    (
        "llama3_json",
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Rome"}}',
        False,
        "",
        [("get_weather", '{"city": "Rome"}')],
    ),
    ("llama3_json", 'The JSON is {"name": "add"}', False, 'The JSON is {"name": "add"}', []),
    ("llama3_json", '{"x": 1} is not a call', False, '{"x": 1} is not a call', []),
    # Mistral: [TOOL_CALLS] and a JSON list; forced output is the list alone.
    (
        "mistral",
        'Sure [TOOL_CALLS][{"name": "add", "arguments": {"a": 1}}, {"name": "get_weather", '
        '"arguments": {"city": "Lyon"}}]',
        False,
        "Sure ",
        [("add", '{"a": 1}'), ("get_weather", '{"city": "Lyon"}')],
    ),
    ("mistral", '[{"name": "add", "arguments": {"a": 5}}]', True, "", [("add", '{"a": 5}')]),
    # Granite 3.x: <|tool_call|> and a JSON list, keys in its own order.
    (
        "granite",
        '<|tool_call|>[{"arguments": {"city": "Bern"}, "name": "get_weather"}]',
        False,
        "",
        [("get_weather", '{"city": "Bern"}')],
    ),
    ("granite", '[{"name": "add", "arguments": {"a": 2}}]', True, "", [("add", '{"a": 2}')]),
    # Arguments as a JSON string (some fine-tunes write them so).
    (
        "mistral",
        '[TOOL_CALLS][{"name": "add", "arguments": "{\\"a\\": 5}"}]',
        False,
        "",
        [("add", '{"a": 5}')],
    ),
]


def _parse(fmt: str, text: str, forced: bool, pieces: list[str]) -> tuple[str, list, dict]:
    ids = iter(f"call_{i}" for i in range(100))
    parser = ToolCallParser(CALL_FORMATS[fmt], NAMES, forced, new_id=lambda: next(ids))
    events = [e for p in pieces for e in parser.feed(p)] + parser.finish()
    text_out = "".join(e.text for e in events if isinstance(e, TextPiece))
    starts = [e for e in events if isinstance(e, CallStart)]
    args: dict[int, str] = {}
    for e in events:
        if isinstance(e, ArgsPiece):
            args[e.index] = args.get(e.index, "") + e.text
    assert [s.index for s in starts] == list(range(len(starts)))
    calls = [(c.name, c.arguments) for c in parser.calls]
    assert [args.get(i, "") for i in range(len(calls))] == [a for _, a in calls]
    assert [s.name for s in starts] == [n for n, _ in calls]
    return text_out, calls, args


@pytest.mark.parametrize("fmt, output, forced, text, calls", RECORDED)
def test_recorded_outputs_parse_the_same_however_they_are_split(
    fmt: str, output: str, forced: bool, text: str, calls: list
) -> None:
    whole = _parse(fmt, output, forced, [output])
    assert whole[0] == text and whole[1] == calls
    rng = random.Random(0)
    for _ in range(100):
        cuts = sorted(rng.sample(range(1, len(output)), rng.randint(1, min(12, len(output) - 1))))
        pieces = [output[a:b] for a, b in zip([0, *cuts], [*cuts, len(output)], strict=True)]
        assert _parse(fmt, output, forced, pieces) == whole
    chars = _parse(fmt, output, forced, list(output))  # a character at a time
    assert chars == whole


def test_forced_arguments_stream_before_the_call_ends() -> None:
    parser = ToolCallParser(HERMES, NAMES, True)
    events = parser.feed('<tool_call>\n{"name": "add", "arguments": {"a": 1')
    assert isinstance(events[0], CallStart) and events[0].name == "add"
    assert [e.text for e in events[1:]] == ['{"a": 1']
    assert [e.text for e in parser.feed(', "b": 2}}\n</tool_call>')] == [', "b": 2}']
    assert parser.finish() == [] and parser.calls[0].arguments == '{"a": 1, "b": 2}'


def test_call_text_round_trips_through_the_parser() -> None:
    calls = [ToolCall("c1", "add", '{"a": 1}'), ToolCall("c2", "get_weather", '{"city": "x"}')]
    for fmt in CALL_FORMATS.values():
        text = fmt.call_text(calls)
        parser = ToolCallParser(fmt, NAMES, False)
        events = parser.feed(text) + parser.finish()
        assert not [e for e in events if isinstance(e, TextPiece)], (fmt.name, text)
        assert [(c.name, c.arguments) for c in parser.calls] == [
            (c.name, c.arguments) for c in calls
        ]


def test_formats_are_detected_from_the_template() -> None:
    assert detect_format("{% if tools %}<tool_call>{% endif %}") is HERMES
    assert detect_format("[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS][TOOL_CALLS]") is MISTRAL
    assert detect_format('<|python_tag|>{"name": ..., "parameters": ...}') is LLAMA3_JSON
    assert detect_format("{{ '<|tool_call|>' + message.tool_calls | tojson }}") is GRANITE
    assert detect_format(None) is HERMES and detect_format("{{ messages }}") is HERMES


def test_no_tools_or_choice_none_is_all_text() -> None:
    text = '<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call>'
    for plan in (ToolPlan(HERMES), ToolPlan(HERMES, (), ToolChoice("none"))):
        parser = plan.new_parser()
        assert [e.text for e in parser.feed(text) + parser.finish()] == [text]
