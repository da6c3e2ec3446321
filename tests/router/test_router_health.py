"""The router's health checks: a worker whose /health answers 503 (its scheduler died or is
wedged) leaves the rotation at the first check; one that cannot be reached only after
`health_failure_threshold` checks in a row; one good check brings either back."""

from __future__ import annotations

import asyncio

import httpx

from radixrt.core.config import RouterConfig, RouterServerConfig
from radixrt.serve.placement.policy import RouteRequest, make_policy
from radixrt.serve.router.workers import WorkerPool

URLS = ["http://a", "http://b"]


def test_a_503_health_takes_a_worker_out_at_once() -> None:
    answers = {"a": 200, "b": 200}

    def handler(request: httpx.Request) -> httpx.Response:
        code = answers[request.url.host]
        if code == 0:
            raise httpx.ConnectError("refused", request=request)
        body = {"status": "ok"} if code == 200 else {"error": {"message": "wedged"}}
        return httpx.Response(code, json=body)

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            config = RouterServerConfig(health_failure_threshold=3)
            pool = WorkerPool(URLS, make_policy(RouterConfig("round_robin")), config, client)
            await pool.check_all()
            assert [w.url for w in pool.healthy] == URLS
            answers["b"] = 503
            await pool.check_all()
            assert [w.url for w in pool.healthy] == ["http://a"]
            for _ in range(4):  # only the healthy worker is picked
                worker = pool.pick(RouteRequest(), set())
                assert worker is not None and worker.url == "http://a"
                pool.done(worker)
            answers["b"] = 200
            await pool.check_all()
            assert len(pool.healthy) == 2
            answers["b"] = 0  # unreachable: a glitch is given the threshold's checks
            for expected in (2, 2, 1):
                await pool.check_all()
                assert len(pool.healthy) == expected

    asyncio.run(go())
