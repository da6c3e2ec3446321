"""Runs batches: each line one in-process call of its route, at most --batch-in-flight lines
at once over all batches (so a batch shares the server with interactive traffic), in file
order; the jobs kept per owner.

A line refused before it started (429: over the tenant's share; 503 with the not-started
mark: the queue is full) is tried again after a pause, until it runs, the batch is canceled
or it expires. Cancel: no line starts after it, and the lines in flight are aborted (their
calls see a disconnect, the pipeline aborts their requests); both end as canceled. Expiry
(24 h after creation): no line starts after it; those in flight finish."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable

from starlette.types import ASGIApp

from radixrt.serve.http.api.batches.in_process import Headers, call_app
from radixrt.serve.http.api.batches.jobs import (
    CANCELED,
    CANCELING,
    ENDED,
    ERRORED,
    EXPIRED,
    SUCCEEDED,
    BatchJob,
    BatchNotFoundError,
    LineResult,
)
from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.web.middleware import NOT_STARTED_HEADER

logger = logging.getLogger("radixrt")
OnEnd = Callable[[BatchJob], None]
_RETRY_FIRST_S, _RETRY_MOST_S = 0.05, 2.0
_CLIENT_GONE = 499  # the pipeline's answer to a call whose client went away


class BatchRunner:
    def __init__(
        self, app: ASGIApp, in_flight: int, max_per_owner: int, max_bytes_per_owner: int
    ) -> None:
        self.app = app
        self.max_per_owner = max_per_owner
        self.max_bytes_per_owner = max_bytes_per_owner
        self._slots = asyncio.Semaphore(in_flight)
        self._jobs: dict[str, OrderedDict[str, BatchJob]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # kept until done

    def start(
        self,
        job: BatchJob,
        headers: Headers,
        client: tuple[str, int] | None,
        on_end: OnEnd | None = None,
    ) -> None:
        """Keep `job` and run its lines as the caller whose `headers` and `client` they are.
        Once every line has its result, `on_end(job)` writes them elsewhere and the job keeps
        their outcomes only (without `on_end` it keeps them whole). Past either of the owner's
        bounds (jobs; bytes held: lines and kept results) the oldest ended jobs are forgotten
        first; when that is not enough, a 400."""
        mine = self._jobs.setdefault(job.owner, OrderedDict())
        size = job.held

        def over() -> bool:
            held = sum(j.held for j in mine.values())
            return len(mine) >= self.max_per_owner or held + size > self.max_bytes_per_owner

        while over():
            oldest = next((j for j in mine.values() if j.status == ENDED), None)
            if oldest is None:
                raise BadRequestError(
                    f"this tenant's {len(mine)} batches in progress hold what it may keep "
                    f"(--max-stored-batches {self.max_per_owner}, --max-stored-file-bytes "
                    f"{self.max_bytes_per_owner}; this one holds {size} bytes): cancel one or "
                    "wait for one to end"
                )
            del mine[oldest.id]
        mine[job.id] = job
        if not job.lines:  # (one that failed its checks): ended as made
            self._end(job, on_end)
            return
        task = asyncio.get_running_loop().create_task(self._run(job, headers, client, on_end))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def get(self, owner: str, job_id: str, kind: str) -> BatchJob:
        mine = self._jobs.get(owner)
        job = None if mine is None else mine.get(job_id)
        if job is None or not job_id.startswith(kind):
            raise BatchNotFoundError(f"no batch with id {job_id!r}")
        return job

    def jobs(self, owner: str, kind: str) -> list[BatchJob]:
        """The owner's jobs whose ids start with `kind`, newest first."""
        return [j for j in reversed(self._jobs.get(owner, {}).values()) if j.id.startswith(kind)]

    def cancel(self, job: BatchJob) -> None:
        """Start no more of its lines and abort those in flight (their results come as they
        end: the job is ENDED once every line has one)."""
        if job.status == ENDED or job.gone.is_set():
            return
        job.status, job.cancel_at = CANCELING, time.time()
        job.gone.set()

    def forget(self, job: BatchJob, cancel: bool = False) -> None:
        """Drop a job (its results with it): an ended one, or with `cancel` any (one still
        running is canceled; its lines end as they would, unseen)."""
        if cancel:
            self.cancel(job)
        elif job.status != ENDED:
            raise BadRequestError(f"batch {job.id} has not ended: cancel it first")
        mine = self._jobs.get(job.owner)
        if mine is not None:
            mine.pop(job.id, None)

    async def _run(
        self,
        job: BatchJob,
        headers: Headers,
        client: tuple[str, int] | None,
        on_end: OnEnd | None,
    ) -> None:
        in_flight: set[asyncio.Task[None]] = set()
        try:
            for index in range(len(job.lines)):
                if not await self._take_slot(job):
                    break
                slot = [True]  # whether the line holds its slot (not while it waits to retry)
                task = asyncio.create_task(self._line(job, index, headers, client, slot))
                in_flight.add(task)
                task.add_done_callback(functools.partial(self._give_back, slot))
            await asyncio.gather(*in_flight, return_exceptions=True)
        finally:
            self._end(job, on_end)

    @staticmethod
    def _end(job: BatchJob, on_end: OnEnd | None) -> None:
        """Lines without a result never started: canceled, or expired."""
        late = EXPIRED if not job.gone.is_set() else CANCELED
        for index, result in enumerate(job.results):
            if result is None:
                job.record(index, LineResult(late, 0, b"", ""))
        job.status, job.ended_at = ENDED, time.time()
        try:
            if on_end is not None:
                on_end(job)
        except Exception:
            logger.exception("batch %s: writing its results failed", job.id)
        job.shed(results=on_end is not None)
        job.ended.set()

    async def _take_slot(self, job: BatchJob) -> bool:
        """Wait for an in-flight slot: True once taken; False when the job is canceled or has
        expired first (no slot taken)."""
        take = asyncio.ensure_future(self._slots.acquire())
        gone = asyncio.ensure_future(job.gone.wait())
        try:
            await asyncio.wait(
                (take, gone),
                timeout=max(0.0, job.expires_at - time.time()),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            gone.cancel()
            if not take.done():
                take.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await take  # (an acquire that completed while being cancelled still holds one)
        if take.cancelled():
            return False
        if job.gone.is_set() or time.time() >= job.expires_at:
            self._slots.release()
            return False
        return True

    def _give_back(self, slot: list[bool], _: object = None) -> None:
        if slot[0]:
            slot[0] = False
            self._slots.release()

    async def _line(
        self,
        job: BatchJob,
        index: int,
        headers: Headers,
        client: tuple[str, int] | None,
        slot: list[bool],
    ) -> None:
        """Run line `index` holding `slot` (a refused line gives it back while it waits, so
        lines of others run meanwhile, and takes one again to retry)."""
        line, request_id = job.lines[index], "req_" + uuid.uuid4().hex
        pause = _RETRY_FIRST_S
        while True:
            if job.gone.is_set() or time.time() >= job.expires_at:
                late = CANCELED if job.gone.is_set() else EXPIRED
                job.record(index, LineResult(late, 0, b"", request_id))
                return
            try:
                status, answer_headers, body = await call_app(
                    self.app, line.path, line.body, headers, client, job.gone
                )
            except Exception:  # the route failed past its error handlers: a 500 of the line
                logger.exception("batch %s line %d failed", job.id, index)
                body = b'{"error":{"message":"internal error","type":"InternalServerError"}}'
                job.record(index, LineResult(ERRORED, 500, body, request_id))
                return
            refused = status == 429 or (status == 503 and NOT_STARTED_HEADER in answer_headers)
            if not refused:
                break
            self._give_back(slot)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(job.gone.wait(), pause)
            pause = min(2 * pause, _RETRY_MOST_S)
            slot[0] = await self._take_slot(job)
            if not slot[0]:  # canceled or expired while waiting: the loop's top records it
                continue
        if status == _CLIENT_GONE and job.gone.is_set():
            job.record(index, LineResult(CANCELED, 0, b"", request_id))
        else:
            outcome = SUCCEEDED if status == 200 else ERRORED
            job.record(index, LineResult(outcome, status, body, request_id))
