"""llguidance: regexes, JSON schemas and Lark grammars compiled lazily by an Earley parser.

Compiling is building an `LLMatcher` (usually ~1 ms); matchers for a request are deep copies
of the compiled one. `ebnf` specs are Lark grammars, or GBNF (`root ::= ...`: llama.cpp's,
xgrammar's and SGLang's EBNF), which llguidance's converter turns into Lark first.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.gbnf_to_lark

from radixrt.grammar.base import (
    CANONICAL_JSON,
    BaseGrammarBackend,
    BaseGrammarMatcher,
    GrammarError,
    GrammarSpec,
)
from radixrt.grammar.llguidance_vocab import llguidance_tokenizer

if TYPE_CHECKING:
    import torch


# JSON is written in the canonical layout (base.JsonLayout); fixed separators are forced
# tokens. A schema's own "x-guidance" options override these.
_JSON_OPTIONS = CANONICAL_JSON.guidance()


# GBNF's converter (pure Python) takes time quadratic in the rules: 800 take about 0.16 s,
# 6,000 about 9 s. More rules than this are refused before it runs.
MAX_GBNF_RULES = 512
_GBNF_RULE = re.compile(r"(?m)^\s*[A-Za-z_][\w.-]*\s*::=")


def as_lark(text: str) -> str:
    """An `ebnf` spec as Lark: GBNF (a line `name ::= ...`, not Lark's `start:`) converted,
    at most MAX_GBNF_RULES rules (ValueError); Lark as it is."""
    rules = len(_GBNF_RULE.findall(text))
    if not rules or llguidance.gbnf_to_lark.is_lark_syntax(text):
        return text
    if rules > MAX_GBNF_RULES:
        raise ValueError(f"a GBNF grammar of {rules} rules; at most {MAX_GBNF_RULES}")
    return str(llguidance.gbnf_to_lark.gbnf_to_lark(text))


class LLGuidanceMatcher(BaseGrammarMatcher):
    def __init__(self, matcher: llguidance.LLMatcher) -> None:
        self._matcher = matcher

    def fill_mask(self, bitmask: torch.Tensor, row: int, budget: int | None = None) -> None:
        """The Earley parser cannot say how far the end is: `budget` is not used."""
        dst = bitmask[row]
        self._matcher.unsafe_compute_mask_ptr(dst.data_ptr(), dst.numel() * 4)

    def is_accepting(self) -> bool:
        return bool(self._matcher.is_accepting())

    def stuck(self) -> bool:
        return not self.is_accepting() and bool(self._matcher.is_error())

    def accept(self, token_id: int) -> bool:
        return self._matcher.consume_token(token_id)

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > 0 and not self._matcher.rollback(num_tokens):
            raise RuntimeError(f"the grammar could not roll back {num_tokens} tokens")


class LLGuidanceBackend(BaseGrammarBackend):
    name = "llguidance"

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: list[int]) -> None:
        # ~0.5 s for a 50k vocabulary: done once per process.
        self._tokenizer = llguidance_tokenizer(tokenizer, vocab_size, list(eos_token_ids))

    def compile(self, spec: GrammarSpec) -> llguidance.LLMatcher:
        try:
            if spec.kind == "regex":
                grammar = llguidance.LLMatcher.grammar_from_regex(spec.text)
            elif spec.kind == "json_schema":
                grammar = llguidance.LLMatcher.grammar_from_json_schema(
                    spec.text, defaults=_JSON_OPTIONS
                )
            else:
                grammar = llguidance.LLMatcher.grammar_from_lark(as_lark(spec.text))
        except (ValueError, llguidance.gbnf_to_lark.GbnfToLarkError) as e:
            raise GrammarError(f"invalid {spec.kind}: {e}") from None
        matcher = llguidance.LLMatcher(self._tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise GrammarError(f"invalid {spec.kind}: {matcher.get_error()}")
        return matcher

    def new_matcher(self, compiled: llguidance.LLMatcher) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(compiled.deep_copy())
