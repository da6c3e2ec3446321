"""The scheduler's answers to the control questions its clients ask (flush, info, explain,
cache summary, pin): one reply message each, built on the loop's thread. An answer may raise;
the loop (loop.py) then replies ControlErrorMsg and goes on."""

from __future__ import annotations

import dataclasses

from radixrt.core.messages import (
    CacheSummaryReplyMsg,
    CacheSummaryReqMsg,
    ExplainReplyMsg,
    ExplainReqMsg,
    FlushCacheReplyMsg,
    FlushCacheReqMsg,
    FromSchedulerMsg,
    GetInfoReqMsg,
    InfoReplyMsg,
    MissMsg,
    PinUpdateReplyMsg,
    PinUpdateReqMsg,
    SubtreeMsg,
)
from radixrt.scheduler.misses import Miss
from radixrt.scheduler.scheduler import Scheduler

ControlMsg = FlushCacheReqMsg | GetInfoReqMsg | ExplainReqMsg | CacheSummaryReqMsg | PinUpdateReqMsg
CONTROL_MSGS = (FlushCacheReqMsg, GetInfoReqMsg, ExplainReqMsg, CacheSummaryReqMsg,
                PinUpdateReqMsg)  # fmt: skip


def answer(msg: ControlMsg, sched: Scheduler) -> FromSchedulerMsg:
    """The reply to a control question (may raise: the loop answers ControlErrorMsg)."""
    if isinstance(msg, FlushCacheReqMsg):
        cleared = sched.flush_cache(msg.disk)
        return FlushCacheReplyMsg(msg.reply_id, cleared is not None, cleared or [])
    if isinstance(msg, GetInfoReqMsg):
        return InfoReplyMsg(reply_id=msg.reply_id, **sched.info())
    if isinstance(msg, ExplainReqMsg):
        why = sched.explain(msg.input_ids, msg.extra_key, msg.own_prefix)
        return ExplainReplyMsg(msg.reply_id, **dataclasses.asdict(why))
    if isinstance(msg, CacheSummaryReqMsg):
        return _summary_reply(msg, sched)
    found = sched.update_pin(msg.pin_id, msg.expire_at)
    return PinUpdateReplyMsg(msg.reply_id, found)


def _summary_reply(msg: CacheSummaryReqMsg, sched: Scheduler) -> CacheSummaryReplyMsg:
    tree, misses = sched.tree_summary(msg.max_rows), sched.misses
    return CacheSummaryReplyMsg(
        msg.reply_id,
        tree.num_nodes,
        tree.walked_nodes,
        tree.truncated,
        [SubtreeMsg(**dataclasses.asdict(row)) for row in tree.subtrees],
        misses.num_misses,
        dict(misses.by_cause),
        [_miss_msg(m) for m in misses.recent],
    )


def _miss_msg(m: Miss) -> MissMsg:
    w = m.why
    return MissMsg(
        m.at, m.extra_key, m.prompt_tokens, m.cached_tokens, w.cause, w.matched_tokens,
        w.divergence, list(w.cached_next), w.evicted_at, w.other_namespace_tokens,
        m.context_start, m.context_ids,
    )  # fmt: skip
