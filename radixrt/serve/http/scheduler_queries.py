"""SchedulerQueries: the control questions the HTTP process asks its scheduler, each one
message out and one reply back, matched by a reply id (info, flush, pins, explain, summary).

The TokenizerManager builds on it: its receive loop hands every reply to `resolve`, and when
the scheduler dies `fail_all` fails every question still waiting."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from radixrt.core.messages import (
    CacheSummaryReplyMsg,
    CacheSummaryReqMsg,
    ControlErrorMsg,
    ExplainReplyMsg,
    ExplainReqMsg,
    FlushCacheReplyMsg,
    FlushCacheReqMsg,
    GetInfoReqMsg,
    InfoReplyMsg,
    PinUpdateReplyMsg,
    PinUpdateReqMsg,
)
from radixrt.serve.http.req_state import SchedulerDeadError
from radixrt.serve.http.scheduler_client import SchedulerClient

REPLY_TIMEOUT_S = 30.0
REPLIES = (
    InfoReplyMsg,
    FlushCacheReplyMsg,
    ExplainReplyMsg,
    CacheSummaryReplyMsg,
    PinUpdateReplyMsg,
    ControlErrorMsg,
)


class SchedulerQueryError(RuntimeError):
    """The scheduler could not answer a question (it raised, and lives on): a 500."""


class SchedulerQueries:
    """Questions to the scheduler over `client`; each awaits its reply for up to 30 s."""

    def __init__(self, client: SchedulerClient) -> None:
        self.client = client
        self.dead_reason: str | None = None  # set once the scheduler is gone
        self._replies: dict[int, asyncio.Future[Any]] = {}  # reply id -> the asker's future
        self._reply_ids = itertools.count()

    async def flush_cache(self, disk: bool = False) -> list[str] | None:
        """The tiers cleared ("device", "host", "disk"); None when requests were running."""
        reply = await self._ask(lambda rid: FlushCacheReqMsg(rid, disk))
        return list(reply.tiers) if reply.success else None

    async def get_info(self) -> InfoReplyMsg:
        return await self._ask(GetInfoReqMsg)

    async def update_pin(self, pin_id: str, expire_at: float | None) -> bool:
        """Move pin `pin_id`'s expiry (wall clock) or drop it (None); False if there is none."""
        reply = await self._ask(lambda rid: PinUpdateReqMsg(rid, pin_id, expire_at))
        return bool(reply.found)

    async def explain_cache(
        self, input_ids: list[int], extra_key: str | None, own_prefix: str | None
    ) -> ExplainReplyMsg:
        return await self._ask(lambda rid: ExplainReqMsg(rid, input_ids, extra_key, own_prefix))

    async def cache_summary(self, max_rows: int = 20) -> CacheSummaryReplyMsg:
        """The largest subtrees of the scheduler's tree and its recent misses."""
        return await self._ask(lambda rid: CacheSummaryReqMsg(rid, max_rows))

    def resolve(self, msg: Any) -> None:
        """Hand a reply (one of REPLIES) to the question waiting for it, if any still is; a
        ControlErrorMsg raises SchedulerQueryError in the asker."""
        future = self._replies.get(msg.reply_id)
        if future is None or future.done():
            return
        if isinstance(msg, ControlErrorMsg):
            future.set_exception(SchedulerQueryError(f"the scheduler failed: {msg.message}"))
        else:
            future.set_result(msg)

    def fail_all(self, reason: str) -> None:
        """Fail every question still waiting (the scheduler is gone)."""
        for future in self._replies.values():
            if not future.done():
                future.set_exception(SchedulerDeadError(reason))

    async def _ask(self, msg_cls: Any) -> Any:
        """Send msg_cls(reply_id) (a message class or a factory of one) and await its reply."""
        if self.dead_reason is not None:
            raise SchedulerDeadError(self.dead_reason)
        reply_id = next(self._reply_ids)
        future = asyncio.get_running_loop().create_future()
        self._replies[reply_id] = future
        self.client.send(msg_cls(reply_id))
        try:
            return await asyncio.wait_for(future, REPLY_TIMEOUT_S)
        finally:
            self._replies.pop(reply_id, None)
