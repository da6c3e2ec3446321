"""The store of answered turns' ids: a prompt that replays a kept turn takes its ids (the
longest such turn), only its owner's, within the bounds."""

from __future__ import annotations

from typing import Any

from radixrt.serve.http.continuations import ContinuationStore


class _Chars:
    """A tokenizer of one id per character (its code point)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(i) for i in ids)


TOK: Any = _Chars()


def test_a_replayed_turn_takes_its_own_ids_then_the_tokenizers() -> None:
    store = ContinuationStore()
    assert store.encode("", "Q:A", TOK) == [81, 58, 65]
    store.put("", "Q:", [1, 2], [3000], TOK)  # the model's id of "\u0bb8", not the tokenizer's
    assert store.encode("", "Q:\u0bb8!", TOK) == [1, 2, 3000, 33]
    assert store.encode("", "Q:\u0bb8", TOK) == [1, 2, 3000]
    assert store.encode("", "Q:x", TOK) == [81, 58, 120]  # not a replay: the prompt alone
    store.put("", "Q:\u0bb8!", [1, 2, 3000, 33], [70, 3001], TOK)
    assert store.encode("", "Q:\u0bb8!F\u0bb9.", TOK) == [1, 2, 3000, 33, 70, 3001, 46]
    # without the last output token (a stop token the template writes as text itself)
    assert store.encode("", "Q:\u0bb8!F+", TOK) == [1, 2, 3000, 33, 70, 43]
    assert store.encode("tenant-b", "Q:\u0bb8!", TOK) == [81, 58, 3000, 33]


def test_the_store_is_bounded_per_owner_and_in_bytes() -> None:
    store = ContinuationStore(per_owner=2)
    for i in range(4):
        store.put("a", f"p{i}", [i], [100 + i], TOK)  # one entry each (a one-token output)
    assert store.encode("a", "p0d", TOK) == [112, 48, 100]
    assert store.encode("a", "p3g", TOK) == [3, 103]
    small = ContinuationStore(max_bytes=1000)
    for i in range(20):
        small.put(f"o{i}", "x" * 10, list(range(50)), [7, 8], TOK)
    assert small._bytes <= 1000
    assert small.encode("o19", "x" * 10 + "\x07\x08", TOK) == [*range(50), 7, 8]
    assert small.encode("o0", "x" * 10 + "\x07\x08", TOK) == [120] * 10 + [7, 8]
