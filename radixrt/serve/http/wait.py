"""Waiting on one HTTP call's request states (the serving pipeline's, serving.py): until they
finish, fail, or the client goes away (then they are aborted). The HTTP pieces that know
nothing of the runtime are in radixrt/serve/web/."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.types import Receive

from radixrt.serve.http.tokenizer_manager import ReqState, SchedulerDeadError, TokenizerManager


class ClientGoneError(Exception):
    """The client disconnected before its requests finished (they have been aborted)."""


class RequestFailedError(Exception):
    """A request ended in an error of its own (FinishReason.status_code); answered with it."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


async def wait_finished(request: Request, tm: TokenizerManager, states: list[ReqState]) -> None:
    """Wait until every state finishes; abort them and raise ClientGoneError if the client
    disconnects first, SchedulerDeadError if the scheduler dies."""
    event = states[0].event
    watcher = DisconnectWatcher(request, event)
    try:
        while True:
            raise_if_failed(states)
            if all(s.out.is_finished for s in states):
                return
            if watcher.is_gone:
                raise ClientGoneError
            await event.wait()
            event.clear()
    finally:
        watcher.cancel()
        tm.abort(states)  # a no-op for the finished ones


async def updates(states: list[ReqState]) -> AsyncIterator[None]:
    """Yield after each batch of new output for `states`, and once more when all are done.

    When the client disconnects, starlette cancels the streaming response mid-wait; the
    pipeline's stream (closed by `sse_response`) then aborts the unfinished requests.
    """
    event = states[0].event
    while True:
        await event.wait()
        event.clear()
        raise_if_failed(states)
        yield
        if all(s.out.is_finished for s in states):
            return


def raise_if_failed(states: list[ReqState]) -> None:
    """SchedulerDeadError if the scheduler died, RequestFailedError if a state ended in an
    error of its own."""
    for s in states:
        if s.error is not None:
            raise SchedulerDeadError(s.error)
        reason = s.out.finish_reason
        if reason is not None and reason.is_error:
            raise RequestFailedError(reason.message or "the request failed", reason.status_code)


class DisconnectWatcher:
    """Reads the ASGI channel (the body is already consumed) until it reports a disconnect,
    then sets `event` so a waiter wakes up and sees `is_gone`."""

    def __init__(self, request: Request, event: asyncio.Event) -> None:
        self.is_gone = False
        self._event = event
        self._task = asyncio.create_task(self._run(request.receive))

    async def _run(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.is_gone = True
        self._event.set()

    def cancel(self) -> None:
        self._task.cancel()
