"""auto: each spec on the backend that serves it best. Regexes and JSON schemas go to outlines
when its token automaton is small and enforces the whole spec, since only that backend bounds
an output's length (an output always ends complete within its token budget); everything else
(ebnf grammars, schemas with keywords the regex does not enforce, numeric bounds it cannot
write over the digits (schema_bounds.py), large counted repetitions, specs outlines cannot
compile) goes to llguidance.

Small (regex_size.is_small_regex): its DFA has fewer than MAX_DFA_STATES states (counted in
milliseconds and with a cap: a DFA can be exponential in its regex, and a compile thread
cannot be stopped), and the counted repetitions of the regex (`{m,n}`, as a JSON schema's
maxLength becomes) add up to at most MAX_COUNTED. Each count multiplies automaton states,
and a state inside a string has an edge for most of the vocabulary: three strings bounded at
24, 24 and 16 characters make ~760 states, 2.4 million edges and ~1.3 s of compiling on one
core of the 2-core test machine, where llguidance takes ~1 ms (an unbounded string: ~150
states, 0.1 s).

A regex too big as a whole whose top level is a choice of branches each small enough for a
branch (BRANCH_MAX_COUNTED: a branch compiles once for every spec holding it), such as a
forced call over many tools (one branch per tool) or one large tool's call, is matched as the
union of its branches' automata (union.py), each compiled once and cached by regex
(branches.py). The compile waits for them up to a share of the caller's time limit; past it
the rest compile in the background, and the spec's matchers use llguidance (no length bound)
until they are ready.

`check` (the HTTP process's test of a spec before queueing it) asks llguidance first, which
answers in about a millisecond; outlines is compiled only for a spec llguidance refuses.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import wait
from typing import Any

from radixrt.grammar.base import BaseGrammarBackend, BaseGrammarMatcher, GrammarError, GrammarSpec
from radixrt.grammar.branches import BranchCache
from radixrt.grammar.llguidance_backend import LLGuidanceBackend
from radixrt.grammar.outlines_backend import OutlinesBackend
from radixrt.grammar.regex_size import MAX_COUNTED, is_small_regex
from radixrt.grammar.schema_regex import outlines_enforces
from radixrt.grammar.token_automaton import TokenAutomaton
from radixrt.grammar.union import UnionGrammar, UnionMatcher, split_alternatives

BRANCH_MAX_COUNTED = 2 * MAX_COUNTED  # a branch's counted repetitions (~2 s to compile)
UNION_WAIT_SHARE = 0.4  # of time_limit_s: how long a union's compile waits for its branches
UNION_WAIT_S = 4.0  # without a time limit


class AutoBackend(BaseGrammarBackend):
    name = "auto"

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: list[int]) -> None:
        self._args = (tokenizer, vocab_size, eos_token_ids)
        self._eos = list(eos_token_ids)
        self._llguidance = LLGuidanceBackend(tokenizer, vocab_size, eos_token_ids)
        # Built on the first spec it takes (~0.3 s, ~400 MB of vocabulary tables): a check
        # worker, which asks llguidance first, usually never builds it.
        self._outlines_backend: OutlinesBackend | None = None
        self._lock = threading.Lock()  # compiles run on several threads
        self._branches = BranchCache(self._compile_outlines)

    @property
    def _outlines(self) -> OutlinesBackend:
        with self._lock:
            if self._outlines_backend is None:
                self._outlines_backend = OutlinesBackend(*self._args)
            return self._outlines_backend

    def compile(self, spec: GrammarSpec) -> Any:
        """A TokenAutomaton (outlines), a UnionGrammar of them, or an LLMatcher (llguidance);
        the latter's error when neither compiles the spec."""
        if spec.kind != "ebnf" and outlines_enforces(spec):
            try:
                regex = OutlinesBackend.regex_of(spec)
                if is_small_regex(regex):
                    return self._branches.get(regex)
                branches = split_alternatives(regex)
                if all(is_small_regex(b, BRANCH_MAX_COUNTED) for b in branches):
                    return self._union(spec, branches)
            except GrammarError:
                pass  # outside what outlines parses: llguidance says whether it is valid
        return self._llguidance.compile(spec)

    def _union(self, spec: GrammarSpec, regexes: list[str]) -> UnionGrammar:
        """The small branches compiled here, one after another, until the wait is spent
        (others' compiles of them are waited for in what is left); the rest in the
        background, with llguidance's compile of the whole as the fallback until they are
        ready. A compile thread cannot be stopped: one small branch past the wait at most."""
        limit = self.time_limit_s
        deadline = time.monotonic() + (UNION_WAIT_S if limit is None else UNION_WAIT_SHARE * limit)
        branches = [self._branches.branch(r) for r in dict.fromkeys(regexes)]
        for branch in branches:
            if time.monotonic() >= deadline:
                break
            if is_small_regex(branch.regex):  # a larger one could overrun the limit alone
                self._branches.compile_here(branch)
        futures = tuple(b.future for b in branches)
        wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        grammar = UnionGrammar(futures)
        if grammar.automata() is not None:
            return grammar
        for branch in branches:
            self._branches.prefetch(branch)
        return UnionGrammar(futures, self._llguidance.compile(spec))

    def _compile_outlines(self, regex: str) -> TokenAutomaton:
        return self._outlines.compile_regex(GrammarSpec("regex", regex), regex)

    def check(self, spec: GrammarSpec) -> None:
        try:
            self._llguidance.compile(spec)
        except GrammarError:
            self.compile(spec)  # outlines may still take it; else llguidance's error again

    def new_matcher(self, compiled: Any) -> BaseGrammarMatcher:
        if isinstance(compiled, TokenAutomaton):
            return self._outlines.new_matcher(compiled)
        if isinstance(compiled, UnionGrammar):
            automata = compiled.automata()
            if automata is not None:
                return UnionMatcher(automata, self._eos)
            return self._llguidance.new_matcher(compiled.fallback)
        return self._llguidance.new_matcher(compiled)
