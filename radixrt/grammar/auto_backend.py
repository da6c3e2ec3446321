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

Every outlines automaton is compiled by one background worker and cached by regex
(branches.py): a compile thread cannot be stopped, so the caller waits for it only up to a
share of its time limit (UNION_WAIT_SHARE); past it, the spec's matchers use llguidance's
compile of it (no length bound) until the automaton is ready, never a refusal. A regex too
big as a whole whose top-level branches are each small enough for a branch
(BRANCH_MAX_COUNTED: compiled once for every spec holding it), such as a forced call over
many tools (one branch per tool, each the regex of that tool's named call), is matched as the
union of its branches' automata (union.py), so its length bound holds too.

`check` (the HTTP process's test of a spec before queueing it) asks llguidance first, which
answers in about a millisecond; outlines is compiled only for a spec llguidance refuses.
"""

from __future__ import annotations

import threading
from concurrent.futures import wait
from typing import Any

from radixrt.grammar.base import BaseGrammarBackend, BaseGrammarMatcher, GrammarError, GrammarSpec
from radixrt.grammar.branches import CACHE_BYTES, BranchCache
from radixrt.grammar.llguidance_backend import LLGuidanceBackend
from radixrt.grammar.outlines_backend import OutlinesBackend
from radixrt.grammar.regex_size import MAX_COUNTED, is_small_regex
from radixrt.grammar.schema_regex import outlines_enforces
from radixrt.grammar.token_automaton import TokenAutomaton
from radixrt.grammar.union import UnionGrammar, UnionMatcher, split_alternatives

BRANCH_MAX_COUNTED = 2 * MAX_COUNTED  # a branch's counted repetitions (~2 s to compile)
UNION_WAIT_SHARE = 0.4  # of time_limit_s: how long a compile waits for its automata


class AutoBackend(BaseGrammarBackend):
    name = "auto"
    has_branch_cache = True

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        eos_token_ids: list[int],
        branch_cache_bytes: int = CACHE_BYTES,
    ) -> None:
        self._args = (tokenizer, vocab_size, eos_token_ids)
        self._eos = list(eos_token_ids)
        self._llguidance = LLGuidanceBackend(tokenizer, vocab_size, eos_token_ids)
        # Built on the first spec it takes (~0.3 s, ~400 MB of vocabulary tables): a check
        # worker, which asks llguidance first, usually never builds it.
        self._outlines_backend: OutlinesBackend | None = None
        self._lock = threading.Lock()  # compiles run on several threads
        self._branches = BranchCache(self._compile_outlines, max_bytes=branch_cache_bytes)

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
                branches = [regex] if is_small_regex(regex) else split_alternatives(regex)
                if all(is_small_regex(b, BRANCH_MAX_COUNTED) for b in branches):
                    return self._union(spec, branches)
            except GrammarError:
                pass  # outside what outlines parses: llguidance says whether it is valid
        return self._llguidance.compile(spec)

    def _union(self, spec: GrammarSpec, regexes: list[str]) -> Any:
        """The branches' automata (the automaton itself for one), compiled by the branch
        cache's worker and waited for up to a share of the time limit (a compile thread
        cannot be stopped, so none runs on the caller's); past it, a UnionGrammar whose
        matchers use llguidance's compile of the whole until every branch is ready."""
        limit = self.time_limit_s
        wait_s = None if limit is None else UNION_WAIT_SHARE * limit  # None: until done
        branches = [self._branches.branch(r) for r in dict.fromkeys(regexes)]
        for branch in branches:
            self._branches.prefetch(branch)
        grammar = UnionGrammar(tuple(b.future for b in branches))
        wait(grammar.branches, timeout=wait_s)
        automata = grammar.automata()
        if automata is not None:
            return automata[0] if len(automata) == 1 else grammar
        return UnionGrammar(grammar.branches, self._llguidance.compile(spec))

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
            if automata is not None and len(automata) == 1:
                return self._outlines.new_matcher(automata[0])
            if automata is not None:
                return UnionMatcher(automata, self._eos)
            return self._llguidance.new_matcher(compiled.fallback)
        return self._llguidance.new_matcher(compiled)
