"""The cache of compiled regex automata is bounded by bytes (TokenAutomaton.nbytes), least
recently used dropped first, and takes its bound from SchedulerConfig."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from radixrt.core.config import SchedulerConfig
from radixrt.grammar import create_grammar_backend
from radixrt.grammar.branches import BranchCache
from radixrt.serve.http.args import parse_args


class _Automaton:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def _compiled(cache: BranchCache, regex: str) -> Any:
    branch = cache.branch(regex)
    cache.compile_here(branch)
    return branch.future.result()


def test_the_least_recently_used_go_past_the_byte_bound() -> None:
    sizes = {"a": 400, "b": 300, "c": 200, "big": 5000}
    cache = BranchCache(lambda regex: _Automaton(sizes[regex]), max_bytes=1000)  # type: ignore[arg-type, return-value]
    a = _compiled(cache, "a")
    _compiled(cache, "b")
    assert cache.nbytes == 700
    assert cache.branch("a").future.result() is a  # a hit: "a" is the most recent now
    _compiled(cache, "c")  # 900: all kept
    assert cache.nbytes == 900
    _compiled(cache, "b")  # cached: nothing new
    cache2 = cache.branch("d")  # pending: no bytes yet, nothing dropped
    assert not cache2.future.done() and cache.nbytes == 900
    sizes["d"] = 300
    cache.compile_here(cache2)  # 1200: "a" (least recently used) goes, then within bound
    assert cache.nbytes == 800
    assert cache.branch("a").future.done() is False  # dropped: a new, uncompiled branch
    assert cache.nbytes == 800
    _compiled(cache, "big")  # larger than the bound alone: dropped with everything older
    assert cache.nbytes == 0
    assert not cache.branch("c").future.done()


def test_the_bound_is_config(smollm2_path: Path) -> None:
    from radixrt.model.families.loader import load_tokenizer

    assert SchedulerConfig().grammar_branch_cache_mb == 512
    mb = parse_args(["--grammar-branch-cache-mb", "3"]).scheduler.grammar_branch_cache_mb
    assert mb == 3
    tok = load_tokenizer(smollm2_path)
    backend: Any = create_grammar_backend("auto", tok, 49152, [2], mb * 2**20)
    assert backend._branches._max_bytes == 3 * 2**20
    automaton = _compiled(backend._branches, "(yes|no)")
    assert 0 < automaton.nbytes == backend._branches.nbytes
