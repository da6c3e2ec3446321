"""A control question that raises in the scheduler (a flush whose disk tier is denied, an info,
explain, summary or pin update that breaks) gets ControlErrorMsg; the loop goes on serving,
and the pool ends whole with nothing locked."""

from __future__ import annotations

import queue
import threading

from radixrt.cache.tiers.disk import DiskTier
from radixrt.core import SamplingParams
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.core.messages import (
    BatchTokenOutMsg,
    CacheSummaryReqMsg,
    ControlErrorMsg,
    ExplainReqMsg,
    FlushCacheReqMsg,
    GenerateReqMsg,
    GetInfoReqMsg,
    InfoReplyMsg,
    PinUpdateReqMsg,
    StopMsg,
)
from radixrt.scheduler.builder import build_scheduler
from radixrt.scheduler.loop import SchedulerLoop, ThreadTransport


def _next(got: queue.Queue, kind: type) -> object:
    while True:
        msg = got.get(timeout=60)
        if isinstance(msg, kind):
            return msg


def test_control_questions_that_raise_answer_an_error_and_the_loop_lives(
    tiny_llama_path, tmp_path, monkeypatch
) -> None:
    sched, _ = build_scheduler(
        ModelConfig(model_path=str(tiny_llama_path), context_length=256),
        CacheConfig(max_total_tokens=1024, cache_dir=str(tmp_path / "kv"), tier_block_size=16),
        SchedulerConfig(),
    )

    def denied(self: DiskTier) -> None:
        raise PermissionError(13, "Permission denied", str(self.root))

    def broken(*args: object) -> None:
        raise RuntimeError("broken")

    monkeypatch.setattr(DiskTier, "clear", denied)
    got: queue.Queue = queue.Queue()
    transport = ThreadTransport(got.put)
    loop = SchedulerLoop(sched, transport)
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(loop.run()))
    thread.start()
    try:
        transport.put(FlushCacheReqMsg(1, disk=True))
        error = _next(got, ControlErrorMsg)
        assert error.reply_id == 1 and "PermissionError" in error.message
        for name in ("info", "explain", "tree_summary", "update_pin"):
            monkeypatch.setattr(sched, name, broken)
        for msg in (GetInfoReqMsg(2), ExplainReqMsg(3, [5, 6]), CacheSummaryReqMsg(4),
                    PinUpdateReqMsg(5, "p", 1.0)):  # fmt: skip
            transport.put(msg)
            error = _next(got, ControlErrorMsg)
            assert (error.reply_id, error.message) == (msg.reply_id, "RuntimeError: broken")
        monkeypatch.undo()
        params = SamplingParams(max_new_tokens=2, temperature=0).to_dict()
        transport.put(GenerateReqMsg("r", [5, 6, 7, 8], params))
        while True:  # the loop still serves
            out = _next(got, BatchTokenOutMsg)
            if any(o.rid == "r" and o.finish is not None for o in out.outputs):
                break
        transport.put(GetInfoReqMsg(6))
        assert _next(got, InfoReplyMsg).num_running_reqs == 0
    finally:
        transport.put(StopMsg())
        thread.join(60)
    assert status == [0]
    sched.check_pool_whole()
    sched.kv.cache.check_integrity()
    assert sched.kv.cache.protected_size == 0
