"""The HTTP process checks each constrained request's grammar before it is queued, so a bad spec
is a 400 and never reaches the scheduler. Compiles run in worker processes (grammar/worker.py)
that are killed at the time limit; every verdict is remembered, so no spec is compiled twice.
Each tenant may have started at most `max_pending_per_tenant` of the pending compiles, so one
tenant's slow specs cannot take every slot from the others."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sys
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from radixrt.core import SamplingParams
from radixrt.core.config import SchedulerConfig, ServerConfig
from radixrt.core.messages import ReadyMsg
from radixrt.grammar.base import GrammarBusyError, GrammarSpec
from radixrt.grammar.worker import WorkerArgs
from radixrt.grammar.worker_slot import GrammarWorkerError, WorkerDied, WorkerSlot, retrieve
from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tenancy import TooManyRequestsError

NUM_WORKERS = 2
CACHE_SIZE = 1024  # verdicts kept, least recently used dropped first
# `warm_when_quiet`: the warm worker starts once no request has been in flight for QUIET_S
# (polled every QUIET_POLL_S).
QUIET_S = 1.0
QUIET_POLL_S = 0.25

logger = logging.getLogger("radixrt")

__all__ = ["GrammarBusyError", "GrammarChecker", "GrammarWorkerError"]


class GrammarChecker:
    """Owns this process's grammar workers (started on first use or by `start`) and the verdict
    cache. All methods run on one event loop."""

    def __init__(
        self,
        config: SchedulerConfig,
        tokenizer: Any,
        ready: ReadyMsg,
        *,
        max_pending: int = ServerConfig.max_pending_grammars,
        max_pending_per_tenant: int = ServerConfig.max_pending_grammars_per_tenant,
        max_grammar_bytes: int = ServerConfig.max_grammar_bytes,
    ) -> None:
        self.timeout_s = config.grammar_timeout_s
        self.max_pending = max_pending
        self.max_pending_per_tenant = max_pending_per_tenant
        self.max_grammar_bytes = max_grammar_bytes
        self._args = (config, tokenizer, ready)
        self._workers: list[WorkerSlot] = []  # made on first use: building argv reads the model
        self._idle: list[WorkerSlot] = []  # workers no check holds
        self._freed = asyncio.Event()  # set whenever a worker goes back to _idle
        # spec digest -> None (compiles in time) or the refusal; digests keep big specs small.
        self._verdicts: OrderedDict[bytes, str | None] = OrderedDict()
        self._pending: dict[bytes, asyncio.Task[str | None]] = {}  # queued or on a worker
        self._started_by: dict[str, int] = {}  # tenant -> its pending compiles (it started)

    def start(self) -> None:
        """Start one worker in the background (call on the event loop, e.g. at server start-up),
        so the first constrained request does not wait seconds for it."""
        self._pool()[0].start()

    async def warm_when_quiet(self, busy: Callable[[], bool]) -> None:
        """`start` once `busy()` (requests in flight) has been false for QUIET_S. A worker's
        start costs about 3 CPU-seconds (tokenizer, backend); started with the server, it ran
        beside the first requests served and, niced as it is, still took a third of a 2-core
        machine's throughput from them (the OpenMP steps wait for a core it holds). A
        constrained request that comes first starts a worker itself."""
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while True:
            await asyncio.sleep(QUIET_POLL_S)
            if busy():
                quiet_since = loop.time()
            elif loop.time() - quiet_since >= QUIET_S:
                try:
                    self.start()
                except GrammarWorkerError:  # closed meanwhile: the server is stopping
                    pass
                return

    async def check(self, params: list[SamplingParams], tenant: str | None = None) -> None:
        """Check every distinct spec in `params`; BadRequestError with the backend's message (or
        the size or time limit) for the first that fails, GrammarBusyError when `max_pending`
        checks are already queued or running, TooManyRequestsError when `tenant` (None: the
        server has no tenants) already started its share of them, GrammarWorkerError if no
        worker can start."""
        found = (GrammarSpec.from_params(p) for p in params)
        specs = list(dict.fromkeys(s for s in found if s is not None))
        digests = [self._digest(spec) for spec in specs]  # size-checks all before compiling any
        for spec, digest in zip(specs, digests):
            error = await self._verdict(spec, digest, tenant)
            if error is not None:
                raise BadRequestError(error)

    @property
    def pids(self) -> list[int]:
        """Process ids of the running workers."""
        return [pid for w in self._workers if (pid := w.pid) is not None]

    def close(self) -> None:
        """Stop the workers (on the event loop); checks in progress and later fail with
        GrammarWorkerError, cached verdicts are still answered."""
        for worker in self._workers:
            worker.close()

    def _digest(self, spec: GrammarSpec) -> bytes:
        """The cache key of `spec`; BadRequestError if it is over the size limit."""
        try:
            text = spec.text.encode()
        except UnicodeEncodeError:
            raise BadRequestError(f"the {spec.kind} is not valid UTF-8") from None
        if len(text) > self.max_grammar_bytes:
            raise BadRequestError(
                f"the {spec.kind} is {len(text)} bytes; at most {self.max_grammar_bytes} are "
                "allowed (--max-grammar-bytes)"
            )
        return hashlib.blake2b(spec.kind.encode() + b"\0" + text, digest_size=16).digest()

    async def _verdict(self, spec: GrammarSpec, digest: bytes, tenant: str | None) -> str | None:
        if digest in self._verdicts:
            self._verdicts.move_to_end(digest)
            return self._verdicts[digest]
        fut = self._pending.get(digest)  # the same spec already queued: share its verdict
        if fut is None:
            started = self._started_by.get(tenant, 0) if tenant is not None else 0
            if started >= self.max_pending_per_tenant:
                raise TooManyRequestsError(
                    f"this tenant has {started} grammars waiting to compile; the limit is "
                    f"{self.max_pending_per_tenant} (--max-pending-grammars-per-tenant)"
                )
            if len(self._pending) >= self.max_pending:
                raise GrammarBusyError(
                    f"{len(self._pending)} grammars are already waiting to compile "
                    "(--max-pending-grammars); try again later"
                )
            fut = asyncio.create_task(self._compile(spec, digest, tenant))
            fut.add_done_callback(retrieve)
            self._pending[digest] = fut
            if tenant is not None:
                self._started_by[tenant] = started + 1
        # Shielded: a caller that goes away does not cancel a compile that others may share.
        return await asyncio.shield(fut)

    async def _compile(self, spec: GrammarSpec, digest: bytes, tenant: str | None) -> str | None:
        try:
            try:
                error = await self._run(spec)
            except WorkerDied as e:
                # An outside kill is not the spec's fault: try once more on the replacement.
                logger.warning("%s; checking it again on a new worker", e)
                try:
                    error = await self._run(spec)
                except WorkerDied as e2:
                    error = str(e2)  # twice: the spec kills workers, so it is refused
        finally:
            del self._pending[digest]
            if tenant is not None:
                self._started_by[tenant] -= 1
                if not self._started_by[tenant]:
                    del self._started_by[tenant]
        self._verdicts[digest] = error
        while len(self._verdicts) > CACHE_SIZE:
            self._verdicts.popitem(last=False)
        return error

    async def _run(self, spec: GrammarSpec) -> str | None:
        """Check `spec` on the first worker that is both free and up (the time limit starts
        there). Free slots that are not up are started meanwhile, so a check waits for a cold
        start only when no running worker frees up first."""
        self._pool()
        while (worker := next((w for w in self._idle if w.rank == 0), None)) is None:
            self._freed.clear()
            starts = [asyncio.ensure_future(w.wait_ready()) for w in self._idle]
            freed = asyncio.ensure_future(self._freed.wait())
            try:
                await asyncio.wait([freed, *starts], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (freed, *starts):
                    task.cancel()  # a start itself goes on: wait_ready only waits for it
            for task in starts:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]  # cannot start: 500
        self._idle.remove(worker)
        try:
            return await worker.compile(spec, self.timeout_s)
        finally:
            self._idle.append(worker)
            self._freed.set()

    def _pool(self) -> list[WorkerSlot]:
        if not self._workers:
            from radixrt.model.families.loader import eos_token_ids

            config, tokenizer, ready = self._args
            args = WorkerArgs(
                model_path=ready.model_path,
                backend=config.grammar_backend,
                vocab_size=ready.vocab_size,
                eos_token_ids=eos_token_ids(Path(ready.model_path), tokenizer),
                log_level=logging.getLevelName(logger.getEffectiveLevel()).lower(),
                branch_cache_bytes=config.grammar_branch_cache_mb * 2**20,
            )
            argv = [
                sys.executable,
                "-m",
                "radixrt.grammar.worker",
                msgspec.json.encode(args).decode(),
            ]
            self._workers = [WorkerSlot(argv) for _ in range(NUM_WORKERS)]
            self._idle = list(self._workers)
        return self._workers
