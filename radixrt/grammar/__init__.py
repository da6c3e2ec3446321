"""Grammar backends for constrained decoding, chosen by name; each is imported only when chosen.

Every backend is constructed as `cls(tokenizer, vocab_size, eos_token_ids)` with a Hugging Face
fast tokenizer and the model's logit width (which may exceed the tokenizer's vocabulary).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from radixrt.grammar.base import BaseGrammarBackend

# name -> "module:class"; the first is the default.
GRAMMAR_BACKENDS: dict[str, str] = {
    "auto": "radixrt.grammar.auto_backend:AutoBackend",
    "llguidance": "radixrt.grammar.llguidance_backend:LLGuidanceBackend",
    "outlines": "radixrt.grammar.outlines_backend:OutlinesBackend",
}
DEFAULT_GRAMMAR_BACKEND = "auto"


def create_grammar_backend(
    name: str,
    tokenizer: Any,
    vocab_size: int,
    eos_token_ids: list[int],
    branch_cache_bytes: int | None = None,
) -> BaseGrammarBackend:
    """Import and construct the backend registered as `name`; ValueError if unknown.
    `branch_cache_bytes` bounds a backend's cache of compiled automata, where it has one
    (`has_branch_cache`); None: its default."""
    if name not in GRAMMAR_BACKENDS:
        known = sorted(GRAMMAR_BACKENDS)
        raise ValueError(f"unknown grammar backend {name!r}; choose from {known}")
    module_name, cls_name = GRAMMAR_BACKENDS[name].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    if branch_cache_bytes is not None and getattr(cls, "has_branch_cache", False):
        return cls(tokenizer, vocab_size, eos_token_ids, branch_cache_bytes=branch_cache_bytes)
    return cls(tokenizer, vocab_size, eos_token_ids)
