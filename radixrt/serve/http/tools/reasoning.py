"""A reasoning model's thinking, read out of its output as it streams: the text between
`<think>` and `</think>` (Qwen3, DeepSeek-R1 and their kind) is reasoning, the rest is the
answer, which the calls parser reads as before. `--reasoning-parser` names the family:

- `qwen3`: reasoning where the output opens with `<think>` (after blanks), or where the prompt
  already ends with it (templates that open the thinking themselves, as Qwen3's thinking-only
  checkpoints do); an output without it is all answer;
- `deepseek_r1`: the output is reasoning from its start (its template opens the thinking),
  a `<think>` it writes first is dropped;
- `none`: no reasoning is read out (the default; the tags stay in the text).

Reasoning ends at `</think>`; blank lines right after it are the template's, not the answer's.
An output that ends inside its reasoning has no answer. A tag split over deltas is held back
until it is whole, so splitting the output differently gives the same pieces."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from radixrt.core.config import REASONING_PARSERS
from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools.parser import OutputParser, ReasoningPiece, ToolEvent
from radixrt.serve.http.tools.spec import ToolCall

START, END = "<think>", "</think>"

# An effort level's thinking budget in tokens, for the dialects that name levels rather than
# budgets (OpenAI's reasoning_effort and the Responses API's reasoning.effort, Anthropic's
# output_config.effort with adaptive thinking, Gemini's thinkingLevel): "none" is no
# thinking, low/medium/high are the budgets Gemini's OpenAI-compatible API gives those levels,
# "max" is no cap. Each dialect takes its own levels (EFFORTS_*), read through effort_budget.
EFFORT_BUDGETS: dict[str, int | None] = {
    "none": 0,
    "minimal": 512,
    "low": 1024,
    "medium": 8192,
    "high": 24576,
    "xhigh": 32768,
    "max": None,
}
EFFORTS_OPENAI = ("none", "minimal", "low", "medium", "high", "xhigh")
EFFORTS_ANTHROPIC = ("low", "medium", "high", "xhigh", "max")
EFFORTS_GEMINI = ("minimal", "low", "medium", "high")


def effort_budget(level: str, field: str, levels: tuple[str, ...]) -> int | None:
    """The thinking budget of effort `level` (one of the dialect's `levels`, any case), None
    for no cap; 400 naming `field` for another level."""
    key = level.lower()
    if key not in levels:
        raise BadRequestError(f"{field}: {level!r} is not one of {', '.join(levels)}")
    return EFFORT_BUDGETS[key]


@dataclass(frozen=True, slots=True)
class ThinkTags:
    """`<think>` and `</think>` as one token each; `special`: special tokens, which a decode
    skipping special tokens drops, so the output's text must keep special tokens for the
    parser to see them."""

    start: int
    end: int
    special: bool = False


@dataclass(frozen=True, slots=True)
class Reasoning:
    """How one output's reasoning is read: `inside`, whether the output starts in it (the
    prompt opened it); `shown`, whether the answer shows it (else it is left out); `tags`,
    `<think>` and `</think>` where each is one token of the model's (None: text only), which
    the scheduler's reasoning gate needs: a grammar then holds the answer after the
    reasoning, and `budget` caps the reasoning's tokens."""

    inside: bool
    shown: bool = True
    tags: ThinkTags | None = None
    budget: int | None = None

    @staticmethod
    def of(parser: str, prompt_tail: str, shown: bool = True) -> Reasoning | None:
        """For `parser` (REASONING_PARSERS) and the end of the prompt's text; None: none (no
        parser, or a prompt that closed the reasoning itself: thinking turned off)."""
        if parser == "none":
            return None
        if parser not in REASONING_PARSERS:
            raise ValueError(
                f"unknown reasoning parser {parser!r}; choose from {REASONING_PARSERS}"
            )
        tail = prompt_tail.rstrip()
        if tail.endswith(END):
            return None
        return Reasoning(parser == "deepseek_r1" or tail.endswith(START), shown)

    def sampling(self) -> dict[str, Any]:
        """The sampling fields of the scheduler's gate (none where the tags are not tokens),
        and special tokens kept in the text where the tags are special tokens."""
        if self.tags is None:
            return {}
        d: dict[str, Any] = {"reasoning_end_id": self.tags.end}
        if not self.inside:
            d["reasoning_start_id"] = self.tags.start
        if self.budget is not None:
            d["thinking_token_budget"] = self.budget
        if self.tags.special:
            d["skip_special_tokens"] = False
        return d


@functools.lru_cache(maxsize=8)
def reasoning_tokens(tokenizer: Any) -> ThinkTags | None:
    """`<think>` and `</think>` where each is one token that decodes to itself (Qwen3's and
    DeepSeek-R1's added tokens; some checkpoints mark them special), else None."""
    ids, special = [], False
    for tag in (START, END):
        found = tokenizer.encode(tag, add_special_tokens=False)
        if len(found) != 1 or tokenizer.decode(found, skip_special_tokens=False) != tag:
            return None
        special |= tokenizer.decode(found, skip_special_tokens=True) != tag
        ids.append(int(found[0]))
    return ThinkTags(ids[0], ids[1], special)


def count_reasoning_tokens(params: Any, output_ids: list[int]) -> int | None:
    """How many of an output's tokens are its reasoning, the tags included: up to its
    `</think>`, or all of it where it ends inside the reasoning. None where the request's
    sampling parameters (a SamplingParams) name no reasoning tokens (no parser, or tags that
    are text only: the count is not known)."""
    end = params.reasoning_end_id
    if end is None:
        return None
    start = params.reasoning_start_id
    if start is not None and (not output_ids or output_ids[0] != start):
        return 0  # the output did not open a reasoning
    return output_ids.index(end) + 1 if end in output_ids else len(output_ids)


class ReasoningSplit:
    """An output parser that gives its reasoning as ReasoningPiece events (or drops it, where
    it is not shown) and feeds the rest to `inner`."""

    def __init__(self, inner: OutputParser, reasoning: Reasoning) -> None:
        self.inner = inner
        self.keep = reasoning.shown
        # "open": before the output's first non-blank text (a <think> may open it);
        # "inside": reasoning; "after": just past </think> (blank lines dropped); "answer".
        self._state = "inside" if reasoning.inside else "open"
        self._held = ""  # text not yet given: a tag's possible start, or leading blanks
        self._opened = False  # whether the output's start was read: a <think> there is dropped

    @property
    def calls(self) -> list[ToolCall]:
        return self.inner.calls

    def feed(self, text: str) -> list[ToolEvent]:
        out: list[ToolEvent] = []
        text = self._held + text
        self._held = ""
        while text:
            if self._state == "answer":
                out += self.inner.feed(text)
                break
            if self._state == "open" or (self._state == "inside" and not self._opened):
                body = text.lstrip()
                if body.startswith(START):
                    self._state, self._opened, text = "inside", True, body[len(START) :]
                    continue
                if START.startswith(body):  # blanks, or a <think> not yet whole
                    self._held = text
                    break
                if self._state == "open":
                    self._state = "answer"
                    continue
                self._opened = True  # (inside from the prompt: this is reasoning)
            if self._state == "after":
                body = text.lstrip("\n")
                if not body:
                    break
                self._state, text = "answer", body
                continue
            end = text.find(END)
            if end >= 0:
                out += self._reason(text[:end])
                self._state, text = "after", text[end + len(END) :]
                continue
            keep = _partial_tail(text, END)
            out += self._reason(text[: len(text) - keep])
            self._held = text[len(text) - keep :]
            break
        return out

    def finish(self) -> list[ToolEvent]:
        held, self._held = self._held, ""
        out: list[ToolEvent] = []
        if self._state == "inside":
            out += self._reason(held)
        elif held and self._state in ("open", "answer"):
            out += self.inner.feed(held)
        return out + self.inner.finish()

    def _reason(self, text: str) -> list[ToolEvent]:
        return [ReasoningPiece(text)] if text and self.keep else []


def _partial_tail(text: str, tag: str) -> int:
    """The length of the longest end of `text` that is a proper start of `tag`."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0
