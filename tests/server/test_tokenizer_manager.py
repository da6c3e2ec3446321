"""TokenizerManager without a scheduler: a submit that fails leaves nothing registered, rids are
scoped to their caller, and one request's bad output fails only that request."""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest

from radixrt.core import SamplingParams
from radixrt.core.config import ServerConfig
from radixrt.core.messages import (
    AbortReqMsg,
    BatchTokenOutMsg,
    ControlErrorMsg,
    FinishMsg,
    GenerateReqMsg,
    ReadyMsg,
    ReqOutMsg,
    ToSchedulerMsg,
)
from radixrt.serve.http.metrics import NoMetrics
from radixrt.serve.http.scheduler_queries import SchedulerQueryError
from radixrt.serve.http.tokenizer_manager import (
    QueueFullError,
    SchedulerDeadError,
    SchedulerUnavailableError,
    TokenizerManager,
)


class FakeClient:
    """Records what would go to the scheduler; the send after `fail_after` messages fails."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.sent: list[object] = []
        self.fail_after = fail_after
        self.beat = time.monotonic()  # when the fake scheduler loop last ran
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(GenerateReqMsg | AbortReqMsg)

    def encode(self, msg: object) -> bytes:
        return self._encoder.encode(msg)

    def send_encoded(self, buf: bytes) -> None:
        if self.fail_after is not None and len(self.sent) == self.fail_after:
            self.fail_after = None
            raise OSError("socket gone")
        self.sent.append(self._decoder.decode(buf))

    def send(self, msg: object) -> None:
        self.send_encoded(self.encode(msg))

    def last_beat(self) -> float:
        return self.beat


class FakeTokenizer:
    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(97 + i % 26) for i in ids)


def make_tm(client: FakeClient, max_queued: int = 8, stall_s: float = 60.0) -> TokenizerManager:
    ready = ReadyMsg("m", 1000, 0, 512, 100, "cpu", "float32")
    return TokenizerManager(
        client,
        FakeTokenizer(),
        ready,  # type: ignore[arg-type]
        ServerConfig(max_queued_requests=max_queued, scheduler_stall_timeout_s=stall_s),
        NoMetrics(),
    )


def params(**kw: object) -> SamplingParams:
    return SamplingParams.from_dict({"max_new_tokens": 4, **kw})


def run(coro_fn):
    return asyncio.run(coro_fn())


def test_a_value_msgpack_cannot_carry_is_a_value_error_and_leaves_nothing() -> None:
    async def go() -> None:
        client = FakeClient()
        tm = make_tm(client)
        sp = params().replace(seed=10**23)  # past validation: what a bug upstream could let through
        with pytest.raises(ValueError, match="cannot be sent"):
            tm.submit([[1, 2]], [sp], None)
        assert not tm.states and not tm.groups and not client.sent

    run(go)


def test_a_send_that_fails_midway_unregisters_and_aborts_what_went_out() -> None:
    async def go() -> None:
        client = FakeClient(fail_after=2)
        tm = make_tm(client)
        with pytest.raises(OSError):
            tm.submit([[1], [2], [3]], [params()] * 3, None)
        assert not tm.states and not tm.groups
        sent = [m for m in client.sent if isinstance(m, GenerateReqMsg)]
        aborted = {m.rid for m in client.sent if isinstance(m, AbortReqMsg)}
        assert len(sent) == 2 and aborted == {m.rid for m in sent}
        for _ in range(8):  # the queue bound sees nothing left behind
            tm.submit([[1]], [params()], None)
        with pytest.raises(QueueFullError):
            tm.submit([[1]], [params()], None)

    run(go)


def test_rids_are_scoped_to_their_caller() -> None:
    async def go() -> None:
        client = FakeClient()
        tm = make_tm(client)
        (a,) = tm.submit([[1]], [params()], ["job"], caller="alice")
        with pytest.raises(ValueError, match="already in use"):
            tm.submit([[1]], [params()], ["job"], caller="alice")
        (b,) = tm.submit([[1]], [params()], ["job"], caller="bob")
        assert a.out.rid != b.out.rid and "job" not in (a.out.rid, b.out.rid)
        tm.abort_rid("job", caller="mallory")
        tm.abort_rid("nothing", caller="bob")
        assert not [m for m in client.sent if isinstance(m, AbortReqMsg)]
        tm.abort_rid("job", caller="bob")
        assert [m.rid for m in client.sent if isinstance(m, AbortReqMsg)] == [b.out.rid]
        many = tm.submit([[1]], [params(n=3, seed=5)], ["n"], caller="alice")
        assert [s.visible_id for s in many] == ["n-0", "n-1", "n-2"]
        assert [s.out.sampling_params.seed for s in many] == [5, 6, 7]

    run(go)


def test_a_bad_output_fails_only_its_request() -> None:
    async def go() -> None:
        client = FakeClient()
        tm = make_tm(client)
        bad, good = tm.submit([[1], [2]], [params(), params()], None)
        tm._on_outputs(
            BatchTokenOutMsg(
                [
                    ReqOutMsg(bad.out.rid, [5], [], [], FinishMsg("no-such-kind"), 0),
                    ReqOutMsg(good.out.rid, [6, 7], [], [], FinishMsg("length"), 0),
                ],
                0,
                0,
            )
        )
        assert bad.out.finish_reason.status_code == 500
        assert good.result()["meta_info"]["finish_reason"] == {"type": "length"}
        assert not tm.states and not tm.groups
        assert AbortReqMsg(bad.out.rid) in client.sent

    run(go)


def test_a_question_the_scheduler_could_not_answer_raises_for_its_asker() -> None:
    async def go() -> None:
        client = FakeClient()
        client._decoder = msgspec.msgpack.Decoder(ToSchedulerMsg)
        tm = make_tm(client)
        flush = asyncio.ensure_future(tm.flush_cache(disk=True))
        await asyncio.sleep(0)
        (asked,) = client.sent
        tm.resolve(ControlErrorMsg(asked.reply_id, "PermissionError: denied"))
        with pytest.raises(SchedulerQueryError, match="PermissionError: denied"):
            await flush
        assert tm.dead_reason is None  # the scheduler lives on

    run(go)


def test_a_wedged_scheduler_fails_what_waits_and_refuses_until_it_beats_again(caplog) -> None:
    async def go() -> None:
        client = FakeClient()
        tm = make_tm(client, stall_s=0.2)
        (state,) = tm.submit([[1, 2]], [params()], None)
        assert tm.stall_reason is None
        await asyncio.sleep(0.3)  # no beat meanwhile: the loop is wedged
        reason = tm.stall_reason
        assert reason is not None and "--scheduler-stall-timeout-s 0.2" in reason
        tm._fail_stalled(reason)
        with pytest.raises(SchedulerDeadError, match="not made progress"):
            state.result()
        assert state.event.is_set() and not tm.states and not tm.groups
        assert AbortReqMsg(state.out.rid) in client.sent  # frees its slots if it ever runs
        with pytest.raises(SchedulerUnavailableError, match="not made progress"):
            tm.submit([[3]], [params()], None)
        client.beat = time.monotonic()
        assert tm.stall_reason is None and tm.dead_reason is None
        tm.submit([[3]], [params()], None)

    with caplog.at_level("WARNING", logger="radixrt"):
        run(go)
    assert "has not run for" in caplog.text and "runs again after a stall" in caplog.text
