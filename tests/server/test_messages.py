"""Typed messages round-trip through msgpack; the scheduler loop survives bad requests and
reports a failing step, without a model (a fake scheduler behind real ZMQ sockets)."""

from __future__ import annotations

import os
import threading
from types import SimpleNamespace

import msgspec
import zmq

from radixrt.core import FinishKind, FinishReason, Req, SamplingParams
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.core.messages import (
    AbortReqMsg,
    BatchTokenOutMsg,
    CacheSummaryReplyMsg,
    CacheSummaryReqMsg,
    FatalErrorMsg,
    FinishMsg,
    FlushCacheReplyMsg,
    FlushCacheReqMsg,
    FromSchedulerMsg,
    GenerateReqMsg,
    GetInfoReqMsg,
    InfoReplyMsg,
    MissMsg,
    ReadyMsg,
    ReqOutMsg,
    SchedulerArgsMsg,
    SubtreeMsg,
    ToSchedulerMsg,
    finish_from_msg,
    finish_to_msg,
)
from radixrt.scheduler.loop import SchedulerLoop
from radixrt.scheduler.process import ZmqTransport
from radixrt.scheduler.scheduler import SchedulerStats


def test_messages_round_trip() -> None:
    enc = msgspec.msgpack.Encoder()
    to_sched = msgspec.msgpack.Decoder(ToSchedulerMsg)
    for msg in [
        GenerateReqMsg("a", [1, 2], SamplingParams(temperature=0.0, stop=["x"]), "ns"),
        AbortReqMsg("a"),
        FlushCacheReqMsg(3),
        GetInfoReqMsg(4),
        CacheSummaryReqMsg(5, max_rows=3),
    ]:
        assert to_sched.decode(enc.encode(msg)) == msg
    from_sched = msgspec.msgpack.Decoder(FromSchedulerMsg)
    out = ReqOutMsg(
        "a",
        [5],
        [-0.5],
        [[(-0.5, 5), (-1.0, 6)]],
        FinishMsg("stop", 2),
        3,
        [None, -1.5],
        [None, [(-1.5, 9)]],
    )
    for msg in [
        BatchTokenOutMsg([out], 1, 0),
        ReadyMsg("/m", 10, 100, 8, 50, "cpu", "float32"),
        ReadyMsg("/m", 10, 100, 8, 50, "cpu", "float32", 6, 5),  # with a window pool
        InfoReplyMsg(1, 10, 5, 3, 2, 0, 0, 7, 3, 9, 0.4, 4, 0),
        FlushCacheReplyMsg(2, True),
        CacheSummaryReplyMsg(
            5,
            9,
            9,
            False,
            [SubtreeMsg("ns", 1, 0, 40, 3, 2, 1.5, 0, 8, [1, 2, 3])],
            4,
            {"diverged": 1},
            [MissMsg(1.0, None, 60, 9, "diverged", 9, 9, [5, 6], None, 0, 0, [1, 2])],
        ),
        FatalErrorMsg("boom"),
    ]:
        assert from_sched.decode(enc.encode(msg)) == msg
    args = SchedulerArgsMsg(
        ModelConfig(context_length=64),
        CacheConfig(max_total_tokens=99),
        SchedulerConfig(schedule_policy="fcfs"),
        "ipc://a",
        "ipc://b",
        1,
    )
    assert msgspec.json.decode(msgspec.json.encode(args), type=SchedulerArgsMsg) == args


def test_finish_reason_survives_the_trip() -> None:
    for reason in [
        FinishReason(FinishKind.STOP, matched=2),
        FinishReason(FinishKind.LENGTH),
        FinishReason(FinishKind.ABORT, message="no"),
        FinishReason(FinishKind.STOP, matched="###"),
    ]:
        assert finish_from_msg(finish_to_msg(reason)) == reason
    assert finish_to_msg(None) is None


class FakeScheduler:
    """One token (id 7) per step per running request; step number `fail_at` raises."""

    def __init__(self, fail_at: int) -> None:
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.stats = SchedulerStats()
        self.kv = SimpleNamespace(
            allocator=SimpleNamespace(capacity=10, num_free=10),
            cache=SimpleNamespace(evictable_size=0, protected_size=0, reset=lambda: None),
        )
        self.fail_at = fail_at
        self.num_steps = 0

    @property
    def is_idle(self) -> bool:
        return not self.running

    def add_request(self, req: Req) -> None:
        if req.input_ids == [666]:
            raise RuntimeError("cannot queue this one")
        self.running.append(req)

    def abort(self, rid: str) -> Req | None:
        return None

    def step(self) -> list[Req]:
        self.num_steps += 1
        if self.num_steps == self.fail_at:
            raise RuntimeError("step exploded")
        for req in self.running:
            req.output_ids.append(7)
            if len(req.output_ids) >= req.sampling_params.max_new_tokens:
                req.finish(FinishReason(FinishKind.LENGTH))
        touched = list(self.running)
        self.running = [r for r in self.running if not r.is_finished]
        return touched

    def check_pool_whole(self) -> None:
        pass

    def publish_events(self) -> None:
        pass

    def flush_cache(self, disk: bool = False) -> list[str] | None:
        return ["device"] if self.is_idle else None

    def close(self) -> None:
        pass

    def info(self) -> dict:
        return {
            "max_total_tokens": 10,
            "free_tokens": 10,
            "evictable_tokens": 0,
            "protected_tokens": 0,
            "num_running_reqs": len(self.running),
            "num_queued_reqs": 0,
            "prompt_tokens": 0,
            "cached_tokens": 0,
            "generated_tokens": 0,
            "cache_hit_rate": 0.0,
            "forward_passes": 0,
            "retractions": 0,
        }


def test_scheduler_loop_survives_bad_requests_and_reports_a_failed_step() -> None:
    ctx = zmq.Context()
    to_sched, sched_in = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    sched_out, from_sched = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    to_sched.bind("inproc://in")
    sched_in.connect("inproc://in")
    from_sched.bind("inproc://out")
    sched_out.connect("inproc://out")
    enc = msgspec.msgpack.Encoder()
    # Sampling parameters come typed: a message whose parameters do not decode is dropped.
    untyped = {"type": "GenerateReqMsg", "rid": "invalid", "input_ids": [1],
               "sampling_params": {"temperature": "hot"}}  # fmt: skip
    for msg in [
        GenerateReqMsg("good", [1, 2], SamplingParams(max_new_tokens=2)),
        GenerateReqMsg("raises", [666], SamplingParams()),
        untyped,
        GetInfoReqMsg(9),
    ]:
        to_sched.send(enc.encode(msg))
    loop = SchedulerLoop(FakeScheduler(fail_at=4), ZmqTransport(sched_in, sched_out, os.getppid()))
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(loop.run()), daemon=True)
    thread.start()
    thread.join(30)
    try:
        assert result == [1]
        dec = msgspec.msgpack.Decoder(FromSchedulerMsg)
        msgs = []
        while from_sched.poll(100):
            msgs.append(dec.decode(from_sched.recv()))
        outs = [o for m in msgs if isinstance(m, BatchTokenOutMsg) for o in m.outputs]
        good = [o for o in outs if o.rid == "good"]
        assert [t for o in good for t in o.new_ids] == [7, 7]  # incremental: one new id each
        assert good[-1].finish == FinishMsg("length")
        (bad,) = [o for o in outs if o.rid == "raises"]
        assert bad.finish.type == "abort" and "bad request" in bad.finish.message
        assert not [o for o in outs if o.rid == "invalid"]
        assert any(isinstance(m, InfoReplyMsg) and m.reply_id == 9 for m in msgs)
        assert isinstance(msgs[-1], FatalErrorMsg) and "step exploded" in msgs[-1].message
    finally:
        # The context ends here, pass or fail: one left to the garbage collector would block
        # it (sockets open, or still used by the loop's thread) in whichever test came next.
        if not thread.is_alive():
            ctx.destroy(linger=0)
