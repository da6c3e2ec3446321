"""OpenAI-compatible endpoints: /v1/completions, /v1/chat/completions (JSON or SSE deltas)
and /v1/models, in the shapes the official `openai` client parses."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.server.cache_api import explain_prompts
from radixrt.server.grammar_check import GrammarChecker
from radixrt.server.http_common import (
    ClientGoneError,
    request_events,
    updates,
    wait_finished,
)
from radixrt.server.openai_protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    chat_messages,
    prepare_chat,
    prepare_completion,
    retention_pins,
)
from radixrt.server.openai_render import ChoiceRenderer, usage_of
from radixrt.server.prompt_guard import PromptGuard, Turn
from radixrt.server.protocol import Limits, PreparedRequest, decode_body
from radixrt.server.tenancy import Tenancy, work_of
from radixrt.server.tokenizer_manager import ReqState, TokenizerManager
from radixrt.web.middleware import SESSION_HEADER, caller_of, identity_of
from radixrt.web.responses import (
    json_response,
    sse_event,
    sse_response,
)


class OpenAIServing:
    """Handlers for the OpenAI routes; choice i is prompt i // n, sample i % n."""

    def __init__(
        self,
        tm: TokenizerManager,
        limits: Limits,
        model_name: str,
        grammar: GrammarChecker,
        tenancy: Tenancy,
    ) -> None:
        self.tm = tm
        self.grammar = grammar
        self.tenancy = tenancy
        self.guard = PromptGuard(tm.tokenizer, tm.metrics)
        self.limits = limits
        self.model_name = model_name
        self.created = int(time.time())
        self.render = ChoiceRenderer(tm.tokenizer)

    def add_routes(self, app: FastAPI) -> None:
        app.post("/v1/completions")(self.completions)
        app.post("/v1/chat/completions")(self.chat_completions)
        app.get("/v1/models")(self.models)

    async def models(self) -> Response:
        return json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "radixrt",
                        "max_model_len": self.limits.context_length,
                    }
                ],
            }
        )

    async def completions(self, request: Request) -> Response:
        body, prepared = await self.tm.run_tokenizer(self._parse, await request.body(), False)
        return await self._serve(request, body, prepared, is_chat=False)

    async def chat_completions(self, request: Request) -> Response:
        body, prepared = await self.tm.run_tokenizer(self._parse, await request.body(), True)
        return await self._serve(request, body, prepared, is_chat=True)

    def _parse(self, raw: bytes, is_chat: bool) -> tuple[Any, PreparedRequest]:
        """Decode, template and tokenize a body (on the tokenizer thread)."""
        if is_chat:
            chat = decode_body(raw, ChatCompletionRequest)
            return chat, prepare_chat(chat, self.tm.tokenizer, self.limits)
        body = decode_body(raw, CompletionRequest)
        return body, prepare_completion(body, self.tm.tokenizer, self.limits)

    # ---- serving ---------------------------------------------------------------------------

    async def _serve(
        self, request: Request, body: Any, prepared: PreparedRequest, is_chat: bool
    ) -> Response:
        namespace = self.tenancy.namespace(request, body.cache_salt, None)
        pins = retention_pins(
            body.prompt_cache_retention,
            prepared.prompts,
            self.tm.config.cache_ttl_scale,
            identity_of(request).tenant,
        )
        await self.grammar.check(prepared.params)
        self.tenancy.admit(self.tm, request, *work_of(prepared.prompts, prepared.params))
        explained = None
        if body.explain_cache and not body.stream:
            explained = await explain_prompts(
                self.tm, self.tenancy, request, prepared.prompts, namespace
            )
        session = request.headers.get(SESSION_HEADER) or body.prompt_cache_key or body.user
        turn: Turn | None = None  # a chat turn the prompt guard follows
        if is_chat and session and len(prepared.prompts) == 1:
            turn = ((caller_of(request), session), chat_messages(body), prepared.prompts[0])
            self.guard.check(*turn)
        states = self.tm.submit(
            prepared.prompts,
            prepared.params,
            prepared.rids,
            namespace,
            session=session,
            caller=caller_of(request),
            endpoint=request.url.path,
            pins=pins,
        )
        rid = f"{'chatcmpl' if is_chat else 'cmpl'}-{uuid.uuid4().hex}"
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            events = self._stream(rid, states, body.n, is_chat, usage)
            if turn is not None:
                events = self.guard.record_after(events, turn, states[0])
            return sse_response(request_events(self.tm, states, events))
        try:
            await wait_finished(request, self.tm, states)
        except ClientGoneError:
            return Response(status_code=499)
        if turn is not None:
            self.guard.record(*turn, states[0].out.output_ids)
        choices = []
        for i, state in enumerate(states):
            result = state.result()
            choice = self.render.choice(i, state, result["text"], 0, is_chat)
            if is_chat:
                choice["message"] = {"role": "assistant", "content": choice.pop("delta")}
            else:
                choice["text"] = choice.pop("delta")
            choices.append(choice)
        usage = usage_of(states, body.n)
        if explained is not None:  # one per distinct prompt, in order
            found = list(explained.values())
            usage.setdefault("prompt_tokens_details", {})["cache_explanation"] = (
                found[0] if len(found) == 1 else found
            )
        return json_response(
            {
                "id": rid,
                "object": "chat.completion" if is_chat else "text_completion",
                "created": int(time.time()),
                "model": self.model_name,
                "choices": choices,
                "usage": usage,
            }
        )

    async def _stream(
        self, rid: str, states: list[ReqState], n: int, is_chat: bool, include_usage: bool
    ) -> AsyncIterator[bytes]:
        """SSE deltas (errors, [DONE] and aborts: `request_events`)."""
        head = {
            "id": rid,
            "object": "chat.completion.chunk" if is_chat else "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
        }
        sent_text = [""] * len(states)
        sent_tokens = [0] * len(states)
        is_done = [False] * len(states)
        if is_chat:
            for i in range(len(states)):
                first = {
                    "index": i,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
                yield sse_event({**head, "choices": [first]})
        async for _ in updates(states):
            for i, state in enumerate(states):
                if is_done[i]:
                    continue
                result = state.result()
                text, finished = result["text"], state.out.is_finished
                if text == sent_text[i] and not finished:
                    continue
                delta = text[len(sent_text[i]) :]
                choice = self.render.choice(i, state, delta, sent_tokens[i], is_chat)
                if is_chat:
                    choice["delta"] = {"content": choice["delta"]}
                else:
                    choice["text"] = choice.pop("delta")
                sent_text[i], sent_tokens[i] = text, len(result["output_ids"])
                is_done[i] = finished
                yield sse_event({**head, "choices": [choice]})
        if include_usage:
            yield sse_event({**head, "choices": [], "usage": usage_of(states, n)})
