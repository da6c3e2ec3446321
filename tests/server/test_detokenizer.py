"""Incremental detokenization with the SmolLM2 tokenizer: multi-byte characters split across
tokens never show half-decoded, and a stop string is never shown in part."""

from __future__ import annotations

import pytest

from radixrt.server.detokenizer import IncrementalDetokenizer


@pytest.fixture(scope="module")
def tokenizer(smollm2_path):
    from radixrt.models.loader import load_tokenizer

    return load_tokenizer(smollm2_path)


def test_split_multibyte_characters_stream_cleanly(tokenizer) -> None:
    text = "Café 世界 🎉🚀 naïve — done"
    ids = tokenizer.encode(text)
    pieces = [tokenizer.decode([t]) for t in ids]
    assert any("\ufffd" in p for p in pieces)  # some character really is split across tokens
    detok = IncrementalDetokenizer(tokenizer)
    seen = [detok.update(ids[: i + 1]) for i in range(len(ids))]
    assert all("\ufffd" not in s for s in seen)
    assert all(b.startswith(a) for a, b in zip(seen, seen[1:], strict=False))
    assert seen[-1] == text == detok.finish(ids, None)


def test_stop_string_is_held_back_then_cut(tokenizer) -> None:
    ids = tokenizer.encode("Answer: yes. ### next question")
    detok = IncrementalDetokenizer(tokenizer, stop=["###"])
    seen = [detok.update(ids[: i + 1]) for i in range(len(ids))]
    assert all("#" not in s for s in seen)
    assert seen[-1] == "Answer: yes. "
    assert detok.finish(ids, "###") == "Answer: yes. "
