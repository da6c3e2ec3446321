"""The store of answered turns' ids: a prompt that replays a kept turn takes its ids (the
longest such turn), only its owner's, within the bounds."""

from __future__ import annotations

from typing import Any

import pytest

from radixrt.core.config import ServerConfig
from radixrt.serve.http.args import parse_args
from radixrt.serve.http.continuations import (
    ContinuationStore,
    NoContinuations,
    make_continuations,
)


class _Chars:
    """A tokenizer of one id per character (its code point)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(i) for i in ids)


TOK: Any = _Chars()


def test_a_replayed_turn_takes_its_own_ids_then_the_tokenizers() -> None:
    store = ContinuationStore(2**20, 32)
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
    store = ContinuationStore(2**20, per_owner=2)
    for i in range(4):
        store.put("a", f"p{i}", [i], [100 + i], TOK)  # one entry each (a one-token output)
    assert store.encode("a", "p0d", TOK) == [112, 48, 100]
    assert store.encode("a", "p3g", TOK) == [3, 103]
    small = ContinuationStore(max_bytes=1000, per_owner=32)
    for i in range(20):
        small.put(f"o{i}", "x" * 10, list(range(50)), [7, 8], TOK)
    assert small._bytes <= 1000
    assert small.encode("o19", "x" * 10 + "\x07\x08", TOK) == [*range(50), 7, 8]
    assert small.encode("o0", "x" * 10 + "\x07\x08", TOK) == [120] * 10 + [7, 8]


def test_a_known_prefix_is_used_when_longer_than_the_kept_turn() -> None:
    store = ContinuationStore(2**20, 32)
    store.put("", "Q:", [1, 2], [3000], TOK)
    assert store.encode("", "Q:\u0bb8!", TOK, ("Q", [9])) == [1, 2, 3000, 33]
    assert store.encode("", "Q:\u0bb8!", TOK, ("Q:\u0bb8!", [5, 6])) == [5, 6]
    assert store.encode("", "R:", TOK, ("Q", [9])) == [82, 58]  # not its prefix
    assert store.head("", "zz") == (0, [])


def test_the_bounds_are_config_and_0_keeps_nothing() -> None:
    config = ServerConfig()
    store = make_continuations(config.continuation_max_bytes, config.continuation_max_turns)
    assert isinstance(store, ContinuationStore)
    assert (store.max_bytes, store.per_owner) == (64 * 2**20, 32)
    server = parse_args(["--continuation-max-bytes", "0"]).server
    off = make_continuations(server.continuation_max_bytes, server.continuation_max_turns)
    assert isinstance(off, NoContinuations)
    off.put("", "Q:", [1, 2], [3000], TOK)
    assert off.encode("", "Q:\u0bb8", TOK) == [81, 58, 3000]
    assert off.encode("", "Q:\u0bb8", TOK, ("Q:", [1, 2])) == [1, 2, 3000]
    turns = parse_args(["--continuation-max-turns", "5"]).server.continuation_max_turns
    assert turns == 5
    assert isinstance(make_continuations(1000, 0), NoContinuations)
    with pytest.raises(ValueError, match="continuation_max_turns"):
        ServerConfig(continuation_max_turns=-1)
