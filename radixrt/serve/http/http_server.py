"""The FastAPI app: the serving pipeline (serving.py) and every dialect's routes over it
(api/: native, OpenAI, OpenAI Responses, Anthropic, Gemini, the cache handles, the control
endpoints), the dashboard, the error handlers, the OpenAPI document and the middleware.

One asyncio task per HTTP request; each handler parses, tokenizes and validates its body on
the tokenizer thread (the event loop stays free) and hands the result to the pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

from fastapi import FastAPI

from radixrt.serve.http.api.anthropic import routes as anthropic
from radixrt.serve.http.api.batches import routes as batches
from radixrt.serve.http.api.caches import routes as caches
from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.api.control import routes as control
from radixrt.serve.http.api.gemini import routes as gemini
from radixrt.serve.http.api.native import routes as native
from radixrt.serve.http.api.openai import routes as openai
from radixrt.serve.http.api.responses import routes as responses
from radixrt.serve.http.api.tokenize import routes as tokenize
from radixrt.serve.http.args import ServerArgs, served_model_name
from radixrt.serve.http.cache_handles import CacheRegistry
from radixrt.serve.http.dashboard import DashboardRecorder, add_dashboard_routes
from radixrt.serve.http.grammar_check import GrammarChecker
from radixrt.serve.http.http_errors import add_error_handlers
from radixrt.serve.http.openapi import install_openapi
from radixrt.serve.http.protocol import Limits
from radixrt.serve.http.serving import ServingPipeline
from radixrt.serve.http.tenancy import Tenancy
from radixrt.serve.http.tokenizer_manager import TokenizerManager
from radixrt.serve.http.tools import format_for
from radixrt.serve.web.browser import BrowserGuardMiddleware
from radixrt.serve.web.middleware import BodyLimitMiddleware
from radixrt.serve.web.paths import PathGuardMiddleware

# Each dialect's routes module: add_routes(app, ctx), and BODIES for the OpenAPI document.
DIALECTS: tuple[ModuleType, ...] = (
    control, native, openai, responses, anthropic, caches, gemini, tokenize, batches
)  # fmt: skip


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
        # A grammar-check worker warms in the background once no request is in flight.
        warm = asyncio.create_task(grammar.warm_when_quiet(lambda: bool(tm.states)))
        tenancy.watch_sighup()
        yield
        warm.cancel()
        grammar.close()
        if on_shutdown is not None:
            await on_shutdown()

    app = FastAPI(title="radixrt", lifespan=lifespan, docs_url=None, redoc_url=None)
    grammar = GrammarChecker(
        args.scheduler,
        tm.tokenizer,
        tm.ready,
        max_pending=args.server.max_pending_grammars,
        max_pending_per_tenant=args.server.max_pending_grammars_per_tenant,
        max_grammar_bytes=args.server.max_grammar_bytes,
    )
    ctx = ApiContext(
        tm,
        args,
        Limits.from_server(tm.ready, args.server, tm.tokenizer),
        tenancy,
        CacheRegistry(tm, args.server.cache_ttl_scale),  # named, pinned prefixes
        ServingPipeline(tm, tenancy, grammar),
        served_model_name(args),
        format_for(args.server.tool_call_format, tm.tokenizer),
    )
    app.state.model_name = ctx.model_name
    app.state.max_request_bytes = args.server.max_request_bytes
    app.state.cache_registry = ctx.registry
    add_error_handlers(app)
    for dialect in DIALECTS:
        dialect.add_routes(app, ctx)
    add_dashboard_routes(app, tm, recorder or DashboardRecorder(), ctx.model_name)
    install_openapi(app, {path: body for d in DIALECTS for path, body in d.BODIES.items()})
    app.add_middleware(BodyLimitMiddleware, max_bytes=args.server.max_request_bytes)
    tenancy.install(app)  # no body is read before the key check
    app.add_middleware(PathGuardMiddleware)  # dot segments: 400, as on the router
    app.add_middleware(BrowserGuardMiddleware, config=args.server)  # outermost: pages first
    return app
