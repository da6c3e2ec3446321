"""TokenizerManager: the HTTP process's view of every request in flight.

It sends GenerateReqMsg / AbortReqMsg to the scheduler, applies each BatchTokenOutMsg to the
`ReqOutput` of each request (output ids, logprobs, finish reason), and wakes the handler that
waits on it. When the scheduler process dies every request in flight fails at once; while its
loop is wedged (no heartbeat for --scheduler-stall-timeout-s, stall_watch.py) the requests
and questions waiting on it fail with 503 and new ones are refused, until it runs again.

Request ids: the scheduler only ever sees ids made here (uuid4). What a client calls its
request (its own `rid`, or the made id it is told in `meta_info.id`) is scoped to that client
(`caller`), so one client can neither abort nor probe another's requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec

from radixrt.core import FinishReason, PinSpec, SamplingParams
from radixrt.core.config import ServerConfig
from radixrt.core.messages import (
    AbortReqMsg,
    BatchTokenOutMsg,
    FatalErrorMsg,
    GenerateReqMsg,
    ReadyMsg,
    ReqOutMsg,
)
from radixrt.serve.http.fair_pool import FairPool
from radixrt.serve.http.metrics import NoMetrics, RequestObserver
from radixrt.serve.http.req_state import (
    GroupKey,
    QueueFullError,
    RefusedError,
    ReqState,
    SchedulerDeadError,
    SchedulerUnavailableError,
)
from radixrt.serve.http.scheduler_client import SchedulerClient
from radixrt.serve.http.scheduler_queries import REPLIES, SchedulerQueries
from radixrt.serve.http.stall_watch import StallWatch
from radixrt.serve.results.detokenizer import IncrementalDetokenizer
from radixrt.serve.results.state import ReqOutput, fan_out

__all__ = [
    "QueueFullError",
    "RefusedError",
    "ReqState",
    "SchedulerDeadError",
    "SchedulerUnavailableError",
    "TokenizerManager",
]

logger = logging.getLogger("radixrt")

T = TypeVar("T")


class TokenizerManager(SchedulerQueries):
    """Submits requests and routes their outputs; asks the scheduler's questions (the base)."""

    def __init__(
        self,
        client: SchedulerClient,
        tokenizer: Any,
        ready: ReadyMsg,
        config: ServerConfig,
        metrics: NoMetrics,
        observers: Sequence[RequestObserver] = (),
    ) -> None:
        super().__init__(client)
        self.tokenizer = tokenizer
        self.ready = ready
        self.config = config
        self.metrics = metrics  # /metrics and the prompt guard read it too
        # Told of every first token and every finished request, on the event loop's thread.
        self._observers: tuple[RequestObserver, ...] = (metrics, *observers)
        self.states: dict[str, ReqState] = {}  # scheduler rid -> state, until finished
        self.groups: dict[GroupKey, list[ReqState]] = {}  # unfinished states per client id
        self.num_running = 0  # as last reported by the scheduler
        self._tasks: list[asyncio.Task[None]] = []
        self._stall_task: asyncio.Task[None] | None = None
        self._on_dead: Callable[[str], None] = lambda reason: None
        self.stall = StallWatch(client.last_beat, config.scheduler_stall_timeout_s)
        # Tokenizing and chat templating run here, one at a time (the fast tokenizer is not
        # safe to call concurrently), so the event loop keeps answering while they run; in
        # turn across callers, so one caller's big bodies cannot stall the others'.
        self._tokenizer_pool = FairPool("radixrt-tokenize")

    def start(self, on_dead: Callable[[str], None]) -> None:
        """Start the output loop and the watchdog; `on_dead` runs once if the scheduler dies."""
        self._on_dead = on_dead
        self._stall_task = asyncio.create_task(self.stall.run(self._fail_stalled))
        self._tasks = [
            asyncio.create_task(self._recv_loop()),
            asyncio.create_task(self._watch()),
            self._stall_task,
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tokenizer_pool.shutdown()

    async def run_tokenizer(self, fn: Callable[..., T], *args: Any, caller: str = "") -> T:
        """fn(*args) on the tokenizer thread (tokenize, template, validate a body), queued
        behind `caller`'s own earlier jobs and taking turns with other callers'."""
        fut = self._tokenizer_pool.submit(caller, fn, *args)
        return await asyncio.wrap_future(fut)  # type: ignore[no-any-return]

    @property
    def stall_reason(self) -> str | None:
        """Why the scheduler counts as wedged now (no heartbeat); None while it runs."""
        return self.stall.reason

    @property
    def num_queued(self) -> int:
        """Requests sent but not (yet) reported running by the scheduler."""
        return max(0, len(self.states) - self.num_running)

    # ---- requests ------------------------------------------------------------------------

    def submit(
        self,
        prompts: list[list[int]],
        params: list[SamplingParams],
        rids: list[str] | None,
        extra_key: str | None = None,
        session: str | None = None,
        caller: str = "",
        pins: list[PinSpec] | None = None,
        endpoint: str = "",
    ) -> list[ReqState]:
        """Send one request per prompt and sample (n each); states come back prompt-major.
        `pins`: prefixes of each prompt to pin once it finishes (radixrt/cache/pins.py).

        `rids`: the client's names for its prompts (unique among `caller`'s requests in
        flight), else ids are made here. Every message is encoded before anything is
        registered, and a failure while sending unregisters them all: a request that raises
        here leaves nothing behind. `session` only matters to a dispatcher over replicas."""
        if (reason := self.dead_reason or self.stall_reason) is not None:
            raise SchedulerUnavailableError(reason)
        num_new = sum(p.n for p in params)
        limit = self.config.max_queued_requests
        if num_new > limit:
            raise ValueError(
                f"the request asks for {num_new} sequences (prompts x n); at most "
                f"{limit} may wait (--max-queued-requests)"
            )
        if self.num_queued + num_new > limit:
            raise QueueFullError(
                f"too many requests waiting ({self.num_queued}); max_queued_requests is {limit}"
            )
        names = rids or [uuid.uuid4().hex for _ in prompts]
        if len(set(names)) != len(names):
            raise ValueError("the rids of one request must be distinct")
        taken = next((r for r in names if (caller, r) in self.groups), None)
        if taken is not None:
            raise ValueError(f"rid {taken!r} is already in use")
        event = asyncio.Event()
        now = time.monotonic()
        groups: dict[GroupKey, list[ReqState]] = {}
        encoded: list[bytes] = []
        for ids, sp, name in zip(prompts, params, names, strict=True):
            key = (caller, name)
            groups[key] = []
            for i, (out, sent) in enumerate(fan_out(ids, sp, now, caller, endpoint, pins)):
                detok = IncrementalDetokenizer.for_params(self.tokenizer, out.sampling_params)
                visible = name if sp.n == 1 else f"{name}-{i}"
                groups[key].append(ReqState(out, detok, event, key, visible))
                encoded.append(
                    self._encode(
                        GenerateReqMsg(out.rid, out.input_ids, sent, extra_key, list(pins or ()))
                    )
                )
        states = [state for group in groups.values() for state in group]
        self.groups.update(groups)
        self.states.update((state.out.rid, state) for state in states)
        sent = 0
        try:
            for buf in encoded:
                self.client.send_encoded(buf)
                sent += 1
        except BaseException:
            self._unregister(states)
            for state in states[:sent]:  # these reached the scheduler: best effort to stop them
                with contextlib.suppress(Exception):
                    self.client.send(AbortReqMsg(state.out.rid))
            raise
        return states

    def _encode(self, msg: GenerateReqMsg) -> bytes:
        try:
            return self.client.encode(msg)
        except (msgspec.EncodeError, OverflowError, UnicodeEncodeError, TypeError) as e:
            raise ValueError(
                f"the request holds a value that cannot be sent to the scheduler: "
                f"{type(e).__name__}: {e}"
            ) from None

    def abort(self, states: list[ReqState]) -> None:
        """Abort the unfinished ones (the client went away); their outputs are dropped."""
        for state in self._unregister(states):
            if self.dead_reason is None:
                self.client.send(AbortReqMsg(state.out.rid))

    def abort_rid(self, rid: str, caller: str = "") -> None:
        """Abort `caller`'s requests named `rid` (exact match); a no-op when there are none,
        so the answer says nothing about other clients' requests."""
        for state in self.groups.get((caller, rid), ()):
            self.client.send(AbortReqMsg(state.out.rid))  # the finish comes back as usual

    def num_in_flight(self, caller: str) -> int:
        """`caller`'s unfinished requests."""
        return sum(len(states) for (c, _), states in self.groups.items() if c == caller)

    def tokens_in_flight(self, caller: str) -> int:
        """What `caller`'s unfinished requests may hold: prompt plus max_new_tokens each."""
        return sum(
            s.out.prompt_len + s.out.sampling_params.max_new_tokens
            for (c, _), states in self.groups.items()
            if c == caller
            for s in states
        )

    def abort_all(self) -> None:
        """Abort every request in flight; each still gets its (abort) finish as usual."""
        for rid in list(self.states):
            self.client.send(AbortReqMsg(rid))

    # ---- scheduler side ------------------------------------------------------------------

    async def _recv_loop(self) -> None:
        while True:
            try:
                msg = await self.client.recv()
            except msgspec.DecodeError:  # one bad message: the others still arrive
                logger.exception("dropped an undecodable message from the scheduler")
                continue
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the channel itself is broken: nothing more will arrive
                logger.exception("the scheduler channel failed")
                self._die(f"lost the scheduler channel: {type(e).__name__}: {e}")
                return
            try:
                if isinstance(msg, BatchTokenOutMsg):
                    self._on_outputs(msg)
                elif isinstance(msg, REPLIES):
                    self.resolve(msg)
                elif isinstance(msg, FatalErrorMsg):
                    self._die(f"the scheduler failed: {msg.message.strip().splitlines()[-1]}")
            except Exception:  # a bug here must not stop the loop for everyone else
                logger.exception("could not apply a scheduler message")

    async def _watch(self) -> None:
        rc = await self.client.wait_exit()
        self._die(f"the scheduler process exited with status {rc}")

    def _on_outputs(self, msg: BatchTokenOutMsg) -> None:
        self.num_running = msg.num_running
        now = time.monotonic()
        for out in msg.outputs:
            state = self.states.get(out.rid)
            if state is None:  # aborted by a client that went away
                continue
            try:
                self._apply(state, out, now)
            except Exception as e:  # fail this request only; the others' outputs still apply
                logger.exception("could not apply the output of request %s", out.rid)
                self._fail(state, f"internal error: {type(e).__name__}: {e}")

    def _apply(self, state: ReqState, msg: ReqOutMsg, now: float) -> None:
        """Add one step's output to the request's ReqOutput; drop it once finished."""
        out = state.out
        if msg.new_ids and not out.output_ids:
            out.first_token_time = now
            for observer in self._observers:
                observer.observe_first_token(now - out.arrival_time)
        self._finished(out.apply(msg), now)
        state.event.set()

    def _finished(self, outs: list[ReqOutput], now: float) -> None:
        """Forget requests that finished (a sample may finish with another: ReqOutput.apply)."""
        for out in outs:
            state = self.states.pop(out.rid, None)
            if state is None:
                continue
            self._drop_from_group(state)
            for observer in self._observers:
                observer.observe_finished(out, now - out.arrival_time)
            state.event.set()

    def _fail(self, state: ReqState, message: str) -> None:
        """Finish `state` with a 500 error here and abort it in the scheduler; samples that
        waited on its input logprobs finish too."""
        state.out.finish(FinishReason.error(message))
        self.abort([state])
        self._finished(state.out.release(), time.monotonic())
        state.event.set()

    def _unregister(self, states: list[ReqState]) -> list[ReqState]:
        """Forget the states still in flight (their later outputs are dropped); returns them."""
        gone = [s for s in states if self.states.pop(s.out.rid, None) is not None]
        for state in gone:
            self._drop_from_group(state)
        return gone

    def _drop_from_group(self, state: ReqState) -> None:
        group = self.groups.get(state.group)
        if group is not None and state in group:
            group.remove(state)
            if not group:
                del self.groups[state.group]

    def _fail_stalled(self, reason: str) -> None:
        """The scheduler is wedged: fail (503) and abort every request and question waiting
        on it; the aborts reach it if it ever runs again, and free what the requests hold."""
        states = list(self.states.values())
        for state in states:
            state.error = reason
            state.event.set()
        self.abort(states)
        self.fail_all(reason)

    def _die(self, reason: str) -> None:
        if self.dead_reason is not None:
            return
        logger.error("%s; failing %d requests and shutting down", reason, len(self.states))
        self.dead_reason = reason
        if self._stall_task is not None:
            self._stall_task.cancel()  # a dead scheduler is not a wedged one
        for state in self.states.values():
            state.error = reason
            state.event.set()
        self.states.clear()
        self.groups.clear()
        self.fail_all(reason)
        self._on_dead(reason)
