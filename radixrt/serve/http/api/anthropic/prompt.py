"""An Anthropic Messages request as one prompt: tools (as text) and system blocks make the
system turn, the messages the conversation, through the model's chat template; each
cache_control breakpoint becomes the token offset where its block ends.

Prefix order is tools -> system -> messages, and a block's text never depends on the blocks
after it (separators go before a block, not after), so two requests that share every block up
to a breakpoint share the prompt text, and so the tokens, up to it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from radixrt.core import SamplingParams
from radixrt.serve.http.api.anthropic.protocol import (
    Breakpoint,
    CacheControl,
    ContentBlock,
    MessagesRequest,
    OutputConfig,
    check_request,
    content_blocks,
    sampling_dict,
    system_blocks,
    tool_plan,
)
from radixrt.serve.http.protocol import (
    BadRequestError,
    Limits,
    fit_to_context,
    render_chat,
    to_sampling_params,
)
from radixrt.serve.http.tools import CallFormat, ToolCall, ToolPlan
from radixrt.serve.http.tools.formats import tool_line
from radixrt.serve.http.tools.grammar import compact_json

SEP = "\n\n"  # between the blocks of one turn, and between merged turns of one role
# A prompt text's start whose ids are known (characters, ids): an answered turn it replays
# (the pipeline's continuations), so those ids are the ones the cache holds.
Head = Callable[[str], tuple[int, list[int]]]


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    input_ids: list[int]
    breakpoints: list[Breakpoint]  # in prefix order
    plan: ToolPlan
    params: SamplingParams | None = None  # None: only counted (count_tokens)
    text: str = ""  # the rendered prompt the ids are of


def prepare_messages(
    req: MessagesRequest,
    tokenizer: Any,
    limits: Limits,
    generate: bool,
    fmt: CallFormat,
    head: Head | None = None,
    reasoning: str = "none",
) -> RenderedPrompt:
    """Check, render and tokenize a body (the start `head` knows with its ids); with
    `generate`, its sampling parameters too, and the plan that reads its output: reasoning,
    read as the parser `reasoning` does, shown as thinking blocks where the request enables
    thinking, else left out."""
    most = limits.server.max_chat_messages
    if len(req.messages) > most:
        raise BadRequestError(f"{len(req.messages)} messages; at most {most} (--max-chat-messages)")
    req = check_request(req)
    plan = tool_plan(req, fmt)
    prompt = render_prompt(req, plan, tokenizer, limits, head)
    if not generate:
        return prompt
    d = sampling_dict(req)
    thinks, budget = _thinking(req, reasoning)
    plan = plan.with_reasoning(reasoning, prompt.text, d, tokenizer, thinks, budget, None)
    d.update(plan.sampling_dict(tokenizer, d))
    sp = fit_to_context(prompt.input_ids, to_sampling_params(d), limits, True)
    return RenderedPrompt(prompt.input_ids, prompt.breakpoints, plan, sp, prompt.text)


def _thinking(req: MessagesRequest, reasoning: str) -> tuple[bool, int | None]:
    """Whether the answer shows the thinking, and the thinking's budget (None: no cap):
    enabled, its budget_tokens (400 where the server reads no reasoning); adaptive,
    output_config.effort's budget (where the server reads no reasoning the model thinks not
    at all, which adaptive thinking allows); between_tools, adaptive on a turn answering tool
    results and none before a first answer; disabled, none at all where the gate can keep it
    so (a budget of 0); no thinking field, no cap and nothing shown."""
    thinking = req.thinking
    if thinking is None:
        return False, None
    shown = thinking.display != "omitted"
    if thinking.type == "enabled":
        if reasoning == "none":
            raise BadRequestError(
                "thinking: this server reads no reasoning (start it with --reasoning-parser)"
            )
        return shown, thinking.budget_tokens
    if thinking.type == "adaptive" or (thinking.type == "between_tools" and _answers_tools(req)):
        return shown, (req.output_config or OutputConfig()).thinking_budget()
    return False, 0


def _answers_tools(req: MessagesRequest) -> bool:
    """Whether the last message is a user turn giving tool results."""
    last = req.messages[-1]
    blocks = last.content if isinstance(last.content, list) else []
    return last.role == "user" and any(b.type == "tool_result" for b in blocks)


def render_prompt(
    req: MessagesRequest,
    plan: ToolPlan,
    tokenizer: Any,
    limits: Limits,
    head: Head | None = None,
) -> RenderedPrompt:
    """Template the request (add_generation_prompt; a last assistant turn is a prefill the
    answer continues) and place its breakpoints (controls already checked). The tools are
    written in the model's call format at the front of the system turn, one line each."""
    marks = _Marks()
    turns: list[dict[str, str]] = []
    fmt = plan.fmt
    tools = req.tools or []
    system = [fmt.tools_head] if tools else []  # part of the first tool's prefix
    system += [marks.after(tool_line(s), t.cache_control) for s, t in zip(plan.tools, tools)]
    system += [fmt.tools_tail] if tools and fmt.tools_tail else []
    system = ["\n".join(system)] if system else []
    system += [
        marks.after(_block_text(b, "system", fmt), b.cache_control) for b in system_blocks(req)
    ]
    if system:
        turns.append({"role": "system", "content": SEP.join(system)})
    for i, m in enumerate(req.messages):
        where = f"messages.{i}"
        text = SEP.join(
            marks.after(_block_text(b, f"{where}.content.{j}", fmt), b.cache_control)
            for j, b in enumerate(content_blocks(m.content))
            if b.type not in THINKING_BLOCKS  # (earlier thinking given back: not shown)
        )
        if turns and turns[-1]["role"] == m.role:  # consecutive turns of a role are one
            turns[-1]["content"] += SEP + text
        else:
            turns.append({"role": m.role, "content": text})
    prefill = turns.pop()["content"] if turns[-1]["role"] == "assistant" else ""
    if prefill != prefill.rstrip():
        raise BadRequestError("final assistant content cannot end with trailing whitespace")
    text, char_ends = marks.cut(render_chat(turns, tokenizer, limits) + prefill)
    limits.check_text(text, "the rendered conversation")  # with the prefill
    ids, offsets = token_offsets(tokenizer, text, char_ends, head(text) if head else (0, []))
    points = [Breakpoint(o, t) for o, t in zip(offsets, marks.ttls, strict=True)]
    return RenderedPrompt(ids, points, plan, text=text)


def token_offsets(
    tokenizer: Any, text: str, char_ends: list[int], head: tuple[int, list[int]] = (0, [])
) -> tuple[list[int], list[int]]:
    """The tokens of `text` (`head`'s ids for its first characters, then the tokenizer's) and,
    for each of `char_ends` (ascending), how many of them end at or before it: a token across
    the end is left out, so the prefix never reaches past it. An end inside the head counts
    the tokenizer's tokens up to it while they are the head's, else only those that are."""
    n, head_ids = head
    if not n:
        return _token_offsets(tokenizer, text, char_ends)
    ids, offsets = _token_offsets(tokenizer, text[n:], [c - n for c in char_ends if c >= n])
    inside = [c for c in char_ends if c < n]
    before: list[int] = []
    if inside:
        own, own_offsets = _token_offsets(tokenizer, text[:n], inside)
        same = _common_len(own, head_ids)
        before = [min(o, same) for o in own_offsets]
    return [*head_ids, *ids], before + [len(head_ids) + o for o in offsets]


def _token_offsets(tokenizer: Any, text: str, char_ends: list[int]) -> tuple[list[int], list[int]]:
    if not char_ends:
        return list(tokenizer.encode(text, add_special_tokens=False)), []
    if not getattr(tokenizer, "is_fast", False):  # no offsets: tokenize each prefix
        ids = list(tokenizer.encode(text, add_special_tokens=False))
        return ids, [
            _common_len(ids, tokenizer.encode(text[:c], add_special_tokens=False))
            for c in char_ends
        ]
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = enc["offset_mapping"]
    offsets, n = [], 0
    for c in char_ends:
        while n < len(spans) and spans[n][1] <= c:
            n += 1
        offsets.append(n)
    return list(enc["input_ids"]), offsets


class _Marks:
    """Unique strings put after each marked block before templating and cut out after it: where
    each one was is where its block ends in the prompt, whatever the template adds around."""

    def __init__(self) -> None:
        self.nonce = uuid.uuid4().hex
        self.ttls: list[str] = []

    def after(self, text: str, control: CacheControl | None) -> str:
        if control is None:
            return text
        self.ttls.append(control.ttl)
        return f"{text}\x00{self.nonce}:{len(self.ttls) - 1}\x00"

    def cut(self, rendered: str) -> tuple[str, list[int]]:
        """The text without the marks, and the position of each (in order)."""
        parts: list[str] = []
        ends: list[int] = []
        last = length = 0
        for m in re.finditer(f"\x00{self.nonce}:(\\d+)\x00", rendered):
            if int(m.group(1)) != len(ends):
                break
            parts.append(rendered[last : m.start()])
            length += m.start() - last
            ends.append(length)
            last = m.end()
        if len(ends) != len(self.ttls):
            raise BadRequestError(
                "cache_control cannot be placed: this model's chat template drops, repeats or "
                "reorders message content"
            )
        parts.append(rendered[last:])
        return "".join(parts), ends


THINKING_BLOCKS = ("thinking", "redacted_thinking")


def _block_text(block: ContentBlock, where: str, fmt: CallFormat) -> str:
    """A block as text: text as is, tool_use as the model writes a call, tool_result as the
    format's result text."""
    if block.type == "text":
        if block.text is None:
            raise BadRequestError(f"{where}.text: Field required")
        return block.text
    if where == "system":
        raise BadRequestError(f"system: blocks must be of type 'text', not {block.type!r}")
    if block.type == "tool_use":
        if block.id is None or block.name is None:
            raise BadRequestError(f"{where}: a tool_use block needs id and name")
        return fmt.call_text([ToolCall(block.id, block.name, compact_json(block.input or {}))])
    if block.type == "tool_result":
        if block.tool_use_id is None:
            raise BadRequestError(f"{where}.tool_use_id: Field required")
        inner = block.content if block.content is not None else ""
        parts = []
        for k, b in enumerate(content_blocks(inner)):
            if b.cache_control is not None:
                raise BadRequestError(f"{where}.content.{k}: mark the tool_result, not its blocks")
            if b.type != "text":
                raise BadRequestError(f"{where}.content.{k}: only text is supported in tool_result")
            parts.append(_block_text(b, f"{where}.content.{k}", fmt))
        body = SEP.join(parts)
        return fmt.results_text([f"Error: {body}" if block.is_error else body])
    raise BadRequestError(f"{where}: content blocks of type {block.type!r} are not supported")


def _common_len(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
