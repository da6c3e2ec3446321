"""The tokenizer thread's queue, fair across callers: each caller (a tenant, a key, an address)
has its own FIFO, and the one thread takes a job from each caller in turn, so one caller's
many big bodies delay another's by at most the job running now, never by their whole queue."""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


class FairPool:
    """One worker thread running jobs round-robin over callers' queues. A job whose future is
    cancelled before it starts (its client went away) is skipped."""

    def __init__(self, thread_name: str) -> None:
        self._queues: OrderedDict[str, deque[_Job]] = OrderedDict()  # callers in turn order
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=thread_name, daemon=True)
        self._thread.start()

    def submit(self, caller: str, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the tokenizer pool is closed")
            self._queues.setdefault(caller, deque()).append((fut, fn, args))
            self._cond.notify()
        return fut

    def shutdown(self) -> None:
        """Cancel the queued jobs and let the thread end after the running one."""
        with self._cond:
            self._closed = True
            for queue in self._queues.values():
                for fut, _, _ in queue:
                    fut.cancel()
            self._queues.clear()
            self._cond.notify()

    def _next(self) -> _Job | None:
        """The first job of the caller whose turn it is (that caller goes to the back)."""
        with self._cond:
            while True:
                while not self._queues and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return None
                caller, queue = next(iter(self._queues.items()))
                job = queue.popleft()
                if not queue:
                    del self._queues[caller]
                elif not job[0].cancelled():  # a skipped job does not use the caller's turn
                    self._queues.move_to_end(caller)
                if not job[0].cancelled():
                    return job

    def _work(self) -> None:
        while (job := self._next()) is not None:
            fut, fn, args = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as e:  # handed to the awaiting handler, as an executor does
                fut.set_exception(e)
            else:
                fut.set_result(result)
