"""OpenAI's answers from typed output deltas: a completion or chat completion (choice i is
prompt i // n, sample i % n), or its chunks as server-sent events, with logprobs in the chat
or text shape and the usage block."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from radixrt.core.messages import TopLogprobs
from radixrt.serve.http.api.openai.diagnostics import render_cache_diagnostics
from radixrt.serve.http.api.openai.prompt_options import LogprobAsk
from radixrt.serve.http.api.openai.tools import call_items
from radixrt.serve.http.render import BaseRender, Finished
from radixrt.serve.http.req_state import ReqState
from radixrt.serve.http.tools import (
    ArgsPiece,
    CallStart,
    OutputParser,
    ReasoningPiece,
    TextPiece,
    ToolEvent,
    ToolPlan,
    count_reasoning_tokens,
    read_output,
)
from radixrt.serve.results.delta import OutputDelta
from radixrt.serve.web.responses import SSE_DONE, error_body, sse_event


class TokenStrings:
    """Each token id's own text, decoded once and kept (the vocabulary is fixed)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.get = lru_cache(maxsize=65536)(self._decode)

    def _decode(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])  # type: ignore[no-any-return]


class CompletionRender(BaseRender):
    """One call of /v1/completions (`is_chat` False) or /v1/chat/completions."""

    def __init__(
        self,
        strings: TokenStrings,
        model: str,
        is_chat: bool,
        n: int,
        include_usage: bool,
        plan: ToolPlan | None = None,
        echo: list[str] | None = None,
        ask: LogprobAsk | None = None,
    ) -> None:
        self.strings = strings
        self.ask = ask or LogprobAsk()  # which logprobs the call shows
        self.echo = echo  # completions' echo: each prompt's text, before its choices' text
        self.plan = plan if plan is not None and plan.parses_output else None
        self._parsers: dict[int, OutputParser] = {}  # chat choice -> its calls so far
        self.is_chat = is_chat
        self.n = n  # samples per prompt
        self.include_usage = include_usage  # a stream's last chunk holds the usage
        self._head = {
            "id": f"{'chatcmpl' if is_chat else 'cmpl'}-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk" if is_chat else "text_completion",
            "created": int(time.time()),
            "model": model,
        }
        self._offsets: dict[int, int] = {}  # text logprobs: characters of the tokens sent

    @property
    def response_id(self) -> str:
        return str(self._head["id"])

    def response(self, done: Finished) -> dict[str, Any]:
        choices = []
        for i, delta in enumerate(done.outputs):
            choice = self._choice(i, done.states[i], delta)
            text = choice.pop("delta")
            if self.is_chat and self.plan is not None:
                reasoning, content, calls = read_output(self.plan, text)
                choice["message"] = {"role": "assistant", "content": content or None}
                if self.plan.reasoning is not None:  # vLLM's and SGLang's field, and its new name
                    choice["message"].update(reasoning_content=reasoning or None,
                                             reasoning=reasoning or None)  # fmt: skip
                if calls:
                    choice["message"]["tool_calls"] = call_items(calls)
                    choice["finish_reason"] = _with_calls(choice["finish_reason"])
            elif self.is_chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = self._echoed(i) + text
            if self.ask.prompt is not None and not self.is_chat:  # vLLM's: per choice
                choice["prompt_logprobs"] = self._prompt_logprobs(done.states[i])
            choices.append(choice)
        usage = usage_of(done.states, self.n)
        if done.explained is not None:  # one per distinct prompt, in order
            found = list(done.explained.values())
            usage.setdefault("prompt_tokens_details", {})["cache_explanation"] = (
                found[0] if len(found) == 1 else found
            )
        kind = "chat.completion" if self.is_chat else "text_completion"
        body = {**self._head, "object": kind, "created": int(time.time()),
                "choices": choices, "usage": usage, **self._diagnostics()}  # fmt: skip
        if self.ask.prompt is not None and self.is_chat:  # vLLM's: one prompt, on the response
            body["prompt_logprobs"] = self._prompt_logprobs(done.states[0])
        return body

    def head(self, states: list[ReqState]) -> Iterator[bytes]:
        if self.echo is not None:  # completions: each choice opens with its prompt
            for i in range(len(states)):
                first = {"index": i, "text": self._echoed(i), "logprobs": None,
                         "finish_reason": None}  # fmt: skip
                yield sse_event({**self._head, "choices": [first]})
        if self.is_chat:
            for i in range(len(states)):
                first = {"index": i, "delta": {"role": "assistant", "content": ""},
                         "logprobs": None, "finish_reason": None}  # fmt: skip
                yield sse_event({**self._head, "choices": [first], **self._diagnostics()})

    def delta(self, index: int, state: ReqState, delta: OutputDelta) -> Iterator[bytes]:
        choice = self._choice(index, state, delta)
        if self.is_chat and self.plan is not None:
            parser = self._parsers.setdefault(index, self.plan.new_parser())
            events = parser.feed(choice["delta"])
            if delta.is_last:
                events += parser.finish()
                if parser.calls:
                    choice["finish_reason"] = _with_calls(choice["finish_reason"])
            choice["delta"] = chunk_delta(events)
        elif self.is_chat:
            choice["delta"] = {"content": choice["delta"]}
        else:
            choice["text"] = choice.pop("delta")
        yield sse_event({**self._head, "choices": [choice]})

    def tail(self, states: list[ReqState]) -> Iterator[bytes]:
        if self.include_usage:
            yield sse_event({**self._head, "choices": [], "usage": usage_of(states, self.n)})

    def error(self, message: str, status: int) -> bytes:
        return sse_event(error_body(message, status))

    def close(self) -> tuple[bytes, ...]:
        return (SSE_DONE,)

    def _diagnostics(self) -> dict[str, Any]:
        """`prompt_cache_diagnostics` when asked: on the chat completion, or on a stream's
        first chunks (known before any output)."""
        if self.diagnosis is None:
            return {}
        return {"prompt_cache_diagnostics": render_cache_diagnostics(self.diagnosis)}

    def _choice(self, index: int, state: ReqState, delta: OutputDelta) -> dict[str, Any]:
        """A choice with the delta's text (as `delta`) and its tokens' logprobs."""
        reason = delta.finish_reason
        choice: dict[str, Any] = {
            "index": index,
            "delta": delta.text,
            "logprobs": None,
            "finish_reason": None if reason is None else reason.kind.value,
        }
        if self.ask.output is not None:
            if self.is_chat:
                choice["logprobs"] = self._chat_logprobs(delta)
            else:
                choice["logprobs"] = self._text_logprobs(index, state, delta)
        return choice

    def _chat_logprobs(self, delta: OutputDelta) -> dict[str, Any]:
        k = self.ask.output or 0
        tops = delta.top_logprobs or [[] for _ in delta.token_ids]
        content = []
        for t, lp, top in zip(delta.token_ids, delta.logprobs, tops, strict=False):
            entry = self._token_entry(lp, t)
            entry["top_logprobs"] = [self._token_entry(tlp, tt) for tlp, tt in top[:k]]
            content.append(entry)
        return {"content": content, "refusal": None}

    def _echoed(self, index: int) -> str:
        """Choice `index`'s prompt text when echoing, else ""."""
        return "" if self.echo is None else self.echo[index // self.n]

    def _text_logprobs(self, index: int, state: ReqState, delta: OutputDelta) -> dict[str, Any]:
        """The delta's tokens, offsets counted on from the characters of those sent before;
        echoing (a whole answer), the prompt's tokens first: the first without a logprob,
        the rest with those the model gave them (and their top alternatives)."""
        ids = list(delta.token_ids)
        logprobs: list[float | None] = list(delta.logprobs)
        tops: list[TopLogprobs | None] = list(delta.top_logprobs)
        out = state.out
        if self.echo is not None and delta.start == 0:
            ids = out.input_ids + ids
            logprobs = list(out.input_logprobs) + logprobs
            tops = list(out.input_top_logprobs) + tops
        tokens = [self.strings.get(t) for t in ids]
        offsets = []
        offset = self._offsets.get(index, 0)
        for tok in tokens:  # offsets in the text, whatever names the tokens are given
            offsets.append(offset)
            offset += len(tok)
        if self.ask.as_ids:
            tokens = [self._name(t) for t in ids]
        self._offsets[index] = offset
        k = self.ask.output or 0
        return {
            "tokens": tokens,
            "token_logprobs": logprobs,
            "top_logprobs": [
                None if top is None else {self._name(t): lp for lp, t in top[:k]} for top in tops
            ]
            if k > 0
            else None,
            "text_offset": offsets,
        }

    def _prompt_logprobs(self, state: ReqState) -> list[dict[str, Any] | None]:
        """vLLM's prompt_logprobs: per prompt token None (the first) or {"<id>": {logprob,
        rank, decoded_token}} for the token itself, then its `ask.prompt` likeliest
        alternatives (ranked 1, 2, ...)."""
        out, k = state.out, self.ask.prompt or 0
        entries: list[dict[str, Any] | None] = []
        for token, lp, top, rank in zip(out.input_ids, out.input_logprobs,
                                        out.input_top_logprobs, out.input_token_ranks):  # fmt: skip
            if lp is None:
                entries.append(None)
                continue
            entry = {str(token): {"logprob": lp, "rank": rank, "decoded_token": self._name(token)}}
            for j, (alt_lp, alt) in enumerate((top or [])[:k]):
                entry.setdefault(
                    str(alt), {"logprob": alt_lp, "rank": j + 1, "decoded_token": self._name(alt)}
                )
            entries.append(entry)
        return entries

    def _token_entry(self, logprob: float, token_id: int) -> dict[str, Any]:
        s = self.strings.get(token_id)
        return {"token": self._name(token_id), "logprob": logprob, "bytes": list(s.encode())}

    def _name(self, token_id: int) -> str:
        """A token as logprobs name it: its text, or "token_id:<id>" with ids_as_tokens."""
        return f"token_id:{token_id}" if self.ask.as_ids else self.strings.get(token_id)


def chunk_delta(events: list[ToolEvent]) -> dict[str, Any]:
    """A chat chunk's `delta` from the parser's events: reasoning as `reasoning_content` (and
    `reasoning`), the text as content, each call's start (id, name) and its argument pieces
    in `tool_calls` (one entry per piece)."""
    out: dict[str, Any] = {}
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningPiece))
    if reasoning:
        out.update(reasoning_content=reasoning, reasoning=reasoning)
    text = "".join(e.text for e in events if isinstance(e, TextPiece))
    if text or not events:
        out["content"] = text
    calls: list[dict[str, Any]] = []
    for e in events:
        if isinstance(e, CallStart):
            fn = {"name": e.name, "arguments": ""}
            calls.append({"index": e.index, "id": e.id, "type": "function", "function": fn})
        elif isinstance(e, ArgsPiece):
            if calls and calls[-1]["index"] == e.index:  # the same call: one entry
                calls[-1]["function"]["arguments"] += e.text
            else:
                calls.append({"index": e.index, "function": {"arguments": e.text}})
    if calls:
        out["tool_calls"] = calls
    return out


def _with_calls(reason: str | None) -> str | None:
    """A stop after calls is `tool_calls`; a cut at max_tokens stays `length`."""
    return "tool_calls" if reason == "stop" else reason


def usage_of(states: list[ReqState], n: int) -> dict[str, Any]:
    """Prompt tokens count once per prompt (its first sample), completions once per sample."""
    firsts = states[::n]
    prompt = sum(s.out.prompt_len for s in firsts)
    completion = sum(len(s.out.output_ids) for s in states)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(s.out.cached_tokens for s in firsts)},
    }
    details: dict[str, int] = {}
    if states and states[0].out.sampling_params.prediction_ids:
        # Predicted output: its drafted tokens the model kept, and those it did not (each
        # computed once in a verifying pass; neither is billed apart here).
        accepted = sum(s.out.prediction_accepted for s in states)
        rejected = sum(s.out.prediction_drafted - s.out.prediction_accepted for s in states)
        details.update(accepted_prediction_tokens=accepted, rejected_prediction_tokens=rejected)
    thought = [count_reasoning_tokens(s.out.sampling_params, s.out.output_ids) for s in states]
    if states and None not in thought:  # (a reasoning model's whose tags are tokens)
        details["reasoning_tokens"] = sum(t or 0 for t in thought)
    if details:
        usage["completion_tokens_details"] = details
    return usage
