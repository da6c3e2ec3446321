"""StopMatcher against a brute-force reference: the first match (ends first, then longest) and
its offset, and the hold length after every chunk, for text fed in chunks of any size."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixrt.core.text.stop_matcher import StopMatch, StopMatcher


def first_match(text: str, stops: list[str]) -> StopMatch | None:
    """The occurrence that ends first; among those, the longest. A stop string's first
    occurrence is its earliest-ending one."""
    hits = [(i + len(s), -len(s), i, s) for s in stops if (i := text.find(s)) >= 0]
    if not hits:
        return None
    _, _, start, stop = min(hits)
    return StopMatch(start, stop)


def hold_len(text: str, stops: list[str]) -> int:
    """The longest suffix of `text` that is a prefix of some stop string."""
    return max(
        (n for s in stops for n in range(1, min(len(s), len(text)) + 1) if text.endswith(s[:n])),
        default=0,
    )


def feed_all(stops: list[str], chunks: list[str]) -> list[tuple[StopMatch | None, int]]:
    m = StopMatcher(stops)
    return [(m.feed(c), m.hold_len) for c in chunks]


def reference(stops: list[str], chunks: list[str]) -> list[tuple[StopMatch | None, int]]:
    out = []
    for k in range(1, len(chunks) + 1):
        text = "".join(chunks[:k])
        match = first_match(text, stops)
        out.append((match, 0 if match is not None else hold_len(text, stops)))
    return out


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    alphabet = draw(st.sampled_from(["a", "ab", "abc", "ab#", "aé世🎉"]))
    word = st.text(alphabet, min_size=1, max_size=6)
    stops = draw(st.lists(word, min_size=1, max_size=5))
    text = draw(st.text(alphabet, max_size=60))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    bounds = [0, *cuts, len(text)]
    return stops, [text[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=600, deadline=None)
@given(cases())
def test_matches_brute_force(case: tuple[list[str], list[str]]) -> None:
    stops, chunks = case
    assert feed_all(stops, chunks) == reference(stops, chunks)


@pytest.mark.parametrize(
    ("stops", "chunks", "match"),
    [
        (["ab", "abc"], ["a", "b", "c"], StopMatch(0, "ab")),  # a prefix of another: ends first
        (["abc", "bc"], ["abc"], StopMatch(0, "abc")),  # a suffix of another: the longest
        (["bc", "abc"], ["ab", "c"], StopMatch(0, "abc")),
        (["bcd", "abcde"], ["abcde"], StopMatch(1, "bcd")),  # ends first beats starts first
        (["aab"], ["a", "aa", "b"], StopMatch(1, "aab")),  # overlapping: the failure link
        (["abab"], ["aba", "bab"], StopMatch(0, "abab")),
        (["###"], ["xx#", "#", "#yy"], StopMatch(2, "###")),  # straddles three chunks
        (["世界"], ["你好世", "界!"], StopMatch(2, "世界")),  # unicode offsets are characters
        (["🎉\n"], ["a🎉", "\nb"], StopMatch(1, "🎉\n")),
        (["x", "x"], ["ax"], StopMatch(1, "x")),  # a repeated stop string
        (["no"], ["yes", "yes"], None),
    ],
)
def test_edge_cases(stops: list[str], chunks: list[str], match: StopMatch | None) -> None:
    assert feed_all(stops, chunks)[-1][0] == match
    assert feed_all(stops, chunks) == reference(stops, chunks)


def test_hold_then_match_then_nothing_held() -> None:
    m = StopMatcher(["</s>", "END"])
    assert m.feed("text </") is None and m.hold_len == 2
    assert m.feed("x E") is None and m.hold_len == 1
    assert m.feed("ND and more") == StopMatch(9, "END") and m.hold_len == 0
    assert m.feed("</s>") == StopMatch(9, "END")  # text after a match is ignored
    assert m.match == StopMatch(9, "END") and m.match.end == 12


def test_no_stops_never_match() -> None:
    m = StopMatcher([])
    assert m.feed("anything at all") is None and m.hold_len == 0 and m.fed_len == 15


def test_empty_stop_string_is_rejected() -> None:
    with pytest.raises(ValueError, match="empty"):
        StopMatcher(["ok", ""])


def test_automata_are_shared_by_stop_list() -> None:
    a, b = StopMatcher(["a", "bc"]), StopMatcher(("a", "bc"))
    assert a._automaton is b._automaton
    a.feed("b")
    assert a.hold_len == 1 and b.hold_len == 0  # the stream state is per matcher


def test_long_stops_build_linear_and_scan() -> None:
    stops = ["ab" * 128, "b" * 256, *("a" * k + "c" for k in range(200, 214))]
    m = StopMatcher(stops)
    assert m.feed("a" * 5000) is None and m.hold_len == 213
    assert m.feed("a" * 206 + "c") == StopMatch(4993, "a" * 213 + "c")  # the longest
