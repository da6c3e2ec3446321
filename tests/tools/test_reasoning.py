"""Reasoning read out of an output (tools/reasoning.py): what is reasoning and what is the
answer for each parser, the same pieces however the output is split into deltas, calls read
from the answer only, and which requests read it at all (none where a grammar holds the
output from its first token)."""

from __future__ import annotations

import pytest

from radixrt.serve.http.tools import ReasoningPiece, TextPiece, ToolChoice, ToolPlan, ToolSpec
from radixrt.serve.http.tools.formats import HERMES
from radixrt.serve.http.tools.plan import PlainText, read_output
from radixrt.serve.http.tools.reasoning import Reasoning, ReasoningSplit

ADD = ToolSpec("add", "", {"type": "object", "properties": {"a": {"type": "integer"}}})
CALL = '<tool_call>\n{"name":"add","arguments":{"a":1}}\n</tool_call>'

# (parser, prompt tail, output) -> (reasoning, answer)
CASES = [
    (
        "qwen3",
        "assistant\n",
        "<think>\nLet me see.\n</think>\n\nParis.",
        ("\nLet me see.\n", "Paris."),
    ),
    ("qwen3", "assistant\n", "  <think>a</think>b", ("a", "b")),
    ("qwen3", "assistant\n", "Paris, no thinking.", ("", "Paris, no thinking.")),
    ("qwen3", "assistant\n", "Paris <think>x</think>", ("", "Paris <think>x</think>")),
    ("qwen3", "<think>\n", "mulling</think>\n\nParis.", ("mulling", "Paris.")),
    ("qwen3", "assistant\n", "<think>cut off", ("cut off", "")),
    ("qwen3", "assistant\n", "<thin", ("", "<thin")),
    ("qwen3", "assistant\n", "", ("", "")),
    ("deepseek_r1", "assistant\n", "mulling</think>Paris.", ("mulling", "Paris.")),
    ("deepseek_r1", "<think>\n", "<think>mulling</think>Paris.", ("mulling", "Paris.")),
    ("deepseek_r1", "", "no end tag", ("no end tag", "")),
    ("deepseek_r1", "", "</think>\n\n\nanswer\n\nmore", ("", "answer\n\nmore")),
    ("deepseek_r1", "", "a </thin b</think>c", ("a </thin b", "c")),
]


def _split(parser: str, tail: str, pieces: list[str]) -> tuple[str, str]:
    reasoning = Reasoning.of(parser, tail)
    assert reasoning is not None
    split = ReasoningSplit(PlainText(), reasoning)
    events = [e for p in pieces for e in split.feed(p)] + split.finish()
    assert all(e.text for e in events), events  # no empty pieces
    return (
        "".join(e.text for e in events if isinstance(e, ReasoningPiece)),
        "".join(e.text for e in events if isinstance(e, TextPiece)),
    )


@pytest.mark.parametrize(("parser", "tail", "output", "want"), CASES)
def test_reasoning_and_answer_for_every_split(parser, tail, output, want) -> None:
    assert _split(parser, tail, [output]) == want
    for i in range(len(output) + 1):  # every split in two, and one character at a time
        assert _split(parser, tail, [output[:i], output[i:]]) == want, i
    assert _split(parser, tail, list(output)) == want


def test_none_reads_nothing_and_an_unknown_parser_is_refused() -> None:
    assert Reasoning.of("none", "<think>") is None
    with pytest.raises(ValueError, match="unknown reasoning parser"):
        Reasoning.of("r1", "")


def test_calls_are_read_from_the_answer_only() -> None:
    plan = ToolPlan(HERMES, (ADD,)).with_reasoning("qwen3", "assistant\n", {})
    assert plan.reasoning == Reasoning(inside=False) and plan.parses_output
    reasoning, text, calls = read_output(plan, f"<think>I could write {CALL}.</think>\n{CALL}")
    assert reasoning == f"I could write {CALL}." and text == ""
    assert [(c.name, c.arguments) for c in calls] == [("add", '{"a":1}')]
    # A request that does not show it (Anthropic's without thinking) leaves it out.
    hidden = ToolPlan(HERMES, (ADD,)).with_reasoning("qwen3", "assistant\n", {}, shown=False)
    parser = hidden.new_parser()
    events = parser.feed("<think>hmm</think>Hi") + parser.finish()
    assert events == [TextPiece("Hi")]


def test_reasoning_is_read_only_where_the_output_starts_free() -> None:
    """A forced call, a response format, or a grammar of the request's own holds the output
    from its first token: no reasoning there. `auto` tools alone start with free text."""
    plain = ToolPlan(HERMES)
    assert plain.with_reasoning("deepseek_r1", "", {}).reasoning == Reasoning(inside=True)
    assert plain.with_reasoning("qwen3", "x", {"json_schema": "{}"}).reasoning is None
    assert plain.with_reasoning("qwen3", "x", {"regex": "a+"}).reasoning is None
    assert plain.with_reasoning("none", "<think>", {}).reasoning is None
    forced = ToolPlan(HERMES, (ADD,), ToolChoice("required"))
    assert forced.with_reasoning("qwen3", "x", {}).reasoning is None
    assert ToolPlan(HERMES, (ADD,)).with_reasoning("qwen3", "x", {}).reasoning is not None
