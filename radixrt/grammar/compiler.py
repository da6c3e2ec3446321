"""GrammarCompiler: compiles specs off the caller's thread, with a time limit, an LRU cache, a
refusal list of specs that ran past the limit and a bound on compiles in flight.

Shared by the threads of one process (the scheduler loop, the Engine's callers); every method is
thread-safe. The backend is built on first use (~0.5 s for a 50k vocabulary), on the worker
thread. A compile thread cannot be stopped: a spec that once ran past the limit is refused at
once from then on, so it occupies a thread at most once.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from radixrt.grammar import create_grammar_backend
from radixrt.grammar.base import (
    BaseGrammarBackend,
    BaseGrammarMatcher,
    GrammarBusyError,
    GrammarError,
    GrammarSpec,
)

CACHE_SIZE = 256  # compiled grammars kept, least recently used dropped first
REFUSED_SIZE = 1024  # specs that ran past the time limit, remembered least recently used first
NUM_WORKERS = 2
MAX_PENDING = 64  # compiles queued or running; more fail at once with GrammarBusyError


def make_grammar_compiler(
    config: Any, tokenizer: Any, vocab_size: int, eos_token_ids: list[int]
) -> GrammarCompiler:
    """The backend named by `config.grammar_backend` (a SchedulerConfig) behind a compile cache
    with `config.grammar_timeout_s`, its automata cache within `config.grammar_branch_cache_mb`;
    the backend itself is built on first use."""
    name = config.grammar_backend
    cache_bytes = config.grammar_branch_cache_mb * 2**20
    return GrammarCompiler(
        lambda: create_grammar_backend(name, tokenizer, vocab_size, eos_token_ids, cache_bytes),
        config.grammar_timeout_s,
    )


@dataclass(slots=True)
class _Entry:
    """A cached compile: its future, and when a worker thread began it (None: still queued)."""

    future: Future[Any] = field(default_factory=Future)
    started: float | None = None  # time.monotonic()


class GrammarCompiler:
    """`submit` returns a future of the compiled grammar; `compile` waits for it (bounded)."""

    def __init__(
        self,
        make_backend: Callable[[], BaseGrammarBackend],
        timeout_s: float,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        self._make_backend = make_backend
        self._backend: BaseGrammarBackend | None = None
        self._lock = threading.Lock()  # guards _cache, _refused and _num_pending
        self._backend_lock = threading.Lock()  # held while the backend is built
        self._cache: OrderedDict[GrammarSpec, _Entry] = OrderedDict()
        self._refused: OrderedDict[GrammarSpec, str] = OrderedDict()  # spec -> the message
        self._num_pending = 0  # submitted compiles whose thread has not finished them
        self._pool = ThreadPoolExecutor(NUM_WORKERS, thread_name_prefix="radixrt-grammar")

    def submit(self, spec: GrammarSpec) -> Future[Any]:
        """The compiled grammar of `spec`, cached or being compiled (raises only after
        `shutdown`). Its exception is a GrammarError: the backend's; the time limit's, at once,
        for a spec whose compile once ran past it (or runs past it now); GrammarBusyError, at
        once, when `max_pending` compiles are in flight. A failed compile is not cached; one
        over the limit is refused."""
        with self._lock:
            entry = self._cache.get(spec)
            if spec not in self._refused and entry is not None and self._is_overdue(entry):
                self._refuse(spec)
            if spec in self._refused:
                self._refused.move_to_end(spec)
                return _failed(GrammarError(self._refused[spec]))
            if entry is not None and not _is_failed(entry.future):
                self._cache.move_to_end(spec)
                return entry.future
            if self._num_pending >= self.max_pending:
                message = f"{self._num_pending} grammars are already compiling; try again later"
                return _failed(GrammarBusyError(message))
            entry = _Entry()
            entry.future = self._pool.submit(self._compile, spec, entry)
            self._num_pending += 1  # _compile's decrement waits for _lock
            self._cache[spec] = entry
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
            return entry.future

    def compile(self, spec: GrammarSpec) -> Any:
        """Compile (or fetch) `spec` in the time limit; GrammarError if it fails or times out.
        Building the backend on first use is not counted against the limit. A wait that times
        out leaves the compile running (and cached): a retry waits on it, never starts another."""
        self.backend  # noqa: B018 - built here, outside the timed wait
        fut = self.submit(spec)
        try:
            return fut.result(timeout=self.timeout_s)
        except FutureTimeout:
            raise GrammarError(_time_limit_message(spec, self.timeout_s)) from None

    def new_matcher(self, compiled: Any) -> BaseGrammarMatcher:
        return self.backend.new_matcher(compiled)

    @property
    def backend(self) -> BaseGrammarBackend:
        if self._backend is None:
            with self._backend_lock:
                if self._backend is None:
                    backend = self._make_backend()
                    backend.time_limit_s = self.timeout_s
                    self._backend = backend
        return self._backend

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compile(self, spec: GrammarSpec, entry: _Entry) -> Any:
        """Worker thread: the compiled grammar, or a GrammarError."""
        error: GrammarError | None = None
        try:
            backend = self.backend  # built on first use: not counted against the limit
            entry.started = time.monotonic()
            compiled = backend.compile(spec)
        except GrammarError as e:
            error = e
        except Exception as e:  # a backend bug must not take the scheduler down
            error = GrammarError(f"could not compile the {spec.kind}: {e}")
        with self._lock:
            self._num_pending -= 1
            if entry.started is not None and time.monotonic() - entry.started > self.timeout_s:
                error = GrammarError(self._refuse(spec))  # late: its waiters have given up
        if error is not None:
            raise error
        return compiled

    def _is_overdue(self, entry: _Entry) -> bool:
        """Still compiling, for longer than the limit (caller holds _lock)."""
        started = entry.started
        return (
            not entry.future.done()
            and started is not None
            and time.monotonic() - started > self.timeout_s
        )

    def _refuse(self, spec: GrammarSpec) -> str:
        """Remember `spec` as over the time limit; its message (caller holds _lock)."""
        message = _time_limit_message(spec, self.timeout_s)
        self._refused[spec] = message
        self._refused.move_to_end(spec)
        while len(self._refused) > REFUSED_SIZE:
            self._refused.popitem(last=False)
        return message


def _time_limit_message(spec: GrammarSpec, timeout_s: float) -> str:
    return f"compiling the {spec.kind} took longer than {timeout_s:g} s"


def _is_failed(fut: Future[Any]) -> bool:
    return fut.done() and (fut.cancelled() or fut.exception() is not None)


def _failed(error: GrammarError) -> Future[Any]:
    fut: Future[Any] = Future()
    fut.set_exception(error)
    return fut
