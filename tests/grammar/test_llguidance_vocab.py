"""llguidance's vocabulary (grammar/llguidance_vocab.py): added tokens that are not special
(Qwen's `<tool_call>`, `<think>`) are text a grammar's literal or free text may use, the
special ones stay special, and a tokenizer without such tokens keeps llguidance's own view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AddedToken

from radixrt.grammar import create_grammar_backend
from radixrt.grammar.base import GrammarSpec
from radixrt.grammar.llguidance_vocab import llguidance_tokenizer, text_added_tokens
from radixrt.model.families.loader import load_tokenizer

VOCAB = 49216  # the model's rows: more than the tokenizer's 49155
EOS = 2
WORDS = ("<tool_call>", "</tool_call>", "<think>")


@pytest.fixture(scope="module")
def tokenizer(smollm2_path: Path) -> Any:
    tok = load_tokenizer(smollm2_path)
    tok.add_tokens([AddedToken(w, special=False, normalized=False) for w in WORDS])
    return tok


def _allowed(matcher: Any) -> set[int]:
    mask = torch.zeros(1, (VOCAB + 31) // 32, dtype=torch.int32)
    matcher.fill_mask(mask, 0)
    bits = (mask[0, :, None] >> torch.arange(32, dtype=torch.int32)) & 1
    return set(bits.flatten().nonzero()[:, 0].tolist())


def _walk(matcher: Any, ids: list[int]) -> None:
    for t in ids:
        assert t in _allowed(matcher), t
        assert matcher.accept(t) and not matcher.stuck(), t


def test_the_default_tokenizer_keeps_llguidances_vocabulary(smollm2_path: Path) -> None:
    tok = load_tokenizer(smollm2_path)
    assert text_added_tokens(tok, 49152) == set()
    llt = llguidance_tokenizer(tok, 49152, [EOS])
    assert llt.is_special_token(EOS) and not llt.is_special_token(198)


@pytest.mark.parametrize("backend_name", ["llguidance", "auto"])
def test_added_text_tokens_write_literals_and_free_text(tokenizer: Any, backend_name: str) -> None:
    opener, closer, think = tokenizer.convert_tokens_to_ids(list(WORDS))
    llt = llguidance_tokenizer(tokenizer, VOCAB, [EOS])
    assert not any(llt.is_special_token(i) for i in (opener, closer, think))
    assert llt.is_special_token(EOS) and llt.decode_bytes([opener]) == b"<tool_call>"
    backend = create_grammar_backend(backend_name, tokenizer, VOCAB, [EOS])
    # A literal is written with the token the tokenizer writes for it (which llguidance
    # offered before, and then refused), up to the closing one.
    text = '<tool_call>\n{"a":1}\n</tool_call>'
    ids = tokenizer(text).input_ids
    assert ids[0] == opener and ids[-1] == closer
    regex = GrammarSpec("regex", r'<tool_call>\n\{"a":[0-9]\}\n</tool_call>')
    matcher = backend.new_matcher(backend.compile(regex))
    _walk(matcher, ids)
    assert matcher.is_accepting()
    # Free text may hold the tokens; special tokens stay out of it.
    lark = GrammarSpec("ebnf", 'start: "<think>" TEXT\nTEXT: /(.|\\n)*/\n')
    matcher = backend.new_matcher(backend.compile(lark))
    _walk(matcher, [think, *tokenizer("Hmm ").input_ids, opener])
    allowed = _allowed(matcher)
    assert (
        closer in allowed
        and think in allowed
        and tokenizer.convert_tokens_to_ids("<|im_start|>") not in allowed
    )
