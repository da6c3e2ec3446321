"""The HTTP side's grammar check on the tiny Llama's tokenizer: worker processes killed at the
time limit and replaced, the verdict cache, the pending and size bounds; and GrammarCompiler's
refusal of a spec that ran past its limit."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from radixrt.core import SamplingParams
from radixrt.core.config import SchedulerConfig
from radixrt.core.messages import ReadyMsg
from radixrt.grammar.base import BaseGrammarBackend, BaseGrammarMatcher, GrammarError, GrammarSpec
from radixrt.grammar.compiler import GrammarCompiler
from radixrt.serve.http import grammar_check
from radixrt.serve.http.grammar_check import GrammarBusyError, GrammarChecker, GrammarWorkerError
from radixrt.serve.http.protocol import BadRequestError

VOCAB = 49152
SLOW = "[a-z]{1,20000}"  # outlines builds its automaton for minutes (and ~30 MB/s)


class _Loop:
    """An event loop on its own thread, shared by a module's tests (workers outlive a test)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout_s: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def check(self, checker: GrammarChecker, regex: str) -> float:
        """Seconds `checker` took to pass `regex`; raises what the check raised."""
        t0 = time.perf_counter()
        self.run(checker.check([SamplingParams(regex=regex)]))
        return time.perf_counter() - t0

    def refusal(self, checker: GrammarChecker, regex: str) -> tuple[str, float]:
        """The BadRequestError message for `regex`, and the seconds it took."""
        t0 = time.perf_counter()
        with pytest.raises(BadRequestError) as e:
            self.run(checker.check([SamplingParams(regex=regex)]))
        return str(e.value), time.perf_counter() - t0

    def close(self, checker: GrammarChecker) -> None:
        async def close() -> None:
            checker.close()
            await asyncio.sleep(0.2)  # let the killed workers be reaped

        self.run(close())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


@pytest.fixture(scope="module")
def loop() -> Iterator[_Loop]:
    lp = _Loop()
    yield lp
    lp.stop()


def _checker(
    path: Path, backend: str = "llguidance", timeout_s: float = 10.0, **kwargs: Any
) -> GrammarChecker:
    config = SchedulerConfig(grammar_backend=backend, grammar_timeout_s=timeout_s)
    ready = ReadyMsg(str(path), 512, 0, 512, VOCAB, "cpu", "float32")
    return GrammarChecker(config, None, ready, **kwargs)


@pytest.fixture(scope="module")
def llg(loop: _Loop, tiny_llama_path: Path) -> Iterator[GrammarChecker]:
    checker = _checker(tiny_llama_path, max_grammar_bytes=100)
    yield checker
    loop.close(checker)


def _is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _wait_for(predicate: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def test_valid_passes_invalid_is_400_and_verdicts_are_cached(loop, llg) -> None:
    loop.run(_start_and_wait(llg))
    assert len(llg.pids) == 1
    assert loop.check(llg, "[0-9]{3}-[A-Z]{2}") < 1.0
    message, _ = loop.refusal(llg, "a(b")
    assert message.startswith("invalid regex") and "a(b" in message
    # Both verdicts are remembered: answered again without a worker round trip.
    sent = [w._next_rid for w in llg._workers]
    assert loop.check(llg, "[0-9]{3}-[A-Z]{2}") < 0.01
    again, seconds = loop.refusal(llg, "a(b")
    assert again == message and seconds < 0.01
    assert [w._next_rid for w in llg._workers] == sent
    loop.run(llg.check([SamplingParams(), SamplingParams(json_schema='{"type": "integer"}')]))


def test_a_worker_killed_from_outside_is_replaced(loop, llg) -> None:
    loop.check(llg, "(yes|no)")
    (pid,) = llg.pids
    os.kill(pid, signal.SIGKILL)
    assert loop.check(llg, "(cat|dog)") < 30  # waits for the replacement to start
    _wait_for(lambda: _is_gone(pid))
    assert llg.pids and pid not in llg.pids


def test_a_compile_over_the_limit_kills_the_worker_and_is_not_retried(
    loop, tiny_llama_path
) -> None:
    checker = _checker(tiny_llama_path, "outlines", timeout_s=0.5)
    try:
        loop.run(_start_and_wait(checker))
        (pid,) = checker.pids
        message, seconds = loop.refusal(checker, SLOW)
        assert message == "compiling the regex took longer than 0.5 s"
        assert 0.5 <= seconds < 2.0  # start-up is not counted; the kill is prompt
        _wait_for(lambda: _is_gone(pid), 5)
        again, seconds = loop.refusal(checker, SLOW)
        assert again == message and seconds < 0.05  # from the cache: no worker sees it
        assert loop.check(checker, "(yes|no)") < 30  # on the replacement
        assert checker.pids and pid not in checker.pids
    finally:
        loop.close(checker)


def test_a_worker_that_dies_under_a_check_fails_it_with_a_message(loop, tiny_llama_path) -> None:
    checker = _checker(tiny_llama_path, "outlines", timeout_s=60)
    try:
        fut = asyncio.run_coroutine_threadsafe(
            checker.check([SamplingParams(regex=SLOW)]), loop.loop
        )
        for _ in range(2):  # an outside kill is retried once on a fresh worker; not twice
            _wait_for(lambda: any(w._busy for w in checker._workers))
            (busy,) = [w for w in checker._workers if w._busy]
            os.kill(busy.pid, signal.SIGKILL)
            _wait_for(lambda w=busy: not w._busy, 5)
        with pytest.raises(BadRequestError, match="exited unexpectedly"):
            fut.result(10)
        assert loop.refusal(checker, SLOW)[1] < 0.05
    finally:
        loop.close(checker)


def test_pending_checks_are_bounded_and_close_fails_them(loop, tiny_llama_path) -> None:
    checker = _checker(tiny_llama_path, max_pending=1)

    async def run() -> None:
        first = asyncio.ensure_future(checker.check([SamplingParams(regex="a+")]))
        same = asyncio.ensure_future(checker.check([SamplingParams(regex="a+")]))
        await asyncio.sleep(0.1)  # both wait for the worker to start: one compile pending
        with pytest.raises(GrammarBusyError, match="--max-pending-grammars"):
            await checker.check([SamplingParams(regex="b+")])
        checker.close()
        for fut in (first, same):
            with pytest.raises(GrammarWorkerError, match="closed"):
                await asyncio.wait_for(fut, 10)

    loop.run(run())
    loop.close(checker)


def test_a_spec_over_the_size_limit_is_refused_before_any_worker(
    loop, llg, tiny_llama_path
) -> None:
    checker = _checker(tiny_llama_path, max_grammar_bytes=100)
    big = [SamplingParams(regex="x"), SamplingParams(json_schema="é" * 51)]
    with pytest.raises(BadRequestError, match=r"102 bytes.*100.*--max-grammar-bytes"):
        loop.run(checker.check(big))
    assert checker.pids == [] and checker._workers == []  # nothing was started
    loop.run(llg.check([SamplingParams(regex="é" * 50)]))  # 100 bytes in UTF-8: allowed


def test_the_warm_worker_waits_for_no_request_in_flight(loop, tiny_llama_path) -> None:
    """A server's warm worker starts once the server has been quiet for QUIET_S, not while
    requests are in flight (its start would take cores from them)."""
    checker = _checker(tiny_llama_path)
    in_flight = [True]

    async def run() -> None:
        warm = asyncio.create_task(checker.warm_when_quiet(lambda: in_flight[0]))
        await asyncio.sleep(3 * grammar_check.QUIET_S)
        assert checker._workers == [] and not warm.done()  # busy all along: nothing started
        in_flight[0] = False
        await asyncio.wait_for(warm, 5 * grammar_check.QUIET_S)
        await checker._workers[0].wait_ready()
        assert len(checker.pids) == 1

    loop.run(run())
    loop.close(checker)


async def _start_and_wait(checker: GrammarChecker) -> None:
    t0 = time.perf_counter()
    checker.start()
    await checker._workers[0].wait_ready()
    print(f"worker start-up: {time.perf_counter() - t0:.2f} s")


# ---- GrammarCompiler (threads: the scheduler's and the Engine's) ----------------------------


class _BlockingBackend(BaseGrammarBackend):
    """Compiles to the spec's text once `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.num_compiles = 0

    def compile(self, spec: GrammarSpec) -> Any:
        self.num_compiles += 1
        self.release.wait(5)
        return spec.text

    def new_matcher(self, compiled: Any) -> BaseGrammarMatcher:
        raise NotImplementedError


def test_compiler_refuses_a_timed_out_spec_at_once() -> None:
    backend = _BlockingBackend()
    compiler = GrammarCompiler(lambda: backend, timeout_s=0.05)
    slow = GrammarSpec("regex", "slow")
    with pytest.raises(GrammarError, match="took longer than 0.05 s"):
        compiler.compile(slow)
    time.sleep(0.02)  # the wait above began a little before the compile did
    for _ in range(2):  # while it still runs, and after it finished late
        t0 = time.perf_counter()
        with pytest.raises(GrammarError, match="took longer than 0.05 s"):
            compiler.compile(slow)
        assert time.perf_counter() - t0 < 0.02
        backend.release.set()
        time.sleep(0.05)
    assert backend.num_compiles == 1
    assert compiler.compile(GrammarSpec("regex", "fast")) == "fast"
    compiler.shutdown()


def test_compiler_bounds_pending_compiles() -> None:
    backend = _BlockingBackend()
    compiler = GrammarCompiler(lambda: backend, timeout_s=5, max_pending=3)
    futures = [compiler.submit(GrammarSpec("regex", str(i))) for i in range(3)]
    busy = compiler.submit(GrammarSpec("regex", "3"))
    with pytest.raises(GrammarError, match="already compiling"):
        busy.result(0)
    assert compiler.submit(GrammarSpec("regex", "0")) is futures[0]  # a cached one still is
    backend.release.set()
    assert [f.result(5) for f in futures] == ["0", "1", "2"]
    assert compiler.compile(GrammarSpec("regex", "3")) == "3"
    compiler.shutdown()


def test_the_workers_get_the_branch_cache_bound(tiny_llama_path: Path) -> None:
    """`--grammar-branch-cache-mb` reaches the check workers' backend, not only the scheduler's."""
    import msgspec

    from radixrt.grammar.worker import WorkerArgs

    config = SchedulerConfig(grammar_backend="auto", grammar_branch_cache_mb=7)
    ready = ReadyMsg(str(tiny_llama_path), 512, 0, 512, VOCAB, "cpu", "float32")
    checker = GrammarChecker(config, None, ready)
    slot = checker._pool()[0]  # built, not started: no process yet
    args = msgspec.json.decode(slot._argv[-1], type=WorkerArgs)
    assert args.branch_cache_bytes == 7 * 2**20
    assert args.backend == "auto"
