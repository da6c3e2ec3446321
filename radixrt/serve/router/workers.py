"""WorkerPool: the standalone router's view of its worker servers: health, load, routing.

A worker joins the rotation once it passes the router's safety check (service.py), asked at
its first good health check and at each one after while it fails. It leaves the rotation
after `health_failure_threshold` failed /health checks in a row, at once when its /health
answers 503 (its scheduler died or is wedged: the worker says it cannot serve) or when a
request cannot reach it; it comes back after one good check. Its load is the number of
requests the router has in flight on it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

from radixrt.core.config import RouterServerConfig
from radixrt.serve.placement.policy import BaseRoutingPolicy, RouteRequest, WorkerLoad

logger = logging.getLogger("radixrt.serve.router")

_HEALTH_TIMEOUT_S = 5.0


class WorkerUnsafeError(RuntimeError):
    """A worker the router must not route to (service.py); the message says why and what to
    change."""


@dataclass(slots=True)
class Worker:
    url: str  # base URL, no trailing slash; also the worker's id for the policy
    healthy: bool = True
    failures: int = 0  # failed health checks in a row
    in_flight: int = 0
    routed: int = 0  # requests sent here (retries included)
    vetted: bool = False  # passed the safety check (always, without one)
    refused: str | None = None  # why the safety check keeps it out
    problems: dict[str, str] = field(default_factory=dict)  # the router's own calls: what failed


class WorkerPool:
    """Owns the workers' state and the health-check task; picks a worker through the policy."""

    def __init__(
        self,
        urls: list[str],
        policy: BaseRoutingPolicy,
        config: RouterServerConfig,
        client: httpx.AsyncClient,
        vet: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """`vet(url)` raises (WorkerUnsafeError, or httpx.HTTPError when it cannot tell)
        while the worker must stay out of rotation."""
        if not urls:
            raise ValueError("the router needs at least one worker URL")
        self.workers = [Worker(u.rstrip("/")) for u in urls]
        if len({w.url for w in self.workers}) != len(self.workers):
            raise ValueError(f"worker URLs must be distinct, got {urls}")
        self.policy = policy
        self.config = config
        self.client = client
        self.retries = 0  # requests re-sent to another worker because they never started
        self.vet = vet
        self._task: asyncio.Task[None] | None = None

    @property
    def healthy(self) -> list[Worker]:
        return [w for w in self.workers if w.healthy]

    def pick(self, route: RouteRequest, exclude: set[str]) -> Worker | None:
        """The policy's choice among healthy workers not in `exclude`; None if there is none.
        Counts the request as routed and in flight there (`done` undoes the latter)."""
        candidates = [w for w in self.workers if w.healthy and w.url not in exclude]
        if not candidates:
            return None
        loads = [WorkerLoad(w.url, w.in_flight) for w in candidates]
        worker = candidates[self.policy.select(route, loads)]
        worker.routed += 1
        worker.in_flight += 1
        return worker

    def pick_at(self, url: str | None, exclude: set[str]) -> Worker | None:
        """The worker at `url` when it is healthy and not in `exclude` (a handle's home),
        counted as `pick` counts; else None."""
        worker = next((w for w in self.workers if w.url == url), None)
        if worker is None or not worker.healthy or worker.url in exclude:
            return None
        worker.routed += 1
        worker.in_flight += 1
        return worker

    def done(self, worker: Worker) -> None:
        worker.in_flight -= 1

    def mark_unreachable(self, worker: Worker, reason: str) -> None:
        """Take `worker` out of rotation now; the health check may bring it back."""
        if worker.healthy:
            logger.warning("worker %s unreachable (%s); out of rotation", worker.url, reason)
        worker.healthy = False
        worker.failures = max(worker.failures, self.config.health_failure_threshold)

    def report(self, worker: Worker, what: str, problem: str | None) -> None:
        """The outcome of one of the router's own calls (`what`) to `worker`: a failure is
        logged when it first appears or changes, and its end when it clears."""
        before = worker.problems.get(what)
        if problem == before:
            return
        if problem is None:
            del worker.problems[what]
            logger.info("worker %s: %s works again", worker.url, what)
        else:
            worker.problems[what] = problem
            logger.warning("worker %s: %s failed: %s", worker.url, what, problem)

    def start(self) -> None:
        self._task = asyncio.create_task(self._health_loop())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def check_all(self) -> None:
        """One round of /health checks, concurrently."""
        await asyncio.gather(*(self._check(w) for w in self.workers))

    # ---- private ---------------------------------------------------------------------------

    async def _vetted(self, worker: Worker) -> bool:
        return self.vet is None or worker.vetted or await _vet_once(self, worker)

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_check_interval_s)
            await self.check_all()

    async def _check(self, worker: Worker) -> None:
        try:
            r = await self.client.get(worker.url + "/health", timeout=_HEALTH_TIMEOUT_S)
            status: int | None = r.status_code
        except httpx.HTTPError:
            status = None
        if status == 200 and not await self._vetted(worker):
            return
        if status == 200:
            if not worker.healthy:
                logger.info("worker %s healthy again", worker.url)
            worker.healthy, worker.failures = True, 0
            return
        worker.failures += 1
        if not worker.healthy:
            return
        if status == 503:  # the worker itself says it cannot serve: no second check
            logger.warning("worker %s answers /health with 503 (%s); out of rotation",
                           worker.url, _message(r))  # fmt: skip
            worker.healthy = False
        elif worker.failures >= self.config.health_failure_threshold:
            logger.warning(
                "worker %s failed %d health checks; out of rotation", worker.url, worker.failures
            )
            worker.healthy = False


async def _vet_once(pool: WorkerPool, worker: Worker) -> bool:
    """Whether `worker` passes the pool's safety check now; its verdict logged on change."""
    assert pool.vet is not None
    try:
        await pool.vet(worker.url)
    except httpx.HTTPError as e:  # cannot tell yet: out until the next check
        logger.warning("worker %s: the safety check could not ask it: %r", worker.url, e)
        worker.healthy = False
        return False
    except WorkerUnsafeError as e:  # the reason names the fix
        reason = str(e)
    else:
        if worker.refused is not None:
            logger.info("worker %s passes the safety check now", worker.url)
        worker.vetted, worker.refused = True, None
        return True
    if reason != worker.refused:
        logger.error("worker %s kept out of rotation: %s", worker.url, reason)
    worker.refused, worker.healthy = reason, False
    return False


def _message(r: httpx.Response) -> str:
    """The error message of a worker's answer, or its start."""
    try:
        return str(r.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return r.text[:200]
