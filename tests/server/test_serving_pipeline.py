"""The serving pipeline on its own (an in-process app over a stand-in scheduler): a new dialect
is one parse and one render, and the pipeline gives it streaming, errors, admission and
abort-on-exit; a tenant's admission is held until its requests are submitted."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.protocol import decode_body, fit_to_context, to_sampling_params
from radixrt.serve.http.render import BaseRender, Finished
from radixrt.serve.http.req_state import ReqState
from radixrt.serve.http.serving import ServeRequest
from radixrt.serve.http.tenancy import Tenancy, TooManyRequestsError
from radixrt.serve.results.delta import OutputDelta
from radixrt.serve.web.keys import Identity

from .fake_scheduler import make_app

# ---- a whole dialect: "shout" answers its prompt, repeated `times`, in capitals ----------


class ShoutBody(msgspec.Struct, forbid_unknown_fields=True):
    say: str
    times: int = 1
    stream: bool = False


class ShoutRender(BaseRender):
    media_type = "text/plain"

    def response(self, done: Finished) -> dict[str, Any]:
        return {"shout": done.outputs[0].text.upper(), "tokens": done.outputs[0].end}

    def delta(self, index: int, state: ReqState, delta: OutputDelta) -> Iterator[bytes]:
        yield delta.text.upper().encode()

    def tail(self, states: list[ReqState]) -> Iterator[bytes]:
        yield b"!"

    def error(self, message: str, status: int) -> bytes:
        return f" ({status}: {message})".encode()


def add_shout_routes(app: FastAPI, ctx: ApiContext) -> None:
    @app.post("/v1/shout")
    async def shout(request: Request) -> Response:
        body = decode_body(await request.body(), ShoutBody)
        ids = ctx.tokenizer.encode(body.say)
        sp = to_sampling_params({"max_new_tokens": len(ids) * body.times})
        req = ServeRequest([ids], [fit_to_context(ids, sp, ctx.limits, True)], stream=body.stream)
        return await ctx.pipeline.serve(request, req, ShoutRender())


# ---- tests --------------------------------------------------------------------------------


def _run(test: Any, tenancy: Tenancy | None = None) -> None:
    """Run `test(client, ctx)` against an app with the shout dialect; nothing may be left in
    flight after it, in the TokenizerManager or the scheduler."""

    async def go() -> None:
        app, ctx, scheduler = make_app(tenancy)
        add_shout_routes(app, ctx)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            await test(client, ctx)
        for _ in range(10):
            await asyncio.sleep(0)
        assert not ctx.tm.states and not ctx.tm.groups and not scheduler.running
        await ctx.tm.close()

    asyncio.run(go())


def test_a_dialect_is_a_parse_and_a_render() -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext) -> None:
        r = await client.post("/v1/shout", json={"say": "hey", "times": 2})
        assert r.status_code == 200 and r.json() == {"shout": "HEYHEY", "tokens": 6}
        r = await client.post("/v1/shout", json={"say": "hey", "times": 2, "stream": True})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert r.content == b"HEYHEY!"
        r = await client.post("/v1/shout", json={"say": "!no", "stream": True})
        assert r.content == b"! (500: boom)"  # the render's error event ends a failed stream
        r = await client.post("/v1/shout", json={"say": "!no"})
        assert r.status_code == 500 and r.json()["error"]["message"] == "boom"
        r = await client.post("/v1/shout", json={"say": "hey", "times": 10**6})
        assert r.status_code == 400 and "max_new_tokens" in r.json()["error"]["message"]
        r = await client.post("/v1/shout", json={"say": ""})
        assert r.status_code == 400 and "empty" in r.json()["error"]["message"]

    _run(test)


def test_the_admission_of_a_tenant_is_held_until_its_requests_are_submitted() -> None:
    tenancy = Tenancy(None, max_requests_per_tenant=2, max_tokens_per_tenant=100)
    request = Request({"type": "http", "headers": [], "state": {"identity": Identity("a")}})

    async def test(client: httpx.AsyncClient, ctx: ApiContext) -> None:
        tm = ctx.tm
        with tenancy.admit(tm, request, 1, 10), tenancy.admit(tm, request, 1, 10):
            with pytest.raises(TooManyRequestsError, match="2 requests in flight"):
                with tenancy.admit(tm, request, 1, 10):
                    pass
        with tenancy.admit(tm, request, 1, 60):
            with pytest.raises(TooManyRequestsError, match="hold up to 60 tokens"):
                with tenancy.admit(tm, request, 1, 60):
                    pass
        with tenancy.admit(tm, request, 2, 100):  # all released: the whole share again
            pass

    _run(test, tenancy)
