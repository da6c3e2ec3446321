"""The FastAPI app: /health and /generate, plus the other native endpoints (control_api.py,
cache_api.py, caches_api.py) and the OpenAI, Anthropic and Gemini ones.

One asyncio task per HTTP request; each handler parses, tokenizes and validates its body on
the tokenizer thread (the event loop stays free), checks its grammar, submits through the
TokenizerManager and waits on its requests' shared event.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.server.anthropic.api import BODIES as ANTHROPIC_BODIES
from radixrt.server.anthropic.api import AnthropicServing
from radixrt.server.args import ServerArgs, served_model_name
from radixrt.server.cache_api import ExplainRequest, add_cache_routes, explain_prompts
from radixrt.server.cache_handles import CacheRegistry
from radixrt.server.caches_api import (
    CreateCacheRequest,
    UpdateCacheRequest,
    add_caches_routes,
    owner_of,
)
from radixrt.server.control_api import AbortRequest, add_control_routes
from radixrt.server.dashboard import DashboardRecorder, add_dashboard_routes
from radixrt.server.gemini.api import add_gemini_routes
from radixrt.server.generate_protocol import GenerateRequest, prepare_generate
from radixrt.server.grammar_check import GrammarChecker
from radixrt.server.http_common import (
    ClientGoneError,
    request_events,
    updates,
    wait_finished,
)
from radixrt.server.http_errors import add_error_handlers
from radixrt.server.openai_api import OpenAIServing
from radixrt.server.openai_protocol import ChatCompletionRequest, CompletionRequest
from radixrt.server.openapi import install_openapi
from radixrt.server.protocol import (
    BadRequestError,
    Limits,
    decode_body,
)
from radixrt.server.tenancy import Tenancy, work_of
from radixrt.server.tokenizer_manager import (
    ReqState,
    TokenizerManager,
)
from radixrt.web.middleware import (
    SESSION_HEADER,
    BodyLimitMiddleware,
    caller_of,
)
from radixrt.web.responses import (
    error_response,
    json_response,
    sse_event,
    sse_response,
)

logger = logging.getLogger("radixrt")


def create_app(
    tm: TokenizerManager,
    args: ServerArgs,
    tenancy: Tenancy,
    on_shutdown: Any = None,
    recorder: DashboardRecorder | None = None,
) -> FastAPI:
    """Build the app; `tenancy` holds the keys (Tenancy.from_config(args.server), read once at
    start-up); `on_shutdown` (async, optional) runs after uvicorn drains connections;
    `recorder`: the dashboard's history, fed by `tm` (none given: an empty one)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        grammar.start()  # warms a grammar-check worker in the background
        tenancy.watch_sighup()
        yield
        grammar.close()
        if on_shutdown is not None:
            await on_shutdown()

    app = FastAPI(title="radixrt", lifespan=lifespan, docs_url=None, redoc_url=None)
    limits = Limits.from_server(tm.ready, args.server, tm.tokenizer)
    grammar = GrammarChecker(
        args.scheduler,
        tm.tokenizer,
        tm.ready,
        max_pending=args.server.max_pending_grammars,
        max_grammar_bytes=args.server.max_grammar_bytes,
    )
    name = served_model_name(args)
    openai = OpenAIServing(tm, limits, name, grammar, tenancy)
    app.state.model_name = openai.model_name
    app.state.max_request_bytes = args.server.max_request_bytes
    registry = CacheRegistry(tm, args.server.cache_ttl_scale)  # named, pinned prefixes
    app.state.cache_registry = registry
    add_error_handlers(app)

    @app.get("/health")
    async def health() -> Response:
        """200 while the scheduler lives and its loop beats; 503 with the reason otherwise."""
        reason = tm.dead_reason or tm.stall_reason
        if reason is not None:
            return error_response(reason, 503)
        return json_response({"status": "ok"})

    @app.post("/generate")
    async def generate(request: Request) -> Response:
        body = await tm.run_tokenizer(decode_body, await request.body(), GenerateRequest)
        namespace = tenancy.namespace(request, body.cache_salt, body.extra_key)
        handle, pins = None, None
        if body.cache_id is not None:
            handle = registry.get(owner_of(request), body.cache_id)
            if namespace != handle.namespace:
                raise BadRequestError("cache_salt differs from the one the cache was made with")
            pins = [handle.pin_spec()]  # pinned again if a flush dropped it
        prefix = handle.input_ids if handle is not None else None
        prepared = await tm.run_tokenizer(prepare_generate, body, tm.tokenizer, limits, prefix)
        await grammar.check(prepared.params)
        tenancy.admit(tm, request, *work_of(prepared.prompts, prepared.params))
        explained = None
        if body.explain_cache and not body.stream:
            explained = await explain_prompts(tm, tenancy, request, prepared.prompts, namespace)
        states = tm.submit(
            prepared.prompts,
            prepared.params,
            prepared.rids,
            namespace,
            session=request.headers.get(SESSION_HEADER),
            caller=caller_of(request),
            endpoint=request.url.path,
            pins=pins,
        )
        if body.stream:
            return sse_response(request_events(tm, states, _generate_events(states)))
        try:
            await wait_finished(request, tm, states)
        except ClientGoneError:
            return Response(status_code=499)
        results = [s.result() for s in states]
        if explained is not None:
            for state, result in zip(states, results, strict=True):
                result["meta_info"]["cache_explanation"] = explained[tuple(state.out.input_ids)]
        return json_response(results[0] if prepared.is_single and len(results) == 1 else results)

    add_control_routes(app, tm, args, tenancy, limits, registry, openai.model_name)

    openai.add_routes(app)
    AnthropicServing(tm, limits, openai.model_name, tenancy, args.server).add_routes(app)
    add_cache_routes(app, tm, limits, tenancy)
    add_caches_routes(app, tm, limits, tenancy, registry)
    add_gemini_routes(app, tm, limits, tenancy, registry, openai.model_name)
    add_dashboard_routes(app, tm, recorder or DashboardRecorder(), openai.model_name)
    install_openapi(
        app,
        {
            "/generate": GenerateRequest,
            "/v1/completions": CompletionRequest,
            "/v1/chat/completions": ChatCompletionRequest,
            "/abort_request": AbortRequest,
            "/v1/cache/explain": ExplainRequest,
            "/v1/caches": CreateCacheRequest,
            "PATCH /v1/caches/{handle_id}": UpdateCacheRequest,
            **ANTHROPIC_BODIES,
        },
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=args.server.max_request_bytes)
    tenancy.install(app)  # outermost: no body is read before the key check
    return app


async def _generate_events(states: list[ReqState]) -> AsyncIterator[bytes]:
    """SSE events for /generate: cumulative results; `index` tells requests apart when
    several (errors, [DONE] and aborts: `request_events`)."""
    sent: list[tuple[int, str, bool]] = [(0, "", False)] * len(states)
    async for _ in updates(states):
        for i, state in enumerate(states):
            result = state.result()
            key = (len(result["output_ids"]), result["text"], state.out.is_finished)
            if key == sent[i]:
                continue
            sent[i] = key
            if len(states) > 1:
                result["index"] = i
            yield sse_event(result)
