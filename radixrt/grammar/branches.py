"""Token automata by regex, compiled once and shared: the branches of union grammars
(union.py) and every regex the `auto` backend gives outlines, so that a tool's named call and
a forced choice over a list holding it compile that tool's automaton once.

An entry is claimed by the thread that compiles it (the background worker, or a caller
compiling it itself); others wait on its future. Failed compiles are dropped
on the next lookup; the least recently used entries past `size` entries or `max_bytes` of
compiled automata (TokenAutomaton.nbytes) are dropped from the cache (grammars holding them
keep them alive)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from radixrt.grammar.base import GrammarError
from radixrt.grammar.token_automaton import TokenAutomaton

CACHE_SIZE = 64  # automata of a few to ~30 MB each (12 bytes per edge)
CACHE_BYTES = 512 * 2**20  # SchedulerConfig.grammar_branch_cache_mb's default
NUM_WORKERS = 1  # outlines' compile holds the GIL: more threads would not compile faster


class Branch:
    """One regex's automaton: `future` is set by whichever thread claimed the compile."""

    __slots__ = ("claimed", "future", "regex")

    def __init__(self, regex: str) -> None:
        self.regex = regex
        self.claimed = False
        self.future: Future[TokenAutomaton] = Future()


class BranchCache:
    """regex -> Branch; thread-safe."""

    def __init__(
        self,
        compile_regex: Callable[[str], TokenAutomaton],
        size: int = CACHE_SIZE,
        max_bytes: int = CACHE_BYTES,
    ) -> None:
        self._compile = compile_regex
        self._size = size
        self._max_bytes = max_bytes
        self._lock = threading.Lock()  # guards the three below and every branch's `claimed`
        self._entries: OrderedDict[str, Branch] = OrderedDict()
        self._sizes: dict[str, int] = {}  # regex -> bytes, for cached entries compiled well
        self._bytes = 0  # sum of _sizes
        self._pool = ThreadPoolExecutor(NUM_WORKERS, thread_name_prefix="radixrt-branch")

    @property
    def nbytes(self) -> int:
        """Bytes of the compiled automata the cache holds."""
        return self._bytes

    def branch(self, regex: str) -> Branch:
        """The cached branch of `regex` (a new, unclaimed one if none, or if it failed)."""
        with self._lock:
            branch = self._entries.get(regex)
            failed = branch is not None and branch.future.done() and branch.future.exception()
            if branch is None or failed:
                branch = self._entries[regex] = Branch(regex)
            self._entries.move_to_end(regex)
            self._shrink()
            return branch

    def _shrink(self) -> None:
        """Drop the least recently used entries past either bound (caller holds _lock)."""
        while len(self._entries) > self._size or self._bytes > self._max_bytes:
            regex, _ = self._entries.popitem(last=False)
            self._bytes -= self._sizes.pop(regex, 0)

    def _account(self, branch: Branch) -> None:
        """Count a branch compiled well while it is cached, and keep within the bounds."""
        with self._lock:
            if self._entries.get(branch.regex) is not branch:
                return  # dropped (or replaced) while it compiled
            size = branch.future.result().nbytes
            self._sizes[branch.regex] = size
            self._bytes += size
            self._shrink()

    def compile_here(self, branch: Branch) -> bool:
        """Compile `branch` on this thread unless someone claimed it; False if someone had."""
        if not self._claim(branch):
            return False
        self._run(branch)
        return True

    def prefetch(self, branch: Branch) -> None:
        """Have a background worker compile `branch` unless someone claims it first."""
        if not branch.claimed:
            self._pool.submit(self.compile_here, branch)

    def _claim(self, branch: Branch) -> bool:
        with self._lock:
            if branch.claimed:
                return False
            branch.claimed = True
            return True

    def _run(self, branch: Branch) -> None:
        """Compile into `branch` (its claimant only); never raises."""
        try:
            automaton = self._compile(branch.regex)
        except GrammarError as e:
            branch.future.set_exception(e)
            return
        except Exception as e:  # a backend bug fails this regex's waiters, not the thread
            branch.future.set_exception(GrammarError(f"could not compile the regex: {e}"))
            return
        branch.future.set_result(automaton)
        self._account(branch)
