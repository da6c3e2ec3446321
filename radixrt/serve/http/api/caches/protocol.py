"""The native cache bodies: a handle to make (`POST /v1/caches`: one prefix as text, token ids
or chat messages, rendered with no generation prompt so a later turn continues it) or update,
and a prompt to explain (`POST /v1/cache/explain`, as /generate or a chat would send it)."""

from __future__ import annotations

from typing import Any

import msgspec

from radixrt.core import SamplingParams
from radixrt.serve.http.api.native.protocol import GenerateRequest, prepare_generate
from radixrt.serve.http.api.openai.messages import ChatMessage, chat_messages_of
from radixrt.serve.http.api.openai.protocol import ChatCompletionRequest, prepare_chat
from radixrt.serve.http.protocol import (
    BadRequestError,
    Limits,
    check_token_ids,
    fit_to_context,
    render_chat,
)
from radixrt.serve.http.tools import ToolPlan, format_for

DEFAULT_TTL_S = 3600.0


class CreateCacheRequest(msgspec.Struct, forbid_unknown_fields=True):
    """One prefix, as /generate (`text`, `input_ids`) or a chat (`messages`, rendered with the
    server's chat template and no generation prompt, so a later turn continues it)."""

    text: str | None = None
    input_ids: list[Any] | None = None
    messages: list[ChatMessage] | None = None
    ttl: float = DEFAULT_TTL_S  # seconds
    name: str | None = None
    cache_salt: str | None = None


class UpdateCacheRequest(msgspec.Struct, forbid_unknown_fields=True):
    ttl: float | None = None  # seconds from now
    expire_time: float | None = None  # unix seconds


class ExplainRequest(msgspec.Struct, forbid_unknown_fields=True):
    """One prompt, as /generate (`text` or `input_ids`) or /v1/chat/completions (`messages`,
    rendered with the server's chat template) would send it."""

    text: str | None = None
    input_ids: list[Any] | None = None
    messages: list[ChatMessage] | None = None
    cache_salt: str | None = None


def prefix_ids(body: CreateCacheRequest, tokenizer: Any, limits: Limits) -> list[int]:
    """The tokens of the prefix a handle is made of (on the tokenizer thread)."""
    given = [x is not None for x in (body.text, body.input_ids, body.messages)]
    if sum(given) != 1:
        raise BadRequestError("give exactly one of text, input_ids and messages")
    if body.text is not None:
        limits.check_text(body.text)
        ids = tokenizer.encode(body.text)
    elif body.input_ids is not None:
        ids = check_token_ids(body.input_ids, "input_ids")
    else:
        assert body.messages is not None
        ids = render_chat_prefix(chat_messages_of(body.messages), tokenizer, limits)
    fit_to_context(ids, SamplingParams(max_new_tokens=0), limits, True)
    return ids


def render_chat_prefix(messages: list[dict[str, Any]], tokenizer: Any, limits: Limits) -> list[int]:
    """A conversation's tokens with no generation prompt (a later turn extends them)."""
    text = render_chat(messages, tokenizer, limits, add_generation_prompt=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


def explain_ids(body: ExplainRequest, tokenizer: Any, limits: Limits) -> list[int]:
    """The tokens of the prompt to explain, as its endpoint would make them."""
    given = [x is not None for x in (body.text, body.input_ids, body.messages)]
    if sum(given) != 1:
        raise BadRequestError("give exactly one of text, input_ids and messages")
    if body.messages is not None:
        chat = ChatCompletionRequest(model="", messages=body.messages)
        plan = ToolPlan(format_for("auto", tokenizer))  # no tools: the chat route's prompt
        return prepare_chat(chat, tokenizer, limits, plan)[0].prompts[0]
    gen = GenerateRequest(text=body.text, input_ids=body.input_ids)
    prepared = prepare_generate(gen, tokenizer, limits)
    if len(prepared.prompts) != 1:
        raise BadRequestError("explain takes one prompt")
    return prepared.prompts[0]
