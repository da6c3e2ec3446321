"""One slot of the HTTP process's grammar-check pool: a `radixrt.grammar.worker` process on
asyncio pipes, killed at the time limit and replaced in the background when it dies."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

import msgspec

from radixrt.grammar.base import GrammarSpec
from radixrt.grammar.worker import (
    HEADER,
    CheckOutMsg,
    CheckReqMsg,
    FromWorkerMsg,
    WorkerReadyMsg,
    encode_frame,
)

logger = logging.getLogger("radixrt")


class GrammarWorkerError(RuntimeError):
    """A worker could not start, or the checker is closed: the server's fault (500), not the
    client's; the check is not remembered."""


class WorkerDied(Exception):
    """The worker exited (or garbled its reply) during a check; it is being replaced."""


class WorkerSlot:
    """One pool slot: a worker process, replaced in the background when it is killed at the time
    limit or dies. Serves one check at a time (the pool hands it to one caller)."""

    def __init__(self, argv: list[str]) -> None:
        self._argv = argv
        self._proc: asyncio.subprocess.Process | None = None  # the current process, if any
        self._ready: asyncio.Task[None] | None = None  # starting `_proc`; done once it is up
        self._watch: asyncio.Task[None] | None = None  # replaces `_proc` if it dies while idle
        self._busy = False  # a check is on `_proc`: its death is that check's to handle
        self._closed = False
        self._next_rid = 0
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(FromWorkerMsg)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    @property
    def rank(self) -> int:
        """0: up, 1: starting, 2: neither (started on demand)."""
        task = self._ready
        if task is not None and not task.done():
            return 1
        return 0 if self._is_up() else 2

    def start(self) -> None:
        """Start a process unless one is up or starting; GrammarWorkerError once closed."""
        if self._closed:
            raise GrammarWorkerError("the grammar checker is closed")
        task = self._ready
        if (task is not None and not task.done()) or self._is_up():
            return
        self._ready = asyncio.get_running_loop().create_task(self._spawn())
        self._ready.add_done_callback(retrieve)

    async def wait_ready(self) -> None:
        """Return once a process is up; GrammarWorkerError if it cannot start."""
        self.start()
        task = self._ready
        assert task is not None
        if not task.done():  # when up, no await: nothing can change before `compile` begins
            await asyncio.wait([task])  # a cancelled caller leaves the start running
        if task.cancelled():
            raise GrammarWorkerError("the grammar checker is closed")
        task.result()

    async def compile(self, spec: GrammarSpec, timeout_s: float) -> str | None:
        """None if `spec` compiles within `timeout_s`, else the refusal; the process is killed
        and replaced at the limit. WorkerDied if it exits under the check."""
        proc = self._proc
        if proc is None or proc.returncode is not None:  # died as its start finished
            raise WorkerDied("the grammar worker exited before the check began")
        self._next_rid += 1
        req = CheckReqMsg(self._next_rid, spec.kind, spec.text)
        self._busy = True
        try:
            reply = await asyncio.wait_for(self._roundtrip(proc, req), timeout_s)
        except asyncio.TimeoutError:
            logger.warning(
                "grammar worker %d killed: a %s took longer than %g s",
                proc.pid,
                spec.kind,
                timeout_s,
            )
            await self._replace(proc)
            return f"compiling the {spec.kind} took longer than {timeout_s:g} s"
        except (OSError, asyncio.IncompleteReadError, msgspec.DecodeError):
            code = await self._replace(proc)
            raise WorkerDied(
                f"the grammar worker exited unexpectedly ({_exit_reason(code)}) while "
                f"compiling the {spec.kind}"
            ) from None
        finally:
            self._busy = False
        if not isinstance(reply, CheckOutMsg) or reply.rid != req.rid:
            await self._replace(proc)
            raise WorkerDied(f"the grammar worker sent an unexpected {type(reply).__name__}")
        return reply.error

    def close(self) -> None:
        self._closed = True
        for task in (self._ready, self._watch):
            if task is not None:
                task.cancel()
        proc = self._proc
        if proc is not None and proc.returncode is None:
            if proc.stdin is not None:
                proc.stdin.close()  # a worker that outlives the kill exits on EOF
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    def _is_up(self) -> bool:
        task, proc = self._ready, self._proc
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return False
        return proc is not None and proc.returncode is None

    async def _roundtrip(self, proc: asyncio.subprocess.Process, req: CheckReqMsg) -> Any:
        assert proc.stdin is not None
        proc.stdin.write(encode_frame(self._encoder, req))
        await proc.stdin.drain()
        return await self._read(proc)

    async def _read(self, proc: asyncio.subprocess.Process) -> FromWorkerMsg:
        assert proc.stdout is not None
        (size,) = HEADER.unpack(await proc.stdout.readexactly(HEADER.size))
        return self._decoder.decode(await proc.stdout.readexactly(size))

    async def _spawn(self) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        self._proc = proc
        try:
            msg = await self._read(proc)
        except (OSError, asyncio.IncompleteReadError, msgspec.DecodeError):
            msg = None
        except asyncio.CancelledError:
            _kill(proc)
            raise
        if not isinstance(msg, WorkerReadyMsg):
            _kill(proc)
            code = await proc.wait()
            raise GrammarWorkerError(
                f"the grammar worker failed to start ({_exit_reason(code)}); its log says why"
            )
        logger.info("grammar worker %d is up", proc.pid)
        self._watch = asyncio.create_task(self._watch_exit(proc))

    async def _watch_exit(self, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if self._proc is proc and not self._busy and not self._closed:
            self._proc = None
            if code == -signal.SIGTERM:  # stopped with its process group: the server is going
                logger.info("grammar worker %d was terminated; the next check starts one", proc.pid)
                return
            logger.warning(
                "grammar worker %d exited (%s); starting another", proc.pid, _exit_reason(code)
            )
            self.start()

    async def _replace(self, proc: asyncio.subprocess.Process) -> int:
        """Kill and reap `proc`, start its replacement in the background; its exit code."""
        _kill(proc)
        code = await proc.wait()
        if self._proc is proc and not self._closed:
            self._proc = None
            self.start()
        return code


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


def _exit_reason(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a background task's exception as seen (its waiters, if any, get it too)."""
    if not task.cancelled():
        task.exception()
