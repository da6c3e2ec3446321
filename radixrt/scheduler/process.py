"""The scheduler process: the model, the KV pool and the Scheduler loop behind two ZMQ sockets.

Started by the HTTP process as `python -m radixrt.scheduler.process '<SchedulerArgsMsg JSON>'`.
A request that raises while being queued or aborted is finished with an abort reason and the
loop goes on; an exception inside `step()` is fatal: it is reported as FatalErrorMsg and the
process exits with status 1.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback

import msgspec
import zmq

from radixrt.core import FinishReason, Req, SamplingParams
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
    ReqOutMsg,
    SchedulerArgsMsg,
    ToSchedulerMsg,
    finish_to_msg,
)
from radixrt.scheduler.scheduler import Scheduler

logger = logging.getLogger("radixrt")

_IDLE_POLL_MS = 100  # how often an idle loop checks that its parent is alive


class SchedulerLoop:
    """Receives requests, runs steps, and sends each step's new tokens back."""

    def __init__(
        self, scheduler: Scheduler, recv_sock: zmq.Socket, send_sock: zmq.Socket, parent_pid: int
    ) -> None:
        self.scheduler = scheduler
        self.recv_sock = recv_sock
        self.send_sock = send_sock
        self.parent_pid = parent_pid
        self._decoder = msgspec.msgpack.Decoder(ToSchedulerMsg)
        self._encoder = msgspec.msgpack.Encoder()
        self._num_sent: dict[str, int] = {}  # rid -> output tokens already sent
        self._counts = (0, 0)  # (running, waiting) as last reported

    def run(self) -> int:
        """Loop until the parent process goes (0) or a step fails (1)."""
        sched = self.scheduler
        while os.getppid() == self.parent_pid:
            touched: dict[str, Req] = {}
            for msg in self._recv(block=sched.is_idle):
                self._handle(msg, touched)
            try:
                for req in sched.step():
                    touched[req.rid] = req
                sched.check_pool_whole()
            except Exception:
                logger.exception("scheduler step failed")
                self.send(FatalErrorMsg(traceback.format_exc()))
                return 1
            self._send_outputs(touched)
        logger.info("parent process exited; scheduler stopping")
        return 0

    def send(self, msg: msgspec.Struct) -> None:
        self.send_sock.send(self._encoder.encode(msg), copy=False)

    # ---- messages in -----------------------------------------------------------------------

    def _recv(self, block: bool) -> list[ToSchedulerMsg]:
        msgs: list[ToSchedulerMsg] = []
        if block and not self.recv_sock.poll(_IDLE_POLL_MS):
            return msgs
        while True:
            try:
                raw = self.recv_sock.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return msgs
            try:
                msgs.append(self._decoder.decode(raw.buffer))
            except msgspec.DecodeError:
                logger.exception("dropped an undecodable message")

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
        elif isinstance(msg, FlushCacheReqMsg):
            ok = sched.is_idle
            if ok:
                sched.kv.cache.reset()
            self.send(FlushCacheReplyMsg(msg.reply_id, ok))
        elif isinstance(msg, GetInfoReqMsg):
            self.send(self._info(msg.reply_id))

    def _add(self, msg: GenerateReqMsg, touched: dict[str, Req]) -> None:
        try:
            req = Req(msg.rid, msg.input_ids, SamplingParams.from_dict(msg.sampling_params),
                      extra_key=msg.extra_key)
            req.arrival_time = time.monotonic()
            self.scheduler.add_request(req)
        except Exception as e:
            logger.exception("request %s rejected", msg.rid)
            req = Req(msg.rid, msg.input_ids, SamplingParams())
            req.finish(FinishReason.error(f"bad request: {e}", 400))
        if req.is_finished:
            touched[req.rid] = req

    def _info(self, reply_id: int) -> InfoReplyMsg:
        sched = self.scheduler
        kv, s = sched.kv, sched.stats
        return InfoReplyMsg(
            reply_id=reply_id, max_total_tokens=kv.allocator.capacity,
            free_tokens=kv.allocator.num_free, evictable_tokens=kv.cache.evictable_size,
            protected_tokens=kv.cache.protected_size, num_running_reqs=len(sched.running),
            num_queued_reqs=len(sched.waiting), prompt_tokens=s.prompt_tokens,
            cached_tokens=s.cached_tokens, generated_tokens=s.generated_tokens,
            cache_hit_rate=s.hit_rate, forward_passes=s.forward_passes, retractions=s.retractions,
        )

    # ---- messages out ----------------------------------------------------------------------

    def _send_outputs(self, touched: dict[str, Req]) -> None:
        counts = (len(self.scheduler.running), len(self.scheduler.waiting))
        if not touched and counts == self._counts:
            return
        self._counts = counts
        outputs = [self._req_out(req) for req in touched.values()]
        try:
            buf = self._encoder.encode(BatchTokenOutMsg(outputs, *counts))
        except Exception:  # one request's output cannot be carried: fail that one alone
            logger.exception("could not encode a step's outputs; failing the bad ones")
            outputs = [self._encodable(out) for out in outputs]
            buf = self._encoder.encode(BatchTokenOutMsg(outputs, *counts))
        self.send_sock.send(buf, copy=False)

    def _encodable(self, out: ReqOutMsg) -> ReqOutMsg:
        """`out` if it encodes, else an error finish for its request (aborted here)."""
        try:
            self._encoder.encode(out)
            return out
        except Exception as e:
            self.scheduler.abort(out.rid)  # releases its slots if it was still running
            self._num_sent.pop(out.rid, None)
            error = FinishReason.error(f"internal error: its output could not be sent: {e}")
            return ReqOutMsg(out.rid, [], [], [], finish_to_msg(error), out.cached_tokens)

    def _req_out(self, req: Req) -> ReqOutMsg:
        sent = self._num_sent.pop(req.rid, 0)
        if not req.is_finished:
            self._num_sent[req.rid] = len(req.output_ids)
        p = req.sampling_params
        out = ReqOutMsg(
            req.rid, req.output_ids[sent:], [], [], finish_to_msg(req.finish_reason),
            req.cached_tokens,
        )
        if p.return_logprob:
            out.new_logprobs = [float(x) for x in req.output_logprobs[sent:]]
            out.new_top_logprobs = [_top(t) for t in req.output_top_logprobs[sent:]]
            if req.is_finished and p.logprob_start_len >= 0:
                out.input_logprobs = [None if x is None else float(x) for x in req.input_logprobs]
                out.input_top_logprobs = [
                    None if t is None else _top(t) for t in req.input_top_logprobs
                ]
        return out


def _top(pairs: list[tuple[float, int]]) -> list[tuple[float, int]]:
    return [(float(lp), int(t)) for lp, t in pairs]


def _exit_with_parent() -> None:
    """On Linux, get SIGTERM when the HTTP process dies, even while the model loads; the
    loop's parent-pid check covers the rest."""
    if sys.platform != "linux":
        return
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _exit_at_once(reason: str) -> None:
    """A tensor-parallel rank died: the group cannot run another batch, so this process exits
    and the HTTP process, which watches it, stops the server."""
    logging.shutdown()
    os._exit(1)


def main(argv: list[str] | None = None) -> int:
    """Build the scheduler, announce ReadyMsg, run the loop; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    args = msgspec.json.decode(argv[0], type=SchedulerArgsMsg)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s scheduler: %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the HTTP process's to handle
    _exit_with_parent()
    if os.getppid() != args.parent_pid:  # the parent went before the death signal was set
        return 0
    ctx = zmq.Context()
    recv_sock, send_sock = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    recv_sock.connect(args.in_addr)
    send_sock.connect(args.out_addr)
    send_sock.setsockopt(zmq.LINGER, 2000)
    encoder = msgspec.msgpack.Encoder()
    try:
        from radixrt.scheduler.builder import build_scheduler

        scheduler, _ = build_scheduler(args.model, args.cache, args.scheduler)
    except Exception as e:
        if not isinstance(e, ValueError):  # a bad path or flag: the HTTP process says why
            logger.exception("could not start the scheduler")
        send_sock.send(encoder.encode(FatalErrorMsg(f"{type(e).__name__}: {e}")))
        return 1
    runner = scheduler.runner
    runner.tp_group.on_rank_exit = _exit_at_once
    send_sock.send(encoder.encode(ReadyMsg(
        model_path=str(runner.model_path), max_total_tokens=runner.max_total_tokens,
        kv_pool_bytes=runner.token_to_kv_pool.size_bytes, context_length=runner.context_len,
        vocab_size=runner.arch.vocab_size, device=str(runner.device),
        dtype=str(runner.dtype).removeprefix("torch."),
    )))
    # The loop runs on its own thread, as in the Engine: torch's CPU kernels called from the
    # main thread were measured several times slower when other processes compete for cores.
    loop = SchedulerLoop(scheduler, recv_sock, send_sock, args.parent_pid)
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(loop.run()), name="scheduler-loop")
    thread.start()
    thread.join()
    return status[0] if status else 1


if __name__ == "__main__":
    sys.exit(main())
