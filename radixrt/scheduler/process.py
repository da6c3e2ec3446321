"""The scheduler process: the model, the KV pool and the SchedulerLoop (scheduler/loop.py)
behind two ZMQ sockets.

Started by the HTTP process as `python -m radixrt.scheduler.process '<SchedulerArgsMsg JSON>'`;
it exits with the loop's status (1 after a failed step), or 0 when its parent goes. A StopMsg
or SIGTERM (its parent's death sends one too) is a clean stop: the loop ends after its step and
the scheduler closes (the disk tier drains its queued writes, bounded); SIGTERM while the model
still loads exits at once, with nothing to save.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING

import msgspec
import zmq

from radixrt.core.heap import freeze_startup_heap
from radixrt.core.messages import (
    FatalErrorMsg,
    FromSchedulerMsg,
    ReadyMsg,
    ReqOutMsg,
    SchedulerArgsMsg,
    ToSchedulerMsg,
)
from radixrt.scheduler.heartbeat import HeartbeatWriter
from radixrt.scheduler.loop import BaseTransport, SchedulerLoop

if TYPE_CHECKING:
    from radixrt.executor.model_runner import ModelRunner

logger = logging.getLogger("radixrt")


class ZmqTransport(BaseTransport):
    """The scheduler process's side of the HTTP process's two ipc sockets (typed msgpack)."""

    def __init__(self, recv_sock: zmq.Socket, send_sock: zmq.Socket, parent_pid: int,
                 stop: threading.Event | None = None,
                 heartbeat: HeartbeatWriter | None = None) -> None:  # fmt: skip
        self.recv_sock = recv_sock
        self.send_sock = send_sock
        self.parent_pid = parent_pid
        self.stop = stop or threading.Event()  # set by SIGTERM (the main thread's handler)
        self.heartbeat = heartbeat  # the HTTP process reads it to tell a wedged loop
        self._decoder = msgspec.msgpack.Decoder(ToSchedulerMsg)
        self._encoder = msgspec.msgpack.Encoder()

    def recv(self, timeout_s: float | None) -> list[ToSchedulerMsg]:
        msgs: list[ToSchedulerMsg] = []
        if timeout_s and not self.recv_sock.poll(int(timeout_s * 1000)):
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

    def send(self, msg: FromSchedulerMsg) -> None:
        self.send_sock.send(self._encoder.encode(msg), copy=False)

    def can_carry(self, msg: ReqOutMsg) -> bool:
        try:
            self._encoder.encode(msg)
        except Exception:
            return False
        return True

    def beat(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.beat()

    def is_stopped(self) -> bool:
        if self.stop.is_set():
            logger.info("SIGTERM: scheduler stopping")
            return True
        if os.getppid() != self.parent_pid:
            logger.info("parent process exited; scheduler stopping")
            return True
        return False


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
    stop, looping = threading.Event(), threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if not looping.is_set():  # still loading: nothing to drain
            os._exit(128 + signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    _exit_with_parent()
    if os.getppid() != args.parent_pid:  # the parent went before the death signal was set
        return 0
    ctx = zmq.Context()
    recv_sock, send_sock = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    recv_sock.connect(args.in_addr)
    send_sock.connect(args.out_addr)
    send_sock.setsockopt(zmq.LINGER, 2000)
    # Loading and stepping run on one thread, so the process has one OpenMP thread pool: a
    # load here and steps on another thread would make two, and libgomp then throttles its
    # spin-waits (every parallel region pays a futex wake-up: decode steps 30-37 ms instead
    # of 21-24 on 2 cores). The loop's thread is not the main one: torch's CPU kernels
    # called from the main thread were measured slower when other processes compete.
    status: list[int] = []
    thread = threading.Thread(
        target=lambda: status.append(_load_and_run(args, recv_sock, send_sock, stop, looping)),
        name="scheduler-loop",
    )
    thread.start()
    thread.join()
    return status[0] if status else 1


def _load_and_run(args: SchedulerArgsMsg, recv_sock: zmq.Socket, send_sock: zmq.Socket,
                  stop: threading.Event, looping: threading.Event) -> int:  # fmt: skip
    """Build the scheduler, announce ReadyMsg (FatalErrorMsg if it cannot), run the loop until
    `stop` is set (SIGTERM) or a StopMsg comes; `looping` is set once the loop runs."""
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
    heartbeat = HeartbeatWriter(args.heartbeat_path) if args.heartbeat_path else None
    transport = ZmqTransport(recv_sock, send_sock, args.parent_pid, stop, heartbeat)
    freeze_startup_heap("scheduler")
    looping.set()
    send_sock.send(encoder.encode(ready_msg(runner)))
    return SchedulerLoop(scheduler, transport).run()


def ready_msg(runner: ModelRunner) -> ReadyMsg:
    """What the HTTP process learns once the model and its KV pools are up."""
    weights = "int8" if runner.model_config.quantization else ""  # (int8 and w8a8)
    if runner.bf16_weights:
        weights = "bfloat16"
    return ReadyMsg(
        model_path=str(runner.model_path),
        max_total_tokens=runner.max_total_tokens,
        kv_pool_bytes=runner.token_to_kv_pool.size_bytes,
        context_length=runner.context_len,
        vocab_size=runner.arch.vocab_size,
        device=str(runner.device),
        dtype=str(runner.dtype).removeprefix("torch."),
        window_pool_tokens=runner.allocator.window.capacity,
        num_window_layers=len(runner.token_to_kv_pool.window_layers),
        kv_dtype=str(runner.token_to_kv_pool.dtype).removeprefix("torch."),
        weight_dtype=weights,
    )


if __name__ == "__main__":
    sys.exit(main())
