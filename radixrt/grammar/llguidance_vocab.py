"""llguidance's view of a Hugging Face tokenizer, with added tokens that are not special read
as the text they stand for.

llguidance builds its vocabulary from the tokenizer's JSON and marks every added token that is
not in the base vocabulary as special (its bytes behind the 0xFF marker), whatever the token's
`special` flag says. Qwen's `<tool_call>`, `</tool_call>`, `<think>` and `<|fim_prefix|>` are
such tokens: ordinary text to the tokenizer, which writes them for those strings, and to the
detokenizer, which never skips them. As special tokens, a grammar's literal "<tool_call>" could
not be written with the token the model uses for it (free text could not hold it either), and
llguidance's own tokenization of a forced "<tool_call>" offered that token in the mask and
then refused it ("doesn't satisfy the grammar"), leaving the matcher stuck.

So where the tokenizer has such tokens, the vocabulary is rebuilt from llguidance's own bytes
of every token, those tokens as plain text and the rest of the special ones still special,
tokenizing with llguidance's tokenizer as before (Gemma 3's 72 HTML tags, `<table>` and the
like, are such tokens too; the rebuild adds about 1.2 s to its 5 s, once per process). Tokenizers
without them (SmolLM2) keep llguidance's vocabulary as it is."""

from __future__ import annotations

from typing import Any

import llguidance
import llguidance.hf


def llguidance_tokenizer(tokenizer: Any, vocab_size: int, eos_token_ids: list[int]) -> Any:
    """The LLTokenizer for `tokenizer` (a transformers fast tokenizer) over `vocab_size` ids
    (the model's: at least the tokenizer's), with `eos_token_ids` ending a grammar."""
    llt = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=eos_token_ids)
    texts = {i for i in text_added_tokens(tokenizer, vocab_size) if llt.is_special_token(i)}
    if not texts:
        return llt
    vocab = _Vocab(llt, vocab_size, texts, getattr(tokenizer, "bos_token_id", None))
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(vocab), n_vocab=vocab_size,
                                  eos_token=eos_token_ids)  # fmt: skip


def text_added_tokens(tokenizer: Any, vocab_size: int) -> set[int]:
    """Ids of the tokenizer's added tokens whose `special` flag is off."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return {int(i) for i, t in decoder.items() if not t.special and int(i) < vocab_size}


class _Vocab:
    """What llguidance's TokenizerWrapper reads: every token's bytes (a special token's without
    the marker, which llguidance adds to `special_token_ids`), and a tokenizer of bytes."""

    def __init__(self, llt: Any, vocab_size: int, texts: set[int], bos: int | None) -> None:
        self._llt = llt
        self.tokens = [llt.decode_bytes([i]) for i in range(vocab_size)]
        self.special_token_ids = [
            i for i in range(vocab_size) if i not in texts and llt.is_special_token(i)
        ]
        self.eos_token_id = llt.eos_token
        self.bos_token_id = bos

    def __call__(self, text: bytes) -> list[int]:
        return list(self._llt.tokenize_bytes(text))
