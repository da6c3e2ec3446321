"""The FastAPI app: native endpoints (/generate, cache and info, metrics) plus the OpenAI ones.

One asyncio task per HTTP request; each handler parses, tokenizes and validates its body on
the tokenizer thread (the event loop stays free), checks its grammar, submits through the
TokenizerManager and waits on its requests' shared event.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.grammar.base import GrammarBusyError
from radixrt.server.args import ServerArgs
from radixrt.server.grammar_check import GrammarChecker
from radixrt.server.http_common import (
    ClientGoneError,
    RequestFailedError,
    request_events,
    updates,
    wait_finished,
)
from radixrt.server.metrics import CONTENT_TYPE
from radixrt.server.openai_api import OpenAIServing
from radixrt.server.openai_protocol import ChatCompletionRequest, CompletionRequest
from radixrt.server.openapi import install_openapi
from radixrt.server.protocol import (
    BadRequestError,
    GenerateRequest,
    Limits,
    PreparedRequest,
    decode_body,
    prepare_generate,
)
from radixrt.server.tokenizer_manager import (
    RefusedError,
    ReqState,
    SchedulerDeadError,
    TokenizerManager,
)
from radixrt.web.middleware import (
    NOT_STARTED_HEADER,
    SESSION_HEADER,
    ApiKeyMiddleware,
    BodyLimitMiddleware,
    BodyTooLargeError,
    body_too_large,
    caller_of,
)
from radixrt.web.responses import (
    error_response,
    json_response,
    sse_event,
    sse_response,
)

logger = logging.getLogger("radixrt")


class AbortRequest(msgspec.Struct, forbid_unknown_fields=True):
    rid: str


def create_app(tm: TokenizerManager, args: ServerArgs, on_shutdown: Any = None) -> FastAPI:
    """Build the app; `on_shutdown` (async, optional) runs after uvicorn drains connections."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        grammar.start()  # warms a grammar-check worker in the background
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
    openai = OpenAIServing(tm, limits, args.server.served_model_name or _model_name(args), grammar)
    app.state.model_name = openai.model_name
    app.state.max_request_bytes = args.server.max_request_bytes
    _add_error_handlers(app)

    @app.get("/health")
    async def health() -> Response:
        if tm.dead_reason is not None:
            return error_response(tm.dead_reason, 503)
        return json_response({"status": "ok"})

    def parse_generate(raw: bytes) -> tuple[GenerateRequest, PreparedRequest]:
        body = decode_body(raw, GenerateRequest)
        return body, prepare_generate(body, tm.tokenizer, limits)

    @app.post("/generate")
    async def generate(request: Request) -> Response:
        body, prepared = await tm.run_tokenizer(parse_generate, await request.body())
        await grammar.check(prepared.params)
        states = tm.submit(
            prepared.prompts,
            prepared.params,
            prepared.rids,
            body.extra_key,
            session=request.headers.get(SESSION_HEADER),
            caller=caller_of(request),
        )
        if body.stream:
            return sse_response(request_events(tm, states, _generate_events(states)))
        try:
            await wait_finished(request, tm, states)
        except ClientGoneError:
            return Response(status_code=499)
        results = [s.result() for s in states]
        return json_response(results[0] if prepared.is_single and len(results) == 1 else results)

    @app.get("/get_model_info")
    async def get_model_info() -> Response:
        return json_response(
            {
                "model_path": tm.ready.model_path,
                "served_model_name": openai.model_name,
                "chat_template": getattr(tm.tokenizer, "chat_template", None),
                "context_length": limits.context_length,
                "vocab_size": limits.vocab_size,
            }
        )

    @app.get("/get_server_info")
    async def get_server_info() -> Response:
        info = msgspec.structs.asdict(await tm.get_info())
        info.pop("reply_id")
        server = dataclasses.asdict(args.server)
        server["api_key"] = None if server["api_key"] is None else "***"
        return json_response(
            {
                **info,
                "num_inflight_reqs": len(tm.states),
                "kv_pool_bytes": tm.ready.kv_pool_bytes,
                "device": tm.ready.device,
                "dtype": tm.ready.dtype,
                "model_config": dataclasses.asdict(args.model),
                "cache_config": dataclasses.asdict(args.cache),
                "scheduler_config": dataclasses.asdict(args.scheduler),
                "server_config": server,
            }
        )

    @app.post("/flush_cache")
    async def flush_cache() -> Response:
        if tm.states or not await tm.flush_cache():
            return error_response("requests are running; flush the cache when idle", 409)
        return json_response({"success": True})

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        """Abort the caller's own request `rid`; the same answer whether or not one runs."""
        body = decode_body(await request.body(), AbortRequest)
        tm.abort_rid(body.rid, caller_of(request))
        return json_response({"success": True})

    @app.get("/metrics")
    async def metrics() -> Response:
        if not tm.metrics.enabled:
            return error_response("metrics are off; start the server with --enable-metrics", 404)
        return Response(tm.metrics.render(await tm.get_info()), media_type=CONTENT_TYPE)

    openai.add_routes(app)
    install_openapi(
        app,
        {
            "/generate": GenerateRequest,
            "/v1/completions": CompletionRequest,
            "/v1/chat/completions": ChatCompletionRequest,
            "/abort_request": AbortRequest,
        },
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=args.server.max_request_bytes)
    if args.server.api_key is not None:  # outermost: no body is read before the key check
        app.add_middleware(ApiKeyMiddleware, api_key=args.server.api_key)
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


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(BadRequestError)
    async def bad_request(request: Request, exc: Exception) -> Response:
        return error_response(str(exc), 400)

    @app.exception_handler(BodyTooLargeError)
    async def too_large(request: Request, exc: Exception) -> Response:
        return body_too_large(request.app.state.max_request_bytes)

    @app.exception_handler(RequestFailedError)
    async def failed(request: Request, exc: Exception) -> Response:
        return error_response(str(exc), exc.status_code)  # type: ignore[attr-defined]

    @app.exception_handler(GrammarBusyError)
    @app.exception_handler(RefusedError)
    async def refused(request: Request, exc: Exception) -> Response:
        response = error_response(str(exc), 503)
        response.headers[NOT_STARTED_HEADER] = "1"
        return response

    @app.exception_handler(SchedulerDeadError)
    async def unavailable(request: Request, exc: Exception) -> Response:
        return error_response(str(exc), 503)

    @app.exception_handler(ValueError)
    async def value_error(request: Request, exc: Exception) -> Response:
        return error_response(str(exc), 400)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> Response:
        logger.exception("unhandled error in %s", request.url.path)
        return error_response(f"internal error: {type(exc).__name__}", 500)


def _model_name(args: ServerArgs) -> str:
    from pathlib import Path

    from radixrt.models.loader import DEFAULT_GGUF_NAME

    return Path(args.model.model_path or DEFAULT_GGUF_NAME).name.removesuffix(".gguf")
