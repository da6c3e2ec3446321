"""A Responses turn's prompt: the stored conversation it continues (previous_response_id), its
instructions, input and tools, rendered through the shared tool layer; and, where the text
starts with the previous turn's prompt and output, that turn's token ids as they are, so the
radix tree serves the whole earlier conversation."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from radixrt.core import PinSpec, SamplingParams
from radixrt.serve.http.api.openai.protocol import retention_pins
from radixrt.serve.http.api.responses.input_items import input_messages
from radixrt.serve.http.api.responses.protocol import (
    DEFAULT_TTL,
    TTL_S,
    ResponsesRequest,
    sampling_dict,
)
from radixrt.serve.http.api.responses.tools import tool_plan
from radixrt.serve.http.protocol import BadRequestError, Limits, fit_to_context, to_sampling_params
from radixrt.serve.http.tools import CallFormat, ToolCall, ToolPlan, render_tool_chat
from radixrt.serve.http.tools.prompt import text_messages

Messages = list[dict[str, Any]]  # turns as server/tools/prompt.py takes them


@dataclass(frozen=True, slots=True)
class Conversation:
    """What a stored response keeps for the next turn: its messages without instructions
    (input items, then the answer with its tool calls), and the prompt text with the ids it
    was sent as, plus the output ids (prompt + output: the tokens the radix tree holds)."""

    messages: Messages
    prompt_text: str
    prompt_ids: list[int]
    output_ids: list[int]
    num_inputs: int = -1  # messages[:num_inputs] were the turn's input (-1: all of them)

    @property
    def inputs(self) -> Messages:
        """The messages the turn was given: earlier turns' and its own input."""
        return self.messages if self.num_inputs < 0 else self.messages[: self.num_inputs]

    @property
    def nbytes(self) -> int:
        """About what it holds in memory, for the store's bound."""
        text = sum(len(m["content"]) + len(m["role"]) + _calls_size(m) for m in self.messages)
        return text + len(self.prompt_text) + 8 * (len(self.prompt_ids) + len(self.output_ids))

    def prefixes(self, tokenizer: Any) -> Iterator[tuple[str, list[int]]]:
        """(text, ids) the next prompt may start with, longest first: prompt and output, the
        same without the last output token (a stop token the template spells another way),
        the prompt alone."""
        out = self.output_ids
        for n in (len(out), len(out) - 1):
            if n > 0:
                text = tokenizer.decode(out[:n], skip_special_tokens=False)
                yield self.prompt_text + text, self.prompt_ids + out[:n]
        yield self.prompt_text, self.prompt_ids


@dataclass(frozen=True, slots=True)
class Prompt:
    """One turn's prompt. `messages`: the conversation without instructions (what is stored
    with the answer); `chat`: what was rendered, as text turns (tools, calls and results
    written in the call format), for the prompt guard; `plan`: the turn's tools; `reused`:
    leading ids taken from the previous turn as they were sent (0: tokenized afresh)."""

    messages: Messages
    chat: list[dict[str, str]]
    text: str
    ids: list[int]
    params: SamplingParams
    plan: ToolPlan
    reused: int = 0

    def conversation(
        self, output_ids: list[int], answer: str | None, calls: list[ToolCall]
    ) -> Conversation:
        """This turn kept for the next: the answer and its calls join the messages (None: no
        output)."""
        messages = self.messages
        if answer is not None:
            said: dict[str, Any] = {"role": "assistant", "content": answer}
            if calls:
                said["tool_calls"] = list(calls)
            messages = [*messages, said]
        return Conversation(messages, self.text, self.ids, list(output_ids), len(self.messages))


def build_prompt(
    req: ResponsesRequest,
    previous: Conversation | None,
    tokenizer: Any,
    limits: Limits,
    fmt: CallFormat,
    reasoning: str = "none",
) -> Prompt:
    """Render and tokenize a turn with its tools in `fmt` (on the tokenizer thread), its
    output's reasoning read as the parser `reasoning` does where it may; 400 for bad tools, a
    tool output of no call, or a prompt that does not fit."""
    plan = tool_plan(req, fmt)
    messages = name_results([*(previous.messages if previous else ()), *input_messages(req.input)])
    system = [{"role": "system", "content": req.instructions}] if req.instructions else []
    chat = [*system, *messages]
    text = render_tool_chat(chat, plan, tokenizer, limits)
    ids, reused = None, 0
    if previous is not None:
        for prefix_text, prefix_ids in previous.prefixes(tokenizer):
            if text.startswith(prefix_text):
                rest = tokenizer.encode(text[len(prefix_text) :], add_special_tokens=False)
                ids, reused = prefix_ids + rest, len(prefix_ids)
                break
    if ids is None:
        ids = tokenizer.encode(text, add_special_tokens=False)
    d = sampling_dict(req)
    budget = None if req.reasoning is None else req.reasoning.budget
    # (d: the request's grammar, which the reasoning gate holds back until </think>)
    plan = plan.with_reasoning(
        reasoning, text, d, tokenizer, budget=budget, asked_by="reasoning.effort"
    )
    d.update(plan.sampling_dict(tokenizer, d))
    sp = to_sampling_params(d)
    explicit = "max_new_tokens" in d
    if not explicit:
        sp = sp.replace(max_new_tokens=limits.context_length)  # until EOS; clamped below
    params = fit_to_context(ids, sp, limits, explicit)
    return Prompt(messages, text_messages(chat, plan), text, ids, params, plan, reused)


def name_results(messages: Messages) -> Messages:
    """`messages` with each tool result named after its call (templates show the name);
    400 for a result whose call_id no earlier call has."""
    names: dict[str, str] = {}
    out = []
    for m in messages:
        for call in m.get("tool_calls") or ():
            names[call.id] = call.name
        if m["role"] == "tool":
            call_id = m["tool_call_id"]
            if call_id not in names:
                raise BadRequestError(
                    f"input: no function_call with call_id {call_id!r} for its "
                    "function_call_output (in the input or the previous response)"
                )
            m = {**m, "name": names[call_id]}
        out.append(m)
    return out


def _calls_size(m: dict[str, Any]) -> int:
    return sum(len(c.id) + len(c.name) + len(c.arguments) for c in m.get("tool_calls") or ())


def plan_pins(
    req: ResponsesRequest, prompt: Prompt, pin_id: str | None, ttl_scale: float, owner: str | None
) -> list[tuple[PinSpec, str | None]]:
    """The pins a turn asks for, each with its TTL's name (None: prompt_cache_retention's):
    a stored response's own pin of its prompt (`pin_id`), or without `store` the prompt's
    shared pin when a ttl or a prewarm asks; plus prompt_cache_retention's, as on chat. All
    sliding, counted against `owner` (the tenant). `ttl_scale`: --cache-ttl-scale."""
    planned: list[tuple[PinSpec, str | None]] = []
    name = req.ttl or DEFAULT_TTL
    if pin_id is not None or req.ttl is not None or req.is_prewarm:
        spec = PinSpec(len(prompt.ids), TTL_S[name] * ttl_scale, pin_id, sliding=True, owner=owner)
        planned.append((spec, name))
    for spec in retention_pins(req.prompt_cache_retention, [prompt.ids], ttl_scale, owner) or ():
        planned.append((spec, None))
    return planned
