"""What one request asks of tools, as its dialect parsed it: the tools, the choice and the
model's call format; the sampling fields that force a call, and the parser of its output.
A request without tools has the null plan: its output is all text."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from radixrt.grammar.base import SPEC_KINDS
from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools.formats import CallFormat
from radixrt.serve.http.tools.grammar import (
    auto_call_or_json_spec,
    auto_call_spec,
    forced_call_spec,
)
from radixrt.serve.http.tools.parser import (
    OutputParser,
    ReasoningPiece,
    TextPiece,
    ToolCallParser,
    ToolEvent,
    new_call_id,
)
from radixrt.serve.http.tools.reasoning import Reasoning, ReasoningSplit, reasoning_tokens
from radixrt.serve.http.tools.spec import (
    ToolCall,
    ToolChoice,
    ToolSpec,
    allowed_tools,
    check_tools,
)


class PlainText:
    """The parser of an output that holds no calls: all of it is text."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []

    def feed(self, text: str) -> list[ToolEvent]:
        return [TextPiece(text)] if text else []

    def finish(self) -> list[ToolEvent]:
        return []


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """`reasoning`: how the output's reasoning is read out of it (None: it is not; see
    with_reasoning)."""

    fmt: CallFormat
    tools: tuple[ToolSpec, ...] = ()
    choice: ToolChoice = field(default_factory=ToolChoice)
    reasoning: Reasoning | None = None

    def __post_init__(self) -> None:
        check_tools(list(self.tools), self.choice)

    @property
    def parses_calls(self) -> bool:
        return bool(self.tools) and self.choice.mode != "none"

    @property
    def parses_output(self) -> bool:
        """Whether the output is read (calls, reasoning), not taken as text."""
        return self.parses_calls or self.reasoning is not None

    def with_reasoning(
        self,
        parser: str,
        prompt_text: str,
        asked: dict[str, Any],
        tokenizer: Any,
        shown: bool = True,
        budget: int | None = None,
        asked_by: str | None = "thinking_token_budget",
    ) -> ToolPlan:
        """The plan reading reasoning as `parser` (reasoning.REASONING_PARSERS) does, for the
        prompt `prompt_text` (its end: whether it opens the reasoning) and the request's
        sampling dict `asked` (before the tools' fields); `shown`: the answer shows it (else
        it is left out: a dialect's request that did not ask for thinking); `budget`: the most
        tokens the reasoning may take (None: no cap).

        Where `<think>` and `</think>` are tokens of the model's, the scheduler's reasoning
        gate lets the reasoning come first and a grammar (a forced call, a response format, a
        regex) hold the answer after it, and caps the reasoning at `budget`. Where they are
        text only, an output a grammar holds from its first token has no reasoning, and a
        budget cannot be kept: a 400 naming the field `asked_by` where the request asked for
        the cap itself (vLLM's thinking_token_budget, an effort level), taken and not kept
        where `asked_by` is None: a dialect whose every thinking request carries one
        (Anthropic's budget_tokens, Gemini's thinkingBudget)."""
        if parser == "none":
            if budget is not None and asked_by is not None:
                raise BadRequestError(
                    f"{asked_by}: a thinking budget needs a server that reads reasoning "
                    "(start it with --reasoning-parser)"
                )
            return self
        tokens = reasoning_tokens(tokenizer)
        if tokens is None:
            if budget is not None and asked_by is not None:
                raise BadRequestError(
                    f"{asked_by}: a thinking budget needs a model whose <think> and </think> "
                    "are tokens of its own; this model writes them as text"
                )
            if self.choice.is_forced and self.tools:
                return self
            if any(asked.get(k) is not None for k in SPEC_KINDS):
                return self
        reasoning = Reasoning.of(parser, prompt_text[-64:], shown)
        if reasoning is None:
            return self
        if tokens is not None:  # the gate's: a budget is kept only by it
            reasoning = replace(reasoning, tags=tokens, budget=budget)
        return replace(self, reasoning=reasoning)

    def sampling_dict(self, tokenizer: Any, asked: dict[str, Any]) -> dict[str, Any]:
        """Fields to add to the request's sampling dict `asked`: a forced call's grammar;
        special tokens kept in the text when the format opens calls with one; the reasoning
        gate's tokens and budget (Reasoning.sampling)."""
        d: dict[str, Any] = {}
        has_grammar = any(asked.get(k) is not None for k in SPEC_KINDS)
        answer = _json_answer(asked) if has_grammar else None  # a JSON response format
        if self.choice.is_forced and self.tools:
            # A JSON response format shapes a text answer, which a forced turn does not have:
            # the call is made and the format waits for a later turn (as OpenAI and vLLM do).
            if has_grammar and answer is None:
                raise BadRequestError(
                    "a forced tool call cannot be combined with a regex or grammar of the "
                    "request's own"
                )
            if answer is not None:
                d["json_schema"] = None
            if asked.get("allowed_token_ids"):
                raise BadRequestError(
                    "a forced tool call cannot be combined with allowed_token_ids (its grammar's "
                    "forced tokens are not sampled)"
                )
            tokens = _markers(tokenizer, self.fmt).special
            d.update(forced_call_spec(self.fmt, list(self.tools), self.choice, tokens))
            # After a complete call, end where the model would write anything but another.
            d["end_on_exit"] = True
        special = self.parses_calls and _markers(tokenizer, self.fmt).opener_is_token
        # `auto` constrains an opened call by a grammar of its own; with a JSON response
        # format, the output is calls or the answer in that format (one grammar for both).
        # With another grammar, or tokens restricted (which a grammar's forced tokens would
        # not respect), the calls are only parsed.
        if self.parses_calls and not self.choice.is_forced and not asked.get("allowed_token_ids"):
            tokens = _markers(tokenizer, self.fmt).special
            tools = allowed_tools(list(self.tools), self.choice)  # auto's allowed_tools too
            if not has_grammar:
                d.update(auto_call_spec(self.fmt, tools, self.choice, tokens))
            elif answer is not None:
                spec = auto_call_or_json_spec(self.fmt, tools, self.choice, answer, tokens)
                if spec:
                    d.update(spec, json_schema=None)  # (the schema is the grammar's answer)
        if special:
            d["skip_special_tokens"] = False
        if self.reasoning is not None:
            d.update(self.reasoning.sampling())
        return d

    def new_parser(self, new_id: Callable[[], str] = new_call_id) -> OutputParser:
        """A parser for one output (one per sample); its reasoning, where the plan reads and
        shows it, given as ReasoningPiece events."""
        inner: OutputParser = PlainText()
        if self.parses_calls:
            names = {t.name for t in allowed_tools(list(self.tools), self.choice)}
            inner = ToolCallParser(self.fmt, names, self.choice.is_forced, new_id)
        if self.reasoning is None:
            return inner
        return ReasoningSplit(inner, self.reasoning)


def read_output(
    plan: ToolPlan, text: str, new_id: Callable[[], str] = new_call_id
) -> tuple[str, str, list[ToolCall]]:
    """A whole output's reasoning, its text (calls and reasoning taken out) and its calls."""
    parser = plan.new_parser(new_id)
    events = parser.feed(text) + parser.finish()
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningPiece))
    return reasoning, "".join(e.text for e in events if isinstance(e, TextPiece)), parser.calls


def _json_answer(asked: dict[str, Any]) -> dict[str, Any] | None:
    """The request's JSON schema when that is its only constraint (a response format), else
    None (a regex or grammar of its own, or a schema that is not a JSON object)."""
    if any(asked.get(k) is not None for k in SPEC_KINDS if k != "json_schema"):
        return None
    schema = asked.get("json_schema")
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return None
    return schema if isinstance(schema, dict) else None


def special_markers(tokenizer: Any, fmt: CallFormat) -> dict[str, int]:
    """The format's opener and closer that are special tokens of `tokenizer`, with their ids.
    A grammar writes those as the token (text never holds one); an added token that is not
    special (Qwen's <tool_call>) is text, as the grammar backends read it."""
    return dict(_markers(tokenizer, fmt).special)


@dataclass(frozen=True, slots=True)
class _Markers:
    special: dict[str, int]  # special_markers'
    opener_is_token: bool  # the opener (or lead) is an added or special token: keep it in text


@functools.lru_cache(maxsize=8)
def _markers(tokenizer: Any, fmt: CallFormat) -> _Markers:
    """What `tokenizer` makes of `fmt`'s markers, read once per tokenizer (a served one does
    not change; Gemma 3 has 6,384 added tokens: listing them took 18 ms a request)."""
    added = {t.content: t.special for t in (getattr(tokenizer, "added_tokens_decoder", None)
                                            or {}).values()}  # fmt: skip
    specials = set(getattr(tokenizer, "all_special_tokens", ()) or ())
    found = [
        m for m in (fmt.opener, fmt.closer) if m is not None and (m in specials or added.get(m))
    ]
    opener = fmt.opener or fmt.lead
    return _Markers({m: int(tokenizer.convert_tokens_to_ids(m)) for m in found},
                    opener is not None and (opener in specials or opener in added))  # fmt: skip
