"""`POST /v1/cache/explain`: why a prompt would miss the prefix cache, in the caller's own
namespace: how much is cached, where the prompt leaves the nearest cached prefix (with the
text on both sides), and the cause (radixrt/cache/explain.py). Nothing of another tenant's
namespaces is looked at. The same explanation, per request, with `"explain_cache": true` on
/generate (`meta_info.cache_explanation`) and the OpenAI endpoints
(`usage.prompt_tokens_details.cache_explanation`), without streaming."""

from __future__ import annotations

from typing import Any

import msgspec
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.server.generate_protocol import GenerateRequest, prepare_generate
from radixrt.server.openai_protocol import ChatCompletionRequest, ChatMessage, prepare_chat
from radixrt.server.protocol import (
    BadRequestError,
    Limits,
    decode_body,
)
from radixrt.server.tenancy import Tenancy
from radixrt.web.middleware import identity_of
from radixrt.web.responses import json_response

CONTEXT_CHARS = 40  # decoded characters shown on each side of the divergence
CONTEXT_TOKENS = 32  # tokens decoded for them (more than 40 characters' worth)


class ExplainRequest(msgspec.Struct, forbid_unknown_fields=True):
    """One prompt, as /generate (`text` or `input_ids`) or /v1/chat/completions (`messages`,
    rendered with the server's chat template) would send it."""

    text: str | None = None
    input_ids: list[Any] | None = None
    messages: list[ChatMessage] | None = None
    cache_salt: str | None = None


def add_cache_routes(app: FastAPI, tm: Any, limits: Limits, tenancy: Tenancy) -> None:
    @app.post("/v1/cache/explain")
    async def explain(request: Request) -> Response:
        body = decode_body(await request.body(), ExplainRequest)
        ids = await tm.run_tokenizer(_prompt_ids, body, tm.tokenizer, limits)
        namespace = tenancy.namespace(request, body.cache_salt, None)
        own = identity_of(request).own_prefix(tenancy.shared_prefix_cache)
        reply = await tm.explain_cache(ids, namespace, own)
        return json_response(render_explanation(reply, ids, tm.tokenizer))


def _prompt_ids(body: ExplainRequest, tokenizer: Any, limits: Limits) -> list[int]:
    given = [x is not None for x in (body.text, body.input_ids, body.messages)]
    if sum(given) != 1:
        raise BadRequestError("give exactly one of text, input_ids and messages")
    if body.messages is not None:
        chat = ChatCompletionRequest(model="", messages=body.messages)
        return prepare_chat(chat, tokenizer, limits).prompts[0]
    gen = GenerateRequest(text=body.text, input_ids=body.input_ids)
    prepared = prepare_generate(gen, tokenizer, limits)
    if len(prepared.prompts) != 1:
        raise BadRequestError("explain takes one prompt")
    return prepared.prompts[0]


async def explain_prompts(
    tm: Any, tenancy: Tenancy, request: Request, prompts: list[list[int]], namespace: Any
) -> dict[tuple[int, ...], dict[str, Any]]:
    """The explanation of each distinct prompt, as the cache stands before they run (the
    per-request opt-in `explain_cache`), keyed by its token ids."""
    own = identity_of(request).own_prefix(tenancy.shared_prefix_cache)
    out: dict[tuple[int, ...], dict[str, Any]] = {}
    for ids in prompts:
        key = tuple(ids)
        if key not in out:
            out[key] = render_explanation(
                await tm.explain_cache(ids, namespace, own), ids, tm.tokenizer
            )
    return out


def render_explanation(
    reply: Any, ids: list[int], tokenizer: Any, ids_start: int = 0
) -> dict[str, Any]:
    """The reply (ExplainReplyMsg or MissMsg) with its sides decoded (windows of CONTEXT_TOKENS
    tokens, so a long prompt costs no more than a short one); `ids` are the prompt's from
    offset `ids_start` on, and hold at least the window around the divergence."""
    out: dict[str, Any] = {
        "cause": reply.cause,
        "prompt_tokens": reply.prompt_tokens,
        "cached_tokens": reply.matched_tokens,
        "divergence": reply.divergence,
    }
    if reply.divergence is not None:
        at = reply.divergence
        i = at - ids_start
        before = tokenizer.decode(ids[max(0, i - CONTEXT_TOKENS) : i])[-CONTEXT_CHARS:]
        after = tokenizer.decode(ids[i : i + CONTEXT_TOKENS])[:CONTEXT_CHARS]
        out["prompt_side"] = {"before": before, "after": after}
        if reply.cached_next:
            # cached_next starts where the match ends; the divergence may be a few tokens on.
            cached_after = list(reply.cached_next)[at - reply.matched_tokens :]
            out["cached_side"] = {
                "before": before,
                "after": tokenizer.decode(cached_after)[:CONTEXT_CHARS],
            }
    if reply.evicted_at is not None:
        out["evicted_at"] = reply.evicted_at
    if reply.other_namespace_tokens:
        out["other_namespace_tokens"] = reply.other_namespace_tokens
    return out
