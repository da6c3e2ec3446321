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

`check` (the HTTP process's test of a spec before queueing it) asks llguidance first, which
answers in about a millisecond; outlines is compiled only for a spec llguidance refuses.
"""

from __future__ import annotations

import threading
from typing import Any

from radixrt.grammar.base import BaseGrammarBackend, BaseGrammarMatcher, GrammarError, GrammarSpec
from radixrt.grammar.llguidance_backend import LLGuidanceBackend
from radixrt.grammar.outlines_backend import OutlinesBackend
from radixrt.grammar.regex_size import is_small_regex
from radixrt.grammar.schema_regex import outlines_enforces
from radixrt.grammar.token_automaton import TokenAutomaton


class AutoBackend(BaseGrammarBackend):
    name = "auto"

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: list[int]) -> None:
        self._args = (tokenizer, vocab_size, eos_token_ids)
        self._llguidance = LLGuidanceBackend(tokenizer, vocab_size, eos_token_ids)
        # Built on the first spec it takes (~0.3 s, ~400 MB of vocabulary tables): a check
        # worker, which asks llguidance first, usually never builds it.
        self._outlines_backend: OutlinesBackend | None = None
        self._lock = threading.Lock()  # compiles run on several threads

    @property
    def _outlines(self) -> OutlinesBackend:
        with self._lock:
            if self._outlines_backend is None:
                self._outlines_backend = OutlinesBackend(*self._args)
            return self._outlines_backend

    def compile(self, spec: GrammarSpec) -> Any:
        """A TokenAutomaton (outlines) or an LLMatcher (llguidance); the latter's error when
        neither compiles the spec."""
        if spec.kind != "ebnf" and outlines_enforces(spec):
            try:
                regex = OutlinesBackend.regex_of(spec)
                if is_small_regex(regex):
                    return self._outlines.compile_regex(spec, regex)
            except GrammarError:
                pass  # outside what outlines parses: llguidance says whether it is valid
        return self._llguidance.compile(spec)

    def check(self, spec: GrammarSpec) -> None:
        try:
            self._llguidance.compile(spec)
        except GrammarError:
            self.compile(spec)  # outlines may still take it; else llguidance's error again

    def new_matcher(self, compiled: Any) -> BaseGrammarMatcher:
        if isinstance(compiled, TokenAutomaton):
            return self._outlines.new_matcher(compiled)
        return self._llguidance.new_matcher(compiled)
