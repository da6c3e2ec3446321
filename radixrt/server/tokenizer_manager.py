"""TokenizerManager: the HTTP process's view of every request in flight.

It sends GenerateReqMsg / AbortReqMsg to the scheduler, applies each BatchTokenOutMsg to a
mirror `Req` per request (output ids, logprobs, finish reason), and wakes the handler that
waits on it. When the scheduler process dies every request in flight fails at once.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from radixrt.config import ServerConfig
from radixrt.core import Req, SamplingParams
from radixrt.messages import (
    AbortReqMsg,
    BatchTokenOutMsg,
    FatalErrorMsg,
    FlushCacheReplyMsg,
    FlushCacheReqMsg,
    GenerateReqMsg,
    GetInfoReqMsg,
    InfoReplyMsg,
    ReadyMsg,
    finish_from_msg,
)
from radixrt.server.detokenizer import IncrementalDetokenizer
from radixrt.server.metrics import NoMetrics
from radixrt.server.output import build_result
from radixrt.server.scheduler_client import SchedulerClient

logger = logging.getLogger("radixrt")

_REPLY_TIMEOUT_S = 30.0


class SchedulerDeadError(RuntimeError):
    """The scheduler process is gone; the server answers 503 until it exits."""


class QueueFullError(RuntimeError):
    """More than max_queued_requests would be waiting."""


@dataclass(slots=True, eq=False)
class ReqState:
    """One scheduled request. `event` is shared by all requests of one HTTP call."""

    req: Req
    detok: IncrementalDetokenizer
    event: asyncio.Event
    group: str  # the rid the client knows (and may abort by)
    error: str | None = None

    def result(self) -> dict[str, Any]:
        if self.error is not None:
            raise SchedulerDeadError(self.error)
        return build_result(self.req, self.detok)


class TokenizerManager:
    """Submits requests, routes their outputs, and answers cache and info queries."""

    def __init__(
        self, client: SchedulerClient, tokenizer: Any, ready: ReadyMsg, config: ServerConfig,
        metrics: NoMetrics,
    ) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.ready = ready
        self.config = config
        self.metrics = metrics
        self.states: dict[str, ReqState] = {}
        self.groups: dict[str, list[ReqState]] = {}
        self.num_running = 0  # as last reported by the scheduler
        self.dead_reason: str | None = None
        self._replies: dict[int, asyncio.Future[Any]] = {}
        self._reply_ids = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        self._on_dead: Callable[[str], None] = lambda reason: None

    def start(self, on_dead: Callable[[str], None]) -> None:
        """Start the output loop and the watchdog; `on_dead` runs once if the scheduler dies."""
        self._on_dead = on_dead
        self._tasks = [asyncio.create_task(self._recv_loop()),
                       asyncio.create_task(self._watch())]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def num_queued(self) -> int:
        """Requests sent but not (yet) reported running by the scheduler."""
        return max(0, len(self.states) - self.num_running)

    # ---- requests ------------------------------------------------------------------------

    def submit(
        self, prompts: list[list[int]], params: list[SamplingParams], rids: list[str] | None,
        extra_key: str | None = None, session: str | None = None,
    ) -> list[ReqState]:
        """Send one request per prompt and sample (n each); states come back prompt-major.
        `session` only matters to a dispatcher over several replicas."""
        if self.dead_reason is not None:
            raise SchedulerDeadError(self.dead_reason)
        rids = rids or [uuid.uuid4().hex for _ in prompts]
        num_new = sum(p.n for p in params)
        if self.num_queued + num_new > self.config.max_queued_requests:
            raise QueueFullError(
                f"too many requests waiting ({self.num_queued}); "
                f"max_queued_requests is {self.config.max_queued_requests}"
            )
        sub_rids = [[rid] if sp.n == 1 else [f"{rid}-{i}" for i in range(sp.n)]
                    for rid, sp in zip(rids, params, strict=True)]
        flat = [r for subs in sub_rids for r in subs]
        taken = [r for r in [*rids, *flat] if r in self.groups or r in self.states]
        if taken:
            raise ValueError(f"rid {taken[0]!r} is already in use")
        if len(set(flat)) != len(flat):
            raise ValueError("the rids of one request must be distinct")
        event = asyncio.Event()
        states: list[ReqState] = []
        for ids, sp, rid, subs in zip(prompts, params, rids, sub_rids, strict=True):
            group: list[ReqState] = []
            for i, sub_rid in enumerate(subs):
                sub = sp if sp.n == 1 else SamplingParams.from_dict(
                    {**sp.to_dict(), "n": 1, "seed": None if sp.seed is None else sp.seed + i})
                req = Req(sub_rid, ids, sub, extra_key=extra_key, arrival_time=time.monotonic())
                detok = IncrementalDetokenizer(self.tokenizer, sub.skip_special_tokens, sub.stop)
                group.append(ReqState(req, detok, event, rid))
            self.groups[rid] = group
            states.extend(group)
        for state in states:
            self.states[state.req.rid] = state
            req = state.req
            self.client.send(GenerateReqMsg(req.rid, req.input_ids, req.sampling_params.to_dict(),
                                            req.extra_key))
        return states

    def abort(self, states: list[ReqState]) -> None:
        """Abort the unfinished ones (the client went away); their outputs are dropped."""
        for state in states:
            if self.states.pop(state.req.rid, None) is not None:
                self._drop_from_group(state)
                if self.dead_reason is None:
                    self.client.send(AbortReqMsg(state.req.rid))

    def abort_rid(self, rid: str) -> bool:
        """Abort the requests a client submitted as `rid` (exact match); False if none run."""
        group = self.groups.get(rid)
        if not group:
            return False
        for state in group:
            self.client.send(AbortReqMsg(state.req.rid))  # the finish comes back as usual
        return True

    def abort_all(self) -> None:
        """Abort every request in flight; each still gets its (abort) finish as usual."""
        for rid in list(self.states):
            self.client.send(AbortReqMsg(rid))

    async def flush_cache(self) -> bool:
        reply = await self._ask(FlushCacheReqMsg)
        return bool(reply.success)

    async def get_info(self) -> InfoReplyMsg:
        return await self._ask(GetInfoReqMsg)

    # ---- scheduler side ------------------------------------------------------------------

    async def _ask(self, msg_cls: Any) -> Any:
        if self.dead_reason is not None:
            raise SchedulerDeadError(self.dead_reason)
        reply_id = next(self._reply_ids)
        future = asyncio.get_running_loop().create_future()
        self._replies[reply_id] = future
        self.client.send(msg_cls(reply_id))
        try:
            return await asyncio.wait_for(future, _REPLY_TIMEOUT_S)
        finally:
            self._replies.pop(reply_id, None)

    async def _recv_loop(self) -> None:
        while True:
            msg = await self.client.recv()
            try:
                if isinstance(msg, BatchTokenOutMsg):
                    self._on_outputs(msg)
                elif isinstance(msg, (InfoReplyMsg, FlushCacheReplyMsg)):
                    future = self._replies.get(msg.reply_id)
                    if future is not None and not future.done():
                        future.set_result(msg)
                elif isinstance(msg, FatalErrorMsg):
                    self._die(f"the scheduler failed: {msg.message.strip().splitlines()[-1]}")
            except Exception:  # a bug here must not stop the loop for everyone else
                logger.exception("could not apply a scheduler message")

    async def _watch(self) -> None:
        rc = await self.client.wait_exit()
        self._die(f"the scheduler process exited with status {rc}")

    def _on_outputs(self, msg: BatchTokenOutMsg) -> None:
        self.num_running = msg.num_running
        now = time.monotonic()
        for out in msg.outputs:
            state = self.states.get(out.rid)
            if state is None:  # aborted by a client that went away
                continue
            req = state.req
            if out.new_ids and not req.output_ids:
                self.metrics.observe_first_token(now - req.arrival_time)
            req.output_ids.extend(out.new_ids)
            req.output_logprobs.extend(out.new_logprobs)
            req.output_top_logprobs.extend(out.new_top_logprobs)
            req.cached_tokens = out.cached_tokens
            if out.finish is not None:
                req.input_logprobs = list(out.input_logprobs)
                req.input_top_logprobs = list(out.input_top_logprobs)
                req.finish_reason = finish_from_msg(out.finish)
                del self.states[out.rid]
                self._drop_from_group(state)
                self.metrics.observe_finished(req, now - req.arrival_time)
            state.event.set()

    def _drop_from_group(self, state: ReqState) -> None:
        group = self.groups.get(state.group)
        if group is not None and state in group:
            group.remove(state)
            if not group:
                del self.groups[state.group]

    def _die(self, reason: str) -> None:
        if self.dead_reason is not None:
            return
        logger.error("%s; failing %d requests and shutting down", reason, len(self.states))
        self.dead_reason = reason
        for state in self.states.values():
            state.error = reason
            state.event.set()
        self.states.clear()
        self.groups.clear()
        for future in self._replies.values():
            if not future.done():
                future.set_exception(SchedulerDeadError(reason))
        self._on_dead(reason)
