"""Program: a decorated function run against a backend, alone, in a batch, or under asyncio."""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from radixrt_lang.backends import BaseBackend, as_backend
from radixrt_lang.interpreter import StateExecutor
from radixrt_lang.ir import DEFAULT_PARAMS, SamplingParams
from radixrt_lang.state import ProgramState
from radixrt_lang.tracer import constant_prefix

MAX_BATCH_THREADS = 64

_default_backend: BaseBackend | None = None


def set_default_backend(backend: Any) -> None:
    """The backend programs run on when `run` is not given one (a backend or an Engine)."""
    global _default_backend
    _default_backend = None if backend is None else as_backend(backend)


def get_default_backend() -> BaseBackend | None:
    return _default_backend


class Program:
    """A program: `func(s, *args, **kwargs)` appends to the state `s`.

    Keyword arguments of `run` that name sampling parameters (`temperature`,
    `max_new_tokens`, ...) and are not parameters of `func` become the program's defaults,
    which each `gen` may override.
    """

    def __init__(self, func: Callable[..., Any], bound: dict[str, Any] | None = None) -> None:
        self.func = func
        self.bound = dict(bound or {})
        self._arg_names = set(list(inspect.signature(func).parameters)[1:])
        functools.update_wrapper(self, func)

    def bind(self, **kwargs: Any) -> Program:
        """A program with these arguments fixed."""
        return Program(self.func, {**self.bound, **kwargs})

    def __call__(self, s: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the function on a state directly: programs compose as plain functions."""
        return self.func(s, *args, **{**self.bound, **kwargs})

    # ---- running -------------------------------------------------------------------------

    def run(
        self, *args: Any, stream: bool = False, backend: Any = None, **kwargs: Any
    ) -> ProgramState:
        """Run once; raises the first error (naming the failing primitive). With
        `stream=True` it returns at once and `state.text_iter()` follows the generation."""
        kwargs, sampling = self._split(kwargs)
        state = self._new_state(backend, sampling, stream)
        if stream:
            threading.Thread(
                target=self._execute,
                args=(state, args, kwargs),
                name="radixrt-lang-program",
                daemon=True,
            ).start()
            return state
        self._execute(state, args, kwargs)
        return _raise_error(state)

    def run_batch(
        self,
        batch_kwargs: Sequence[dict[str, Any]],
        *,
        num_threads: int | str = "auto",
        progress_bar: bool = False,
        backend: Any = None,
        **sampling: Any,
    ) -> list[ProgramState]:
        """Run once per kwargs dict, concurrently; states come back in input order, each with
        its own `error()`. The program's constant prefix is sent once first."""
        items = [self._split(dict(kw)) for kw in batch_kwargs]
        resolved = self._backend(backend)
        self.cache_prefix(resolved)
        states = [self._new_state(resolved, {**sampling, **s}, False) for _, s in items]

        def one(i: int) -> None:
            self._execute(states[i], (), items[i][0])
            states[i].sync()

        threads = _num_threads(num_threads, len(states))
        with ThreadPoolExecutor(max_workers=threads) as pool:
            futures = [pool.submit(one, i) for i in range(len(states))]
            for f in _progress(as_completed(futures), len(futures), progress_bar):
                f.result()
        return states

    async def arun(self, *args: Any, backend: Any = None, **kwargs: Any) -> ProgramState:
        """Run under asyncio without blocking the loop; an `async def` program runs on the
        loop itself (use `await s.aget("x")` there). Raises like `run`."""
        return _raise_error(await self._arun_state(args, kwargs, self._backend(backend)))

    async def arun_batch(
        self,
        batch_kwargs: Sequence[dict[str, Any]],
        *,
        max_concurrency: int = MAX_BATCH_THREADS,
        backend: Any = None,
        **sampling: Any,
    ) -> list[ProgramState]:
        """`run_batch` under asyncio: input order, errors in each state's `error()`."""
        resolved = self._backend(backend)
        await asyncio.to_thread(self.cache_prefix, resolved)
        limit = asyncio.Semaphore(max_concurrency)

        async def one(kw: dict[str, Any]) -> ProgramState:
            async with limit:
                return await self._arun_state((), {**sampling, **kw}, resolved)

        return list(await asyncio.gather(*(one(dict(kw)) for kw in batch_kwargs)))

    def cache_prefix(self, backend: Any = None) -> str:
        """Trace the program's constant prefix and send it once to be cached; returns it."""
        resolved = self._backend(backend)
        prefix = constant_prefix(self.func, self.bound, resolved)
        if prefix:
            resolved.cache_prefix(prefix)
        return prefix

    # ---- helpers -------------------------------------------------------------------------

    def _split(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the function's arguments, the sampling defaults) from run's keyword arguments."""
        names = SamplingParams.names()
        sampling = {k: v for k, v in kwargs.items() if k in names and k not in self._arg_names}
        return {k: v for k, v in kwargs.items() if k not in sampling}, sampling

    def _backend(self, backend: Any) -> BaseBackend:
        resolved = backend if backend is not None else _default_backend
        if resolved is None:
            raise RuntimeError("no backend: pass backend= or call rt.set_default_backend(...)")
        return as_backend(resolved)

    def _new_state(self, backend: Any, sampling: dict[str, Any], stream: bool) -> ProgramState:
        defaults = SamplingParams.from_kwargs(sampling).merged(DEFAULT_PARAMS)
        return ProgramState(StateExecutor(self._backend(backend), defaults, stream))

    def _execute(self, state: ProgramState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Call the function; whatever it raises is recorded on the state, never raised."""
        try:
            result = self.func(state, *args, **{**self.bound, **kwargs})
            if inspect.isawaitable(result):
                _run_coroutine(result)
        except BaseException as e:  # noqa: BLE001 - reported by run() / state.error()
            state._ex.close(e)
        else:
            state._ex.close()

    async def _arun_state(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], backend: BaseBackend
    ) -> ProgramState:
        kwargs, sampling = self._split(kwargs)
        state = self._new_state(backend, sampling, False)
        if not inspect.iscoroutinefunction(self.func):
            await asyncio.to_thread(self._execute, state, args, kwargs)
        else:
            try:
                await self.func(state, *args, **{**self.bound, **kwargs})
            except Exception as e:  # noqa: BLE001 - reported by arun() / state.error()
                state._ex.close(e)
            else:
                state._ex.close()
        await asyncio.to_thread(state.sync)
        return state

    def __repr__(self) -> str:
        return f"<radixrt program {self.func.__name__}>"


def function(func: Callable[..., Any] | None = None) -> Any:
    """Decorator: `@rt.function def prog(s, ...): ...` (also `@rt.function()`)."""
    if func is None:
        return function
    return Program(func)


def _raise_error(state: ProgramState) -> ProgramState:
    error = state.error()
    if error is not None:
        raise error
    return state


def _run_coroutine(coro: Any) -> None:
    """Run an `async def` program from synchronous code, even inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(_await(coro))
        return
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(_await(coro))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(e)

    t = threading.Thread(target=target, name="radixrt-lang-async")
    t.start()
    t.join()
    if errors:
        raise errors[0]


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _num_threads(num_threads: int | str, n: int) -> int:
    if num_threads == "auto":
        return max(1, min(n, MAX_BATCH_THREADS, 16 * (os.cpu_count() or 1)))
    if not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be 'auto' or an integer >= 1, got {num_threads!r}")
    return min(num_threads, max(n, 1))


def _progress(it: Any, total: int, enabled: bool) -> Any:
    if not enabled:
        return it
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return it
    return tqdm(it, total=total)
