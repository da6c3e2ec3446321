"""SchedulerClient: starts the scheduler process and carries typed messages to and from it.

The HTTP process binds two ipc sockets in a private temp folder, beside the file the
scheduler loop beats into (scheduler/heartbeat.py); the scheduler connects to both sockets.
Requests go out on a PUSH socket that never blocks (no high-water mark); outputs come back on
an asyncio PULL socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import msgspec
import zmq
import zmq.asyncio

from radixrt.core.messages import (
    FatalErrorMsg,
    FromSchedulerMsg,
    ReadyMsg,
    SchedulerArgsMsg,
    StopMsg,
    ToSchedulerMsg,
)
from radixrt.scheduler.heartbeat import HeartbeatReader, create_heartbeat
from radixrt.serve.http.args import ServerArgs

logger = logging.getLogger("radixrt")

_POLL_S = 0.2
STOP_GRACE_S = 5.0  # for the step under way to end, then for SIGTERM to work
# The scheduler process's OpenMP workers spin this many rounds after a parallel region before
# they sleep (libgomp's default is 300,000: milliseconds). Within a forward pass the next
# region comes sooner, so it stays warm; between steps the cores go to this process and the
# clients instead of to a spinning worker, and when other processes hold a core a
# descheduled worker no longer stalls its spinning partner for whole time slices. Measured
# on 2 cores (docs/benchmarks.md, section 13): with other processes busy, chat served 1.2-28x
# the requests/s of libgomp's default; on a quiet machine it costs 3-6% (chat) and 8-10%
# (single-stream decode). GOMP_SPINCOUNT=300000 in the server's environment restores it.
OMP_SPIN_ENV = {"GOMP_SPINCOUNT": "10000"}


def scheduler_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The scheduler process's environment: `env` (None: this process's) with OMP_SPIN_ENV,
    unless the user chose a spin policy (GOMP_SPINCOUNT or OMP_WAIT_POLICY already set)."""
    out = dict(os.environ if env is None else env)
    if "GOMP_SPINCOUNT" not in out and "OMP_WAIT_POLICY" not in out:
        out.update(OMP_SPIN_ENV)
    return out


class SchedulerStartError(RuntimeError):
    """The scheduler process exited or failed before it was ready."""


class SchedulerClient:
    """Owns the scheduler subprocess and both ends of the ZMQ channel on this side."""

    def __init__(self, args: ServerArgs, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.env = env  # the scheduler process's environment; None: inherit this one's
        self._ipc_dir = tempfile.mkdtemp(prefix="radixrt-")
        self._in_addr = f"ipc://{self._ipc_dir}/in"
        self._out_addr = f"ipc://{self._ipc_dir}/out"
        self._heartbeat_path = Path(self._ipc_dir) / "heartbeat"
        create_heartbeat(self._heartbeat_path)
        self._heartbeat = HeartbeatReader(self._heartbeat_path)
        self._ctx = zmq.Context()
        self._send_sock = self._ctx.socket(zmq.PUSH)
        self._send_sock.setsockopt(zmq.SNDHWM, 0)
        self._send_sock.setsockopt(zmq.LINGER, 0)
        self._send_sock.bind(self._in_addr)
        self._actx = zmq.asyncio.Context()
        self._recv_sock = self._actx.socket(zmq.PULL)
        self._recv_sock.setsockopt(zmq.RCVHWM, 0)
        self._recv_sock.setsockopt(zmq.LINGER, 0)
        self._recv_sock.bind(self._out_addr)
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(FromSchedulerMsg)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Spawn the scheduler process (its arguments travel as JSON on its command line)."""
        a = self.args
        start_args = SchedulerArgsMsg(
            a.model,
            a.cache,
            a.scheduler,
            self._in_addr,
            self._out_addr,
            os.getpid(),
            a.server.log_level,
            str(self._heartbeat_path),
        )
        cmd = [
            sys.executable,
            "-m",
            "radixrt.scheduler.process",
            msgspec.json.encode(start_args).decode(),
        ]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=scheduler_env(self.env))

    async def wait_ready(self) -> ReadyMsg:
        """Wait for ReadyMsg; SchedulerStartError if the process fails or exits first."""
        while True:
            if await self._recv_sock.poll(int(_POLL_S * 1000)):
                msg = await self.recv()
                if isinstance(msg, ReadyMsg):
                    return msg
                if isinstance(msg, FatalErrorMsg):
                    raise SchedulerStartError(msg.message)
            elif self.returncode is not None:
                raise SchedulerStartError(f"scheduler process exited with status {self.returncode}")

    def encode(self, msg: ToSchedulerMsg) -> bytes:
        """The message's bytes on the wire; raises (msgspec.EncodeError, OverflowError) for a
        value msgpack cannot carry."""
        return self._encoder.encode(msg)

    def send_encoded(self, buf: bytes) -> None:
        """Queue an encoded message for the scheduler; never blocks."""
        self._send_sock.send(buf, zmq.NOBLOCK, copy=False)

    def send(self, msg: ToSchedulerMsg) -> None:
        """Queue a message for the scheduler; never blocks."""
        self.send_encoded(self.encode(msg))

    async def recv(self) -> FromSchedulerMsg:
        raw = await self._recv_sock.recv(copy=False)
        return self._decoder.decode(raw.buffer)

    def last_beat(self) -> float:
        """When the scheduler loop last ran an iteration (time.monotonic(); 0.0: not yet)."""
        return self._heartbeat.last_beat()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        """None while the scheduler process runs (or before it starts)."""
        return self.proc.poll() if self.proc is not None else None

    async def wait_exit(self) -> int:
        """Return the scheduler's exit status once it has exited."""
        while (rc := self.returncode) is None:
            await asyncio.sleep(_POLL_S)
        return rc

    def request_stop(self) -> None:
        """Ask the scheduler for a clean stop (StopMsg: it ends its loop after the current step
        and its disk tier writes what is queued); `stop` waits for it."""
        if self.returncode is None and self.proc is not None and not self._send_sock.closed:
            with contextlib.suppress(zmq.ZMQError):
                self.send(StopMsg())

    def stop(self) -> None:
        """Stop the scheduler cleanly (`request_stop`), SIGTERM it if it has not exited within
        its disk drain bound plus a grace, SIGKILL it a grace later; close the sockets."""
        if self.proc is not None and self.proc.poll() is None:
            self.request_stop()
            drain_s = self.args.cache.disk_drain_timeout_s if self.args.cache.cache_dir else 0.0
            for end, wait_s in ((self.proc.terminate, drain_s + STOP_GRACE_S),
                                (self.proc.kill, STOP_GRACE_S)):  # fmt: skip
                try:
                    self.proc.wait(wait_s)
                    break
                except subprocess.TimeoutExpired:
                    end()
            self.proc.wait()
        self._send_sock.close(0)
        self._recv_sock.close(0)
        # Both contexts end here, not in a garbage collector's finalizer (where a context
        # still holding a socket would block the collecting thread).
        self._ctx.term()
        self._actx.term()
        shutil.rmtree(self._ipc_dir, ignore_errors=True)
