"""Logprob volume (docs/reliability.md): a request whose logprobs would pass
--max-logprob-entries is refused with 400 naming the numbers, before anything is queued; n
samples of one prompt ask the scheduler for the prompt's logprobs once, and each answers with
them, streamed or whole."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from radixrt.core.config import ServerConfig
from radixrt.serve.http.api.context import ApiContext
from radixrt.serve.http.api.native.routes import add_routes

from .fake_scheduler import FakeScheduler, make_app


def _run(test: Any, config: ServerConfig | None = None) -> None:
    async def go() -> None:
        app, ctx, scheduler = make_app(config=config)
        add_routes(app, ctx)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            await test(client, ctx, scheduler)
        for _ in range(10):
            await asyncio.sleep(0)
        assert not ctx.tm.states and not ctx.tm.groups and not scheduler.running
        await ctx.tm.close()

    asyncio.run(go())


def _body(n: int, top: int, prompt: str = "x" * 100, **extra: Any) -> dict[str, Any]:
    sampling = {"max_new_tokens": 4, "n": n, "temperature": 1.0}
    return {"text": prompt, "sampling_params": sampling, "return_logprob": True,
            "logprob_start_len": 0, "top_logprobs_num": top, **extra}  # fmt: skip


def test_a_request_over_the_logprob_budget_is_refused_at_once() -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        start = time.monotonic()
        r = await client.post("/generate", json=_body(n=16, top=100))
        assert r.status_code == 400
        message = r.json()["error"]["message"]
        # 16 x (100 prompt + 4 output tokens) x (1 + 100)
        assert "168064 logprob entries" in message and "at most 10000" in message
        assert "--max-logprob-entries" in message
        assert time.monotonic() - start < 1.0 and not sched.received  # nothing was queued
        r = await client.post("/generate", json=_body(n=4, top=20))  # 8736 entries: fits
        assert r.status_code == 200, r.text

    _run(test, ServerConfig(max_logprob_entries=10_000))


def test_n_samples_ask_for_the_prompt_logprobs_once() -> None:
    async def test(client: httpx.AsyncClient, ctx: ApiContext, sched: FakeScheduler) -> None:
        for stream in (False, True):
            sched.received.clear()
            r = await client.post("/generate", json=_body(n=4, top=2, prompt="abcdef",
                                                          stream=stream))  # fmt: skip
            assert r.status_code == 200, r.text
            if stream:
                events = [json.loads(line[6:]) for line in r.text.splitlines()
                          if line.startswith("data: {")]  # fmt: skip
                results = [e for e in events if e["meta_info"]["finish_reason"] is not None]
            else:
                results = r.json()
            asking = [m for m in sched.received if m.sampling_params.logprob_start_len >= 0]
            assert len(sched.received) == 4 and len(asking) == 1
            assert len(results) == 4
            for result in results:
                meta = result["meta_info"]
                got = [(lp, t) for lp, t, _ in meta["input_token_logprobs"]]
                assert got == [(-1.0, ord(c)) for c in "abcdef"]
                assert len(meta["input_top_logprobs"]) == 6

    _run(test)
