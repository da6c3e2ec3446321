"""The router's /get_server_info and /metrics: per-worker routing counts and health, and the
prefix-cache hit rates the workers report about themselves."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from radixrt.serve.router.workers import Worker, WorkerPool

_INFO_TIMEOUT_S = 5.0
_WORKER_FIELDS = (
    "cache_hit_rate",
    "num_running_reqs",
    "num_queued_reqs",
    "prompt_tokens",
    "cached_tokens",
)


async def router_info(pool: WorkerPool, headers: dict[str, str]) -> dict[str, Any]:
    """Routing counts and health per worker, plus each healthy worker's own figures."""
    reported = await asyncio.gather(*(_worker_info(pool, w, headers) for w in pool.workers))
    workers = []
    for w, info in zip(pool.workers, reported):
        workers.append(
            {
                "url": w.url,
                "healthy": w.healthy,
                "routed_requests": w.routed,
                "in_flight": w.in_flight,
                **{k: info.get(k) for k in _WORKER_FIELDS},
            }
        )
    return {
        "router_policy": pool.policy.name,
        "policy": pool.policy.stats(),
        "retries": pool.retries,
        "workers": workers,
    }


def router_metrics(info: dict[str, Any]) -> bytes:
    """Prometheus text format of `router_info`'s figures, labelled by worker URL."""
    series = (
        (
            "radixrt_router_routed_requests_total",
            "counter",
            "Requests sent to the worker",
            "routed_requests",
        ),
        (
            "radixrt_router_in_flight_requests",
            "gauge",
            "Requests in flight on the worker",
            "in_flight",
        ),
        ("radixrt_router_worker_healthy", "gauge", "1 while the worker is in rotation", "healthy"),
        (
            "radixrt_router_worker_cache_hit_rate",
            "gauge",
            "Cached / prompt tokens the worker reports",
            "cache_hit_rate",
        ),
    )
    lines = []
    for name, kind, doc, field in series:
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
        for w in info["workers"]:
            value = w[field]
            if value is not None:
                lines.append(f'{name}{{worker="{w["url"]}"}} {float(value)}')
    lines += [
        "# HELP radixrt_router_retries_total Requests re-sent to another worker",
        "# TYPE radixrt_router_retries_total counter",
        f"radixrt_router_retries_total {float(info['retries'])}",
    ]
    return ("\n".join(lines) + "\n").encode()


async def _worker_info(pool: WorkerPool, worker: Worker, headers: dict[str, str]) -> dict:
    if not worker.healthy:
        return {}
    try:
        r = await pool.client.get(
            worker.url + "/get_server_info", headers=headers, timeout=_INFO_TIMEOUT_S
        )
        info = r.json() if r.status_code == 200 else {}
    except (httpx.HTTPError, ValueError) as e:
        pool.report(worker, "GET /get_server_info", repr(e))
        return {}
    pool.report(worker, "GET /get_server_info", None if info else f"HTTP {r.status_code}")
    return info
