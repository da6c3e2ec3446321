"""Grammar compiles under tenants (docs/reliability.md, "Smaller items"): a request is admitted
against its tenant's share before its grammar compiles, and one tenant may have started only
its share of the pending compiles, so its slow schemas leave slots to the others."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from radixrt.grammar.base import GrammarSpec
from radixrt.serve.http.api.native.routes import add_routes
from radixrt.serve.http.tenancy import Tenancy
from radixrt.serve.web.keys import KeyRing, KeyStore

from .fake_scheduler import make_app


def _tenancy(tmp: Path, **limits: Any) -> Tenancy:
    keys = [{"key": f"key-{t}", "tenant": t, "role": "user"} for t in "ab"]
    path = tmp / "keys.json"
    path.write_text(json.dumps({"keys": keys}))
    return Tenancy(KeyStore(KeyRing.from_file(path)), **limits)


def _run(tenancy: Tenancy, test: Any) -> None:
    """`test(client, started, release)` over an app whose compiles wait for `release`; each
    compile that starts appends its spec to `started`."""

    async def go() -> None:
        app, ctx, _ = make_app(tenancy)
        add_routes(app, ctx)
        tenancy.install(app)
        started: list[str] = []
        release = asyncio.Event()

        async def slow_compile(spec: GrammarSpec) -> str | None:
            started.append(spec.text)
            await release.wait()
            return None

        ctx.pipeline.grammar._run = slow_compile  # type: ignore[method-assign]
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            await test(client, started, release)
        await ctx.tm.close()

    asyncio.run(go())


def _post(client: httpx.AsyncClient, tenant: str, regex: str) -> Any:
    body = {"text": "x", "sampling_params": {"max_new_tokens": 1, "regex": regex}}
    headers = {"Authorization": f"Bearer key-{tenant}"}
    return asyncio.ensure_future(client.post("/generate", json=body, headers=headers))


async def _settle() -> None:
    await asyncio.sleep(0.2)  # every call that can reach its compile has


def test_one_tenants_slow_schemas_leave_compile_slots_to_the_others(tmp_path) -> None:
    async def test(client: httpx.AsyncClient, started: list[str], release: Any) -> None:
        flood = [_post(client, "a", f"a{i}+") for i in range(64)]
        await _settle()
        other = _post(client, "b", "b+")
        await _settle()
        assert "b+" in started  # b's compile runs beside a's
        release.set()
        codes = [r.status_code for r in await asyncio.gather(*flood)]
        assert codes.count(200) == 16 and codes.count(429) == 48  # a's share of 64 slots
        assert (await other).status_code == 200
        r = next(r for r in map(lambda f: f.result(), flood) if r.status_code == 429)
        assert "--max-pending-grammars-per-tenant" in r.text

    _run(_tenancy(tmp_path), test)


def test_a_request_is_admitted_before_its_grammar_compiles(tmp_path) -> None:
    async def test(client: httpx.AsyncClient, started: list[str], release: Any) -> None:
        calls = [_post(client, "a", f"a{i}+") for i in range(6)]
        await _settle()
        assert len(started) == 2  # the others were refused before compiling anything
        release.set()
        codes = sorted(r.status_code for r in await asyncio.gather(*calls))
        assert codes == [200, 200, 429, 429, 429, 429]

    _run(_tenancy(tmp_path, max_requests_per_tenant=2), test)
