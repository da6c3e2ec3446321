"""DecodeStream with fake tokenizers: the steps join to the full decode, never show half a
character, keep word-start spaces, and each step decodes only a few ids."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from radixrt.core.text.decode_stream import MAX_PENDING_TOKENS, REPLACEMENT, DecodeStream


class ByteTokenizer:
    """Each id is a piece of UTF-8 bytes (id 0 is a special token that decodes to nothing)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = [b"", *pieces]
        self.decoded_tokens: list[int] = []  # ids decoded per call

    def decode(self, ids: list[int]) -> str:
        self.decoded_tokens.append(len(ids))
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="replace")


def run(tok: ByteTokenizer, ids: list[int]) -> list[str]:
    stream = DecodeStream(tok.decode)
    return [stream.step(ids[: i + 1]) for i in range(len(ids))]


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        st.characters(blacklist_characters=REPLACEMENT, blacklist_categories=("Cs",)), max_size=40
    ),
    st.data(),
)
def test_split_characters_join_to_the_text(text: str, data: st.DataObject) -> None:
    raw = text.encode()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=40)))
    bounds = [0, *cuts, len(raw)]
    ids = [data.draw(st.sampled_from([[0], [0, 0], []])) for _ in bounds]  # special tokens
    pieces = [raw[a:b] for a, b in zip(bounds, bounds[1:])]
    ids = [t for k, i in enumerate(range(1, len(pieces) + 1)) for t in [*ids[k], i]]
    tok = ByteTokenizer(pieces)
    mid_char = [tok.decode(ids[: i + 1]).endswith(REPLACEMENT) for i in range(len(ids))]
    tok.decoded_tokens.clear()
    steps = run(tok, ids)
    assert max(tok.decoded_tokens, default=0) <= 2 * MAX_PENDING_TOKENS
    run_len = longest = 0
    for m in mid_char:
        run_len = run_len + 1 if m else 0
        longest = max(longest, run_len)
    if longest < MAX_PENDING_TOKENS:  # else a tail was (rightly) taken as invalid bytes
        assert "".join(steps) == text
        assert all(REPLACEMENT not in s for s in steps)


def test_leading_space_comes_from_context() -> None:
    pieces = ["▁Hello", "▁world", "!"]

    def decode(ids: list[int]) -> str:  # sentencepiece-like: a decode drops its leading space
        return "".join(pieces[i] for i in ids).replace("▁", " ").removeprefix(" ")

    stream = DecodeStream(decode)
    assert [stream.step([0, 1, 2][: i + 1]) for i in range(3)] == ["Hello", " world", "!"]


def test_a_run_of_empty_or_broken_tokens_is_bounded() -> None:
    tok = ByteTokenizer([b"a", b"\x80", b"b"])
    ids = [1, *([0] * 50), 3, *([2] * 50), 3]
    steps = run(tok, ids)
    assert max(tok.decoded_tokens) <= 2 * MAX_PENDING_TOKENS
    assert "".join(steps) == tok.decode(ids)  # lone continuation bytes are each invalid
