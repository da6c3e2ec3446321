"""Incremental detokenization with the SmolLM2 tokenizer: multi-byte characters split across
tokens never show half-decoded, and a stop string is never shown in part; with a fake one, the
visible text equals a full rescan after every token."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixrt.serve.results.detokenizer import IncrementalDetokenizer


@pytest.fixture(scope="module")
def tokenizer(smollm2_path):
    from radixrt.model.families.loader import load_tokenizer

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


def test_a_stop_token_that_ended_the_output_is_left_out(tokenizer) -> None:
    """A stop token (EOS, or one of stop_token_ids) is not in the text, even where special
    tokens are kept in it or it is an ordinary token (as vLLM and SGLang leave it out);
    no_stop_trim keeps it; a stop token that did not end the output stays."""
    eos = tokenizer.eos_token_id
    ids = [*tokenizer.encode("Hello there"), eos]
    shown = IncrementalDetokenizer(tokenizer, skip_special_tokens=False)
    assert shown.finish(ids, eos) == "Hello there"
    kept = IncrementalDetokenizer(tokenizer, skip_special_tokens=False, no_stop_trim=True)
    assert kept.finish(ids, eos) == "Hello there" + tokenizer.decode([eos])
    comma = tokenizer.encode(",")[-1]
    plain = IncrementalDetokenizer(tokenizer)
    assert plain.finish([*tokenizer.encode("a"), comma], comma) == "a"
    assert plain.finish([*tokenizer.encode("a"), comma], comma + 1) == "a,"


class PieceTokenizer:
    """Each id is a piece of text; special tokens do not exist here."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(self.pieces[i] for i in ids)


def _visible(text: str, stops: list[str]) -> str:
    """Cut before the stop string that ends first (the longest of those), else hold back the
    longest suffix that is a prefix of a stop string."""
    hits = [(i + len(s), -len(s), i) for s in stops if (i := text.find(s)) >= 0]
    if hits:
        return text[: min(hits)[2]]
    ends = (n for s in stops for n in range(1, len(s) + 1) if text.endswith(s[:n]))
    return text[: len(text) - max(ends, default=0)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text("ab#c", min_size=1, max_size=4), min_size=1, max_size=30),
    st.lists(st.text("ab#", min_size=1, max_size=5), max_size=4),
)
def test_visible_text_matches_a_full_rescan(pieces: list[str], stops: list[str]) -> None:
    detok = IncrementalDetokenizer(PieceTokenizer(pieces), stop=stops)
    ids = list(range(len(pieces)))
    seen = [detok.update(ids[: i + 1]) for i in range(len(ids))]
    assert seen == [_visible("".join(pieces[: i + 1]), stops) for i in range(len(ids))]
    assert all(b.startswith(a) for a, b in zip(seen, seen[1:], strict=False))
