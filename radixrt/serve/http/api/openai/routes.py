"""OpenAI-compatible endpoints: /v1/completions, /v1/chat/completions (JSON or SSE deltas)
and /v1/models, in the shapes the official `openai` client parses."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.api.openai.diagnostics import chat_fingerprint, comparison_of
from radixrt.serve.http.api.openai.messages import chat_messages_of
from radixrt.serve.http.api.openai.prompt_options import echo_prompts
from radixrt.serve.http.api.openai.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    completion_prompts,
    logprob_ask,
    prepare_chat,
    prepare_completion,
    retention_pins,
)
from radixrt.serve.http.api.openai.render import CompletionRender, TokenStrings
from radixrt.serve.http.api.openai.tools import tool_plan
from radixrt.serve.http.cache_handles import owner_of
from radixrt.serve.http.diagnostics import Fingerprint, PromptRecord
from radixrt.serve.http.protocol import Limits, PreparedRequest, decode_body
from radixrt.serve.http.serving import ServeRequest
from radixrt.serve.http.tools import CallFormat, ToolPlan
from radixrt.serve.web.middleware import caller_of, identity_of
from radixrt.serve.web.responses import error_response, json_response

BODIES = {"/v1/completions": CompletionRequest, "/v1/chat/completions": ChatCompletionRequest}


def add_routes(app: FastAPI, ctx: ApiContext) -> None:
    tm, created = ctx.tm, int(time.time())
    strings = TokenStrings(ctx.tokenizer)

    # The served model in OpenAI's shape and Anthropic's (type, display_name, created_at: its
    # SDK reads these from the same paths); each client takes its own fields.
    card = {"id": ctx.model_name, "object": "model", "created": created, "owned_by": "radixrt",
            "max_model_len": ctx.limits.context_length, "type": "model",
            "display_name": ctx.model_name,
            "created_at": datetime.fromtimestamp(created, timezone.utc).isoformat()}  # fmt: skip

    @app.get("/v1/models")
    async def models() -> Response:
        return json_response({"object": "list", "data": [card], "has_more": False,
                              "first_id": ctx.model_name, "last_id": ctx.model_name})  # fmt: skip

    @app.get("/v1/models/{model:path}")  # (served names such as org/name have a slash)
    async def model(model: str) -> Response:
        if model != ctx.model_name:
            return error_response(
                f"the model {model!r} does not exist; this server serves {ctx.model_name!r}", 404
            )
        return json_response(card)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await serve(request, False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await serve(request, True)

    async def serve(request: Request, is_chat: bool) -> Response:
        raw = await request.body()
        owner = owner_of(request)
        body, prepared, plan, fp, echo = await tm.run_tokenizer(
            _parse,
            raw,
            is_chat,
            tm.tokenizer,
            ctx.limits,
            ctx.tool_format,
            ctx.args.server.reasoning_parser,
            lambda text: ctx.pipeline.continuations.encode(owner, text, tm.tokenizer),
            caller=caller_of(request),
        )
        usage = body.stream_options is not None and body.stream_options.include_usage
        render = CompletionRender(strings, ctx.model_name, is_chat, body.n, usage, plan, echo,
                                  logprob_ask(body))  # fmt: skip
        record = None
        if fp is not None:  # a chat: kept, and compared when it asks
            compare_to = comparison_of(body)
            record = PromptRecord(render.response_id, fp, compare_to is not None, compare_to)
        pins = retention_pins(
            body.prompt_cache_retention,
            prepared.prompts,
            ctx.args.server.cache_ttl_scale,
            identity_of(request).tenant,
        )
        req = ServeRequest(
            prepared.prompts,
            prepared.params,
            stream=body.stream,
            rids=prepared.rids,
            cache_salt=body.cache_salt,
            pins=pins or [],
            session=body.prompt_cache_key or body.user,
            explain=body.explain_cache,
            messages=chat_messages_of(body.messages) if is_chat else None,
            record=record,
            prompt_text=prepared.text,
        )
        return await ctx.pipeline.serve(request, req, render)


def _parse(
    raw: bytes,
    is_chat: bool,
    tokenizer: Any,
    limits: Limits,
    fmt: CallFormat,
    reasoning: str,
    encode: Callable[[str], list[int]],
) -> tuple[Any, PreparedRequest, ToolPlan | None, Fingerprint | None, list[str] | None]:
    """Decode, template and tokenize a body (on the tokenizer thread); a chat's prompt
    fingerprint too, a completion's echoed prompt texts. A chat is tokenized by `encode`:
    the ids of an earlier answered turn it replays, then the tokenizer's."""
    if is_chat:
        chat = decode_body(raw, ChatCompletionRequest)
        plan = tool_plan(fmt, chat.tools, chat.tool_choice, chat.parallel_tool_calls)
        prepared, plan = prepare_chat(chat, tokenizer, limits, plan, encode, reasoning)
        return chat, prepared, plan, chat_fingerprint(chat, prepared.prompts[0]), None
    body = decode_body(raw, CompletionRequest)
    whole = completion_prompts(body, tokenizer, limits)
    prepared = prepare_completion(body, whole, tokenizer, limits)
    return body, prepared, None, None, echo_prompts(body, whole, prepared.prompts, tokenizer)
