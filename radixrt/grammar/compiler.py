"""GrammarCompiler: compiles specs off the caller's thread, with a time limit and an LRU cache.

Shared by the threads of one process (the scheduler loop, the Engine's callers, the HTTP event
loop); every method is thread-safe. The backend is built on first use (~0.5 s for a 50k
vocabulary), on the worker thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from radixrt.grammar import create_grammar_backend
from radixrt.grammar.base import BaseGrammarBackend, BaseGrammarMatcher, GrammarError, GrammarSpec

CACHE_SIZE = 256  # compiled grammars kept, least recently used dropped first
NUM_WORKERS = 2


def make_grammar_compiler(
    config: Any, tokenizer: Any, vocab_size: int, eos_token_ids: list[int]
) -> GrammarCompiler:
    """The backend named by `config.grammar_backend` (a SchedulerConfig) behind a compile cache
    with `config.grammar_timeout_s`; the backend itself is built on first use."""
    name = config.grammar_backend
    return GrammarCompiler(
        lambda: create_grammar_backend(name, tokenizer, vocab_size, eos_token_ids),
        config.grammar_timeout_s,
    )


class GrammarCompiler:
    """`submit` returns a future of the compiled grammar; `compile` waits for it (bounded)."""

    def __init__(self, make_backend: Callable[[], BaseGrammarBackend], timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._make_backend = make_backend
        self._backend: BaseGrammarBackend | None = None
        self._lock = threading.Lock()  # guards _cache
        self._backend_lock = threading.Lock()  # held while the backend is built
        self._cache: OrderedDict[GrammarSpec, Future[Any]] = OrderedDict()
        self._pool = ThreadPoolExecutor(NUM_WORKERS, thread_name_prefix="radixrt-grammar")

    def submit(self, spec: GrammarSpec) -> Future[Any]:
        """The compiled grammar of `spec`, cached or being compiled; its exception is a
        GrammarError. A failed compile is not cached."""
        with self._lock:
            fut = self._cache.get(spec)
            if fut is not None and not (fut.done() and fut.exception() is not None):
                self._cache.move_to_end(spec)
                return fut
            fut = self._pool.submit(self._compile, spec)
            self._cache[spec] = fut
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
            return fut

    def compile(self, spec: GrammarSpec) -> Any:
        """Compile (or fetch) `spec` in the time limit; GrammarError if it fails or times out.
        Building the backend on first use is not counted against the limit."""
        self.backend  # noqa: B018 - built here, outside the timed wait
        fut = self.submit(spec)
        try:
            return fut.result(timeout=self.timeout_s)
        except FutureTimeout:
            with self._lock:
                if self._cache.get(spec) is fut:
                    del self._cache[spec]
            raise GrammarError(
                f"compiling the {spec.kind} took longer than {self.timeout_s:g} s"
            ) from None

    def new_matcher(self, compiled: Any) -> BaseGrammarMatcher:
        return self.backend.new_matcher(compiled)

    @property
    def backend(self) -> BaseGrammarBackend:
        if self._backend is None:
            with self._backend_lock:
                if self._backend is None:
                    self._backend = self._make_backend()
        return self._backend

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compile(self, spec: GrammarSpec) -> Any:
        try:
            return self.backend.compile(spec)
        except GrammarError:
            raise
        except Exception as e:  # a backend bug must not take the scheduler down
            raise GrammarError(f"could not compile the {spec.kind}: {e}") from None
