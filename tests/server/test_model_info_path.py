"""GET /get_model_info names the model's folder; its absolute path (the operator's file
layout) only to admins and keyless servers (docs/reliability.md, "Smaller items")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import msgspec

from radixrt.serve.http.api.control.routes import add_routes
from radixrt.serve.http.tenancy import Tenancy
from radixrt.serve.web.keys import KeyRing, KeyStore

from .fake_scheduler import make_app

MODEL = "/home/operator/models/SmolLM2-135M-Instruct"


def _model_paths(tenancy: Tenancy, keys: list[str | None]) -> list[str]:
    async def go() -> list[str]:
        app, ctx, _ = make_app(tenancy)
        ctx.tm.ready = msgspec.structs.replace(ctx.tm.ready, model_path=MODEL)
        add_routes(app, ctx)
        tenancy.install(app)
        transport = httpx.ASGITransport(app=app)
        out = []
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for key in keys:
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                r = await client.get("/get_model_info", headers=headers)
                assert r.status_code == 200, r.text
                out.append(r.json()["model_path"])
        await ctx.tm.close()
        return out

    return asyncio.run(go())


def test_only_admins_see_the_models_absolute_path(tmp_path: Path) -> None:
    keys = [
        {"key": "key-admin", "tenant": "ops", "role": "admin"},
        {"key": "key-user", "tenant": "a", "role": "user"},
    ]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    tenancy = Tenancy(KeyStore(KeyRing.from_file(tmp_path / "keys.json")))
    paths = _model_paths(tenancy, ["key-admin", "key-user"])
    assert paths == [MODEL, "SmolLM2-135M-Instruct"]
    assert _model_paths(Tenancy(None), [None]) == [MODEL]  # no keys: the operator's own
