"""Every route that queues work is admitted against the tenant's share and counted as the
tenant's (docs/reliability.md): a request's cache explanation waits inside its admission,
cache creates run as their tenant (in flight, /v1/usage, the request log) and cannot pass the
handle bound by racing, and POST /v1/cache/explain is admitted and metered."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from radixrt.serve.http import cache_handles
from radixrt.serve.http.api.caches.routes import add_routes as add_cache_routes
from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.api.native.routes import add_routes as add_native_routes
from radixrt.serve.http.request_log import RequestLog
from radixrt.serve.http.tenancy import Tenancy
from radixrt.serve.web.keys import KeyRing, KeyStore

from .fake_scheduler import FakeScheduler, make_app

AUTH = {"Authorization": "Bearer key-a"}


def _tenancy(tmp: Path, **limits: Any) -> Tenancy:
    path = tmp / "keys.json"
    path.write_text(json.dumps({"keys": [{"key": "key-a", "tenant": "a", "role": "user"}]}))
    return Tenancy(KeyStore(KeyRing.from_file(path)), **limits)


def _run(tenancy: Tenancy, test: Any, log: Path | None = None) -> None:
    async def go() -> None:
        app, ctx, scheduler = make_app(tenancy)
        if log is not None:
            ctx.tm._observers = (*ctx.tm._observers, RequestLog(str(log), 2**20))
        add_native_routes(app, ctx)
        add_cache_routes(app, ctx)
        tenancy.install(app)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            await test(client, ctx, scheduler)
        for _ in range(20):
            await asyncio.sleep(0)
        assert not ctx.tm.states and not ctx.tm.groups and not scheduler.running
        await ctx.tm.close()

    asyncio.run(go())


async def _at_once(client: httpx.AsyncClient, num: int, path: str, body: Any) -> list[int]:
    calls = [client.post(path, json=body, headers=AUTH) for _ in range(num)]
    return [r.status_code for r in await asyncio.gather(*calls)]


def test_an_explained_request_waits_inside_its_admission(tmp_path) -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        body = {"text": "abc", "sampling_params": {"max_new_tokens": 3}, "explain_cache": True}
        codes = await _at_once(client, 16, "/generate", body)
        assert set(codes) <= {200, 429} and codes.count(200) >= 2
        assert sched.most_running <= 2  # explanations and requests of the tenant together

    _run(_tenancy(tmp_path, max_requests_per_tenant=2), test)


def test_cache_creates_are_admitted_and_counted_as_the_tenants(tmp_path) -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        codes = await _at_once(client, 6, "/v1/caches", {"text": "a prefix to keep"})
        assert set(codes) <= {200, 429} and codes.count(200) >= 2
        assert sched.most_running <= 2
        made = codes.count(200)
        assert ctx.tenancy.usage.of("tenant:a").requests == made  # GET /v1/usage's figures
        lines = [json.loads(line) for line in (tmp_path / "requests.jsonl").open()]
        assert [(x["tenant"], x["endpoint"]) for x in lines] == [("a", "/v1/caches")] * made

    _run(_tenancy(tmp_path, max_requests_per_tenant=2), test, tmp_path / "requests.jsonl")


def test_concurrent_cache_creates_cannot_pass_the_handle_bound(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(cache_handles, "MAX_HANDLES_PER_OWNER", 2)

    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        codes = await _at_once(client, 5, "/v1/caches", {"text": "a prefix to keep"})
        assert sorted(codes) == [200, 200, 409, 409, 409]
        assert len(ctx.registry.list("a")) == 2
        r = await client.post("/v1/caches", json={"text": "one more"}, headers=AUTH)
        assert r.status_code == 409 and "holds 2 caches" in r.text

    _run(_tenancy(tmp_path), test)


def test_explain_is_admitted_and_metered(tmp_path) -> None:
    limit = 2

    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        codes = await _at_once(client, 8, "/v1/cache/explain", {"text": "what is cached?"})
        assert set(codes) <= {200, 429} and codes.count(200) >= limit
        assert sched.most_running <= limit
        totals = ctx.tenancy.usage.of("tenant:a")
        assert (totals.explains, totals.explained_tokens) == (
            codes.count(200),
            15 * codes.count(200),
        )

    _run(_tenancy(tmp_path, max_requests_per_tenant=limit), test)
