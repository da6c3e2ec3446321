"""Fixtures of the grammar tests: the default model's tokenizer, once per module, and each
grammar backend over it (the model's 49152 logit rows, EOS 2). A module that needs another
tokenizer (added tokens) defines its own `tokenizer`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from radixrt.grammar import GRAMMAR_BACKENDS, create_grammar_backend
from radixrt.grammar.base import BaseGrammarBackend

VOCAB = 49152
EOS = 2


@pytest.fixture(scope="module")
def tokenizer(smollm2_path: Path) -> Any:
    from radixrt.model.families.loader import load_tokenizer

    return load_tokenizer(smollm2_path)


@pytest.fixture(scope="module", params=sorted(GRAMMAR_BACKENDS))
def backend(request: pytest.FixtureRequest, tokenizer: Any) -> BaseGrammarBackend:
    return create_grammar_backend(request.param, tokenizer, VOCAB, [EOS])
