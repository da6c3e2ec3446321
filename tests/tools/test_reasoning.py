"""Reasoning read out of an output (tools/reasoning.py): what is reasoning and what is the
answer for each parser, the same pieces however the output is split into deltas, calls read
from the answer only, and which requests read it at all: where `<think>` and `</think>` are
text only, none where a grammar holds the output from its first token; where they are tokens,
every request, the scheduler's gate letting the grammar start after the reasoning."""

from __future__ import annotations

import pytest

from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools import ReasoningPiece, TextPiece, ToolChoice, ToolPlan, ToolSpec
from radixrt.serve.http.tools.formats import HERMES
from radixrt.serve.http.tools.plan import PlainText, read_output
from radixrt.serve.http.tools.reasoning import Reasoning, ReasoningSplit, ThinkTags

ADD = ToolSpec("add", "", {"type": "object", "properties": {"a": {"type": "integer"}}})
CALL = '<tool_call>\n{"name":"add","arguments":{"a":1}}\n</tool_call>'


class Tokenizer:
    """Characters as tokens; with `tags`, `<think>` and `</think>` one token each (7, 8),
    special tokens (dropped by a decode that skips them) with `special`."""

    def __init__(self, tags: bool, special: bool = False) -> None:
        self.tags = {"<think>": 7, "</think>": 8} if tags else {}
        self.special = special

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.tags[text]] if text in self.tags else [ord(c) for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        names = {v: "" if self.special and skip_special_tokens else k for k, v in self.tags.items()}
        return "".join(names.get(i, chr(i)) for i in ids)


TEXT_TAGS, TOKEN_TAGS = Tokenizer(False), Tokenizer(True)

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
    plan = ToolPlan(HERMES, (ADD,)).with_reasoning("qwen3", "assistant\n", {}, TEXT_TAGS)
    assert plan.reasoning == Reasoning(inside=False) and plan.parses_output
    reasoning, text, calls = read_output(plan, f"<think>I could write {CALL}.</think>\n{CALL}")
    assert reasoning == f"I could write {CALL}." and text == ""
    assert [(c.name, c.arguments) for c in calls] == [("add", '{"a":1}')]
    # A request that does not show it (Anthropic's without thinking) leaves it out.
    hidden = ToolPlan(HERMES, (ADD,)).with_reasoning(
        "qwen3", "assistant\n", {}, TEXT_TAGS, shown=False
    )
    parser = hidden.new_parser()
    events = parser.feed("<think>hmm</think>Hi") + parser.finish()
    assert events == [TextPiece("Hi")]


def test_reasoning_is_read_only_where_the_output_starts_free() -> None:
    """With the tags as text, a forced call, a response format, or a grammar of the request's
    own holds the output from its first token: no reasoning there. `auto` tools alone start
    with free text."""
    plain = ToolPlan(HERMES)
    assert plain.with_reasoning("deepseek_r1", "", {}, TEXT_TAGS).reasoning == Reasoning(
        inside=True
    )
    assert plain.with_reasoning("qwen3", "x", {"json_schema": "{}"}, TEXT_TAGS).reasoning is None
    assert plain.with_reasoning("qwen3", "x", {"regex": "a+"}, TEXT_TAGS).reasoning is None
    assert plain.with_reasoning("none", "<think>", {}, TEXT_TAGS).reasoning is None
    forced = ToolPlan(HERMES, (ADD,), ToolChoice("required"))
    assert forced.with_reasoning("qwen3", "x", {}, TEXT_TAGS).reasoning is None
    assert (
        ToolPlan(HERMES, (ADD,)).with_reasoning("qwen3", "x", {}, TEXT_TAGS).reasoning is not None
    )


def test_with_tag_tokens_a_grammar_follows_the_reasoning() -> None:
    """Where the tags are tokens, every request reads reasoning, and its sampling fields
    name the gate's tokens: the end always, the start where the output may open it, the
    budget where one is asked; the tools' grammar stays (the gate holds it back)."""
    plain = ToolPlan(HERMES)
    r1 = plain.with_reasoning("deepseek_r1", "", {"json_schema": "{}"}, TOKEN_TAGS)
    assert r1.reasoning == Reasoning(inside=True, tags=ThinkTags(7, 8))
    assert r1.sampling_dict(TOKEN_TAGS, {"json_schema": "{}"}) == {"reasoning_end_id": 8}
    qwen = plain.with_reasoning("qwen3", "x", {"regex": "a+"}, TOKEN_TAGS, budget=16)
    assert qwen.sampling_dict(TOKEN_TAGS, {"regex": "a+"}) == {
        "reasoning_end_id": 8, "reasoning_start_id": 7, "thinking_token_budget": 16,
    }  # fmt: skip
    forced = ToolPlan(HERMES, (ADD,), ToolChoice("required"))
    d = forced.with_reasoning("qwen3", "<think>\n", {}, TOKEN_TAGS).sampling_dict(TOKEN_TAGS, {})
    assert d["reasoning_end_id"] == 8 and "reasoning_start_id" not in d
    assert any(d.get(k) for k in ("regex", "ebnf"))  # the call's grammar, after the reasoning
    # A prompt that closed the reasoning (thinking turned off by the template): none.
    closed = plain.with_reasoning("qwen3", "<think>\n\n</think>\n\n", {}, TOKEN_TAGS)
    assert closed.reasoning is None


def test_special_tags_are_tokens_kept_in_the_text() -> None:
    """`<think>` and `</think>` as special tokens (some checkpoints mark them so): still the
    gate's tokens, and the output's text keeps special tokens, so the parser sees the tags
    (a decode skipping them would hand it reasoning and answer run together)."""
    special = Tokenizer(True, special=True)
    plan = ToolPlan(HERMES).with_reasoning("qwen3", "x", {}, special, budget=3)
    assert plan.reasoning is not None and plan.reasoning.tags == ThinkTags(7, 8, special=True)
    assert plan.sampling_dict(special, {}) == {
        "reasoning_end_id": 8, "reasoning_start_id": 7, "thinking_token_budget": 3,
        "skip_special_tokens": False,
    }  # fmt: skip
    plain = ToolPlan(HERMES).with_reasoning("qwen3", "x", {}, TOKEN_TAGS)
    assert "skip_special_tokens" not in plain.sampling_dict(TOKEN_TAGS, {})


def test_a_budget_the_server_cannot_keep_is_refused() -> None:
    plain = ToolPlan(HERMES)
    with pytest.raises(BadRequestError, match="--reasoning-parser"):
        plain.with_reasoning("none", "", {}, TOKEN_TAGS, budget=8)
    with pytest.raises(BadRequestError, match="writes them as text"):
        plain.with_reasoning("qwen3", "", {}, TEXT_TAGS, budget=8)
    # A dialect whose every thinking request carries a budget (Anthropic's, Gemini's): taken,
    # not kept, where it cannot be.
    soft = plain.with_reasoning("qwen3", "", {}, TEXT_TAGS, budget=8, asked_by=None)
    assert soft.reasoning == Reasoning(inside=False) and soft.sampling_dict(TEXT_TAGS, {}) == {}
    assert plain.with_reasoning("none", "", {}, TEXT_TAGS, budget=0, asked_by=None) == plain


def test_reasoning_tokens_counted_from_the_output_ids() -> None:
    """Usage's reasoning tokens: up to and with `</think>` (8), all of an output that ends
    inside its reasoning, none of one that did not open it (`<think>`, 7, first); unknown
    where the tags are not tokens."""
    from radixrt.core import SamplingParams
    from radixrt.serve.http.tools import count_reasoning_tokens

    inside = SamplingParams(reasoning_end_id=8)
    opened = SamplingParams(reasoning_end_id=8, reasoning_start_id=7)
    assert count_reasoning_tokens(inside, [1, 2, 8, 3]) == 3
    assert count_reasoning_tokens(inside, [1, 2]) == 2
    assert count_reasoning_tokens(opened, [7, 1, 8, 3, 4]) == 3
    assert count_reasoning_tokens(opened, [3, 4]) == 0
    assert count_reasoning_tokens(opened, []) == 0
    assert count_reasoning_tokens(SamplingParams(), [1, 2]) is None


def test_effort_levels_are_thinking_budgets_in_every_dialect() -> None:
    """OpenAI's reasoning_effort and the Responses API's reasoning.effort, Anthropic's
    output_config.effort (under adaptive thinking) and Gemini's thinkingLevel name levels; each
    is one budget of EFFORT_BUDGETS (none: no thinking; max: no cap), read in any case; a
    level outside the dialect's own is a 400 naming the field."""
    import msgspec

    from radixrt.serve.http.api.anthropic.protocol import OutputConfig
    from radixrt.serve.http.api.gemini.output_format import ThinkingConfig, thinking_budget
    from radixrt.serve.http.api.openai.protocol import ChatCompletionRequest
    from radixrt.serve.http.api.openai.protocol import thinking_budget as chat_budget
    from radixrt.serve.http.api.responses.protocol import ReasoningOptions

    def chat(**fields: object) -> ChatCompletionRequest:
        return msgspec.convert({"messages": [], **fields}, ChatCompletionRequest)

    assert chat_budget(chat(reasoning_effort="none")) == (0, "reasoning_effort")
    assert chat_budget(chat(reasoning_effort="low")) == (1024, "reasoning_effort")
    assert chat_budget(chat(reasoning_effort="HIGH")) == (24576, "reasoning_effort")
    # vLLM's own budget, where both are given, is the more precise of the two.
    both = chat(reasoning_effort="high", thinking_token_budget=7)
    assert chat_budget(both) == (7, "thinking_token_budget")
    assert chat_budget(chat()) == (None, "thinking_token_budget")
    with pytest.raises(BadRequestError, match="reasoning_effort: 'max' is not one of none"):
        chat_budget(chat(reasoning_effort="max"))
    assert ReasoningOptions(effort="medium").budget == 8192
    assert ReasoningOptions(summary="auto").budget is None
    with pytest.raises(BadRequestError, match="reasoning.effort"):
        ReasoningOptions(effort="extreme").budget  # noqa: B018
    assert OutputConfig().thinking_budget() == 24576  # Anthropic's default level: high
    assert OutputConfig(effort="max").thinking_budget() is None
    assert OutputConfig(effort="low").thinking_budget() == 1024
    with pytest.raises(BadRequestError, match="output_config.effort: 'none'"):
        OutputConfig(effort="none").thinking_budget()
    assert thinking_budget(ThinkingConfig(thinking_level="LOW")) == 1024
    assert thinking_budget(ThinkingConfig(thinking_level_snake="minimal")) == 512
    assert thinking_budget(ThinkingConfig(thinking_level="THINKING_LEVEL_UNSPECIFIED")) is None
    with pytest.raises(BadRequestError, match="not both"):
        thinking_budget(ThinkingConfig(thinking_level="high", thinking_budget=5))
    with pytest.raises(BadRequestError, match="thinkingLevel: ''"):
        thinking_budget(ThinkingConfig(thinking_level=""))
    with pytest.raises(BadRequestError, match="thinkingLevel: 'xhigh'"):
        thinking_budget(ThinkingConfig(thinking_level="xhigh"))
    # The field named in the 400 where the budget cannot be kept.
    with pytest.raises(BadRequestError, match="^reasoning_effort: a thinking budget needs"):
        ToolPlan(HERMES).with_reasoning(
            "none", "", {}, TOKEN_TAGS, budget=0, asked_by="reasoning_effort"
        )
