"""SchedulerLoop: the one loop around a Scheduler (messages in, one step, outputs out), with a
transport to its clients: ZMQ sockets in the server's scheduler process (scheduler/process.py),
a pair of thread queues under the in-process Engine (`ThreadTransport`).

A request that raises while being queued or aborted is finished with an error and the loop
goes on; so does a control question that raises (flush, info, explain, summary, pin): its
asker gets ControlErrorMsg. An exception inside `step()` is fatal: it is reported as
FatalErrorMsg and `run` returns 1 (the pool check after each step catches a control question
that left the pool broken). Outputs are incremental: each request's ReqOutMsg holds what it
gained since the last one it was in.
"""

from __future__ import annotations

import logging
import queue
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable

from radixrt.core import FinishReason, Req, SamplingParams
from radixrt.core.messages import (
    AbortReqMsg,
    BatchTokenOutMsg,
    ControlErrorMsg,
    FatalErrorMsg,
    FromSchedulerMsg,
    GenerateReqMsg,
    ReqOutMsg,
    StopMsg,
    ToSchedulerMsg,
    finish_to_msg,
)
from radixrt.scheduler.control import CONTROL_MSGS, answer
from radixrt.scheduler.scheduler import Scheduler

logger = logging.getLogger("radixrt")

IDLE_WAIT_S = 0.1  # an idle loop waits this long for a message before checking `is_stopped`


class BaseTransport(ABC):
    """Carries messages between a SchedulerLoop (on its own thread) and its clients."""

    @abstractmethod
    def recv(self, timeout_s: float | None) -> list[ToSchedulerMsg]:
        """Every message that has arrived; waits up to `timeout_s` for the first one when
        given, else returns at once (possibly []). Drops (and logs) undecodable ones."""

    @abstractmethod
    def send(self, msg: FromSchedulerMsg) -> None:
        """Deliver `msg`; may raise if it cannot carry it (see `can_carry`)."""

    def can_carry(self, msg: ReqOutMsg) -> bool:
        """Whether `send` can carry a batch holding `msg` (values a wire format cannot
        encode); the loop fails such a request alone."""
        return True

    def is_stopped(self) -> bool:
        """True once the loop should end (its clients are gone)."""
        return False

    def beat(self) -> None:  # noqa: B027 (optional: a transport in one process needs none)
        """Called at the top of every loop iteration: tells the clients the loop still runs
        (scheduler/heartbeat.py); nothing by default."""


class ThreadTransport(BaseTransport):
    """In one process: an inbox queue, and outputs handed to `deliver` on the loop's thread
    (the Engine routes them to its callers). Messages are the structs themselves."""

    def __init__(self, deliver: Callable[[FromSchedulerMsg], None]) -> None:
        self.inbox: queue.Queue[ToSchedulerMsg] = queue.Queue()
        self._deliver = deliver

    def put(self, msg: ToSchedulerMsg) -> None:
        """Called from any thread."""
        self.inbox.put(msg)

    def recv(self, timeout_s: float | None) -> list[ToSchedulerMsg]:
        msgs: list[ToSchedulerMsg] = []
        try:
            msgs.append(self.inbox.get(timeout=timeout_s) if timeout_s else self.inbox.get_nowait())
            while True:
                msgs.append(self.inbox.get_nowait())
        except queue.Empty:
            return msgs

    def send(self, msg: FromSchedulerMsg) -> None:
        self._deliver(msg)


class SchedulerLoop:
    """Receives requests, runs steps, and sends each step's new tokens back."""

    def __init__(self, scheduler: Scheduler, transport: BaseTransport) -> None:
        self.scheduler = scheduler
        self.transport = transport
        self._num_sent: dict[str, int] = {}  # rid -> output tokens already sent
        self._counts = (0, 0)  # (running, waiting) as last reported
        self._stopping = False

    def run(self) -> int:
        """Loop until the transport is stopped or a StopMsg arrives (0), or a step fails (1)."""
        try:
            return self._run()
        finally:
            self.scheduler.close()

    def _run(self) -> int:
        sched = self.scheduler
        while not self._stopping and not self.transport.is_stopped():
            self.transport.beat()
            touched: dict[str, Req] = {}
            for msg in self.transport.recv(IDLE_WAIT_S if sched.is_idle else None):
                self._handle(msg, touched)
            try:
                for req in sched.step():
                    touched[req.rid] = req
                sched.check_pool_whole()
                sched.publish_events()
            except Exception:
                logger.exception("scheduler step failed")
                self.transport.send(FatalErrorMsg(traceback.format_exc()))
                return 1
            self._send_outputs(touched)
        return 0

    # ---- messages in -----------------------------------------------------------------------

    def _handle(self, msg: ToSchedulerMsg, touched: dict[str, Req]) -> None:
        sched = self.scheduler
        if isinstance(msg, GenerateReqMsg):
            self._add(msg, touched)
        elif isinstance(msg, AbortReqMsg):
            try:
                req = sched.abort(msg.rid)
            except Exception:
                logger.exception("abort of request %s failed", msg.rid)
                return
            if req is not None:
                touched[req.rid] = req
        elif isinstance(msg, CONTROL_MSGS):
            try:
                reply = answer(msg, sched)
            except Exception as e:
                logger.exception("%s failed; the scheduler goes on", type(msg).__name__)
                reply = ControlErrorMsg(msg.reply_id, f"{type(e).__name__}: {e}")
            self.transport.send(reply)
        elif isinstance(msg, StopMsg):
            logger.info("stop requested: scheduler stopping")
            self._stopping = True

    def _add(self, msg: GenerateReqMsg, touched: dict[str, Req]) -> None:
        try:
            req = Req(msg.rid, msg.input_ids, msg.sampling_params,
                      extra_key=msg.extra_key, arrival_time=time.monotonic(),
                      pins=list(msg.pins))  # fmt: skip
            self.scheduler.add_request(req)
        except Exception as e:
            logger.exception("request %s rejected", msg.rid)
            req = Req(msg.rid, msg.input_ids, SamplingParams())
            req.finish(FinishReason.error(f"bad request: {e}", 400))
        if req.is_finished:
            touched[req.rid] = req

    # ---- messages out ----------------------------------------------------------------------

    def _send_outputs(self, touched: dict[str, Req]) -> None:
        counts = (len(self.scheduler.running), len(self.scheduler.waiting))
        if not touched and counts == self._counts:
            return
        self._counts = counts
        outputs = [self._req_out(req) for req in touched.values()]
        try:
            self.transport.send(BatchTokenOutMsg(outputs, *counts))
        except Exception:  # one request's output cannot be carried: fail that one alone
            logger.exception("could not send a step's outputs; failing the bad ones")
            outputs = [self._carriable(out) for out in outputs]
            self.transport.send(BatchTokenOutMsg(outputs, *counts))

    def _carriable(self, out: ReqOutMsg) -> ReqOutMsg:
        """`out` if the transport can carry it, else an error finish for its request."""
        if self.transport.can_carry(out):
            return out
        self.scheduler.abort(out.rid)  # releases its slots if it was still running
        self._num_sent.pop(out.rid, None)
        error = FinishReason.error("internal error: its output could not be sent")
        return ReqOutMsg(out.rid, [], [], [], finish_to_msg(error), out.cached_tokens)

    def _req_out(self, req: Req) -> ReqOutMsg:
        sent = self._num_sent.pop(req.rid, 0)
        if not req.is_finished:
            self._num_sent[req.rid] = len(req.output_ids)
        p = req.sampling_params
        out = ReqOutMsg(
            req.rid,
            req.output_ids[sent:],
            [],
            [],
            finish_to_msg(req.finish_reason),
            req.cached_tokens,
        )
        if req.is_finished:
            out.pins = req.pin_outcomes
        if req.spec_drafted:
            out.spec_drafted, out.spec_accepted = req.spec_drafted, req.spec_accepted
            out.spec_steps = req.sampling_steps
            out.prediction_drafted = req.prediction_drafted
            out.prediction_accepted = req.prediction_accepted
        if req.cached_tokens_by_tier:
            out.cached_tokens_by_tier, out.cache_load_s = (
                req.cached_tokens_by_tier,
                req.cache_load_s,
            )
        if p.return_logprob:
            out.new_logprobs = [float(x) for x in req.output_logprobs[sent:]]
            out.new_top_logprobs = [_top(t) for t in req.output_top_logprobs[sent:]]
            if req.is_finished and p.logprob_start_len >= 0:
                out.input_logprobs = [None if x is None else float(x) for x in req.input_logprobs]
                out.input_top_logprobs = [
                    None if t is None else _top(t) for t in req.input_top_logprobs
                ]
                out.input_token_ranks = list(req.input_token_ranks)
        return out


def _top(pairs: list[tuple[float, int]]) -> list[tuple[float, int]]:
    return [(float(lp), int(t)) for lp, t in pairs]
