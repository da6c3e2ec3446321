"""The tokenizer thread takes callers in turn (docs/reliability.md, "Smaller items"): one
tenant's queue of slow bodies delays another tenant's request by the job running now, not by
the whole queue; a job whose client went away is skipped."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import httpx

from radixrt.serve.http.api.native.routes import add_routes
from radixrt.serve.http.fair_pool import FairPool
from radixrt.serve.http.tenancy import Tenancy
from radixrt.serve.web.keys import KeyRing, KeyStore

from .fake_scheduler import make_app

SLOW_S = 0.1  # tokenizing one of tenant a's prompts


def test_one_tenants_slow_bodies_do_not_stall_another(tmp_path: Path) -> None:
    keys = [{"key": f"key-{t}", "tenant": t, "role": "user"} for t in "ab"]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    tenancy = Tenancy(KeyStore(KeyRing.from_file(tmp_path / "keys.json")))

    async def go() -> None:
        app, ctx, _ = make_app(tenancy)
        add_routes(app, ctx)
        tenancy.install(app)
        encode = ctx.tm.tokenizer.encode

        def slow_encode(text: str, add_special_tokens: bool = True) -> list[int]:
            if text.startswith("slow"):
                time.sleep(SLOW_S)  # stands for an 8 MiB body
            return encode(text, add_special_tokens)

        ctx.tm.tokenizer.encode = slow_encode
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:

            async def post(tenant: str, text: str) -> float:
                body = {"text": text, "sampling_params": {"max_new_tokens": 1}}
                headers = {"Authorization": f"Bearer key-{tenant}"}
                t0 = time.perf_counter()
                r = await client.post("/generate", json=body, headers=headers)
                assert r.status_code == 200, r.text
                return time.perf_counter() - t0

            flood = [asyncio.ensure_future(post("a", f"slow {i}")) for i in range(20)]
            await asyncio.sleep(SLOW_S / 2)  # a's queue is there first
            b_s = await post("b", "fast")
            assert b_s < 4 * SLOW_S, f"b waited {b_s:.2f} s behind a's queue"
            assert not all(f.done() for f in flood)
            await asyncio.gather(*flood)
        await ctx.tm.close()

    asyncio.run(go())


def test_the_pool_takes_callers_in_turn_and_skips_cancelled_jobs() -> None:
    pool = FairPool("test-fair")
    gate, running = threading.Event(), threading.Event()
    order: list[str] = []

    def hold() -> bool:
        running.set()
        return gate.wait(5)

    first = pool.submit("a", hold)  # holds the thread while the queues fill
    assert running.wait(5)
    jobs = [pool.submit("a", order.append, f"a{i}") for i in range(3)]
    gone = pool.submit("b", order.append, "b-gone")
    jobs += [pool.submit("b", order.append, "b0"), pool.submit("c", order.append, "c0")]
    assert gone.cancel()
    gate.set()
    assert first.result(5) is True
    for job in jobs:
        job.result(5)
    assert order == ["a0", "b0", "c0", "a1", "a2"]
    pool.shutdown()
