"""Stop regexes on streaming text: the first match (ends first, then longest) whatever the chunk
sizes, the same as Python's `re` finds on the whole text; the text a match may still cover held
back; refusals with a reason; strings and regexes together; the detokenizer's cut and
no_stop_trim; the scheduler's finish."""

from __future__ import annotations

import random
import re

import pytest

from radixrt.core import FinishKind, Req, SamplingParams
from radixrt.core.text.stop_regex import MAX_NFA_NODES, RegexStopMatcher, stop_regex_error
from radixrt.core.text.stops import stop_matcher
from radixrt.scheduler.admission import reject_reason
from radixrt.scheduler.stop_check import FinishChecker
from radixrt.serve.results.detokenizer import IncrementalDetokenizer

PATTERNS = [r"\d+\.", r"ab|b", r"(?i)answer:\s*\w+\n", r"[^a-c]{2}x", r"a.?c", r"\n\n", "é+!"]


def _first_match(patterns: list[str], text: str) -> tuple[int, str] | None:
    """The oracle: over every end position, the first at which some regex matches a suffix
    of the text so far; the longest such suffix."""
    for end in range(1, len(text) + 1):
        starts = [
            s for s in range(end) for p in patterns if re.fullmatch(p, text[s:end]) is not None
        ]
        if starts:
            return min(starts), text[min(starts) : end]
    return None


def _feed_in_chunks(patterns: list[str], text: str, rng: random.Random) -> RegexStopMatcher:
    m = RegexStopMatcher(patterns)
    i = 0
    while i < len(text):
        n = rng.randint(1, 5)
        m.feed(text[i : i + n])
        assert m.hold_len <= m.fed_len
        i += n
    return m


def test_any_chunking_finds_what_re_finds() -> None:
    rng = random.Random(0)
    alphabet = "abcx1.2 \nAé!:"
    for _ in range(300):
        patterns = rng.sample(PATTERNS, rng.randint(1, 3))
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        m = _feed_in_chunks(patterns, text, rng)
        want = _first_match(patterns, text)
        got = None if m.match is None else (m.match.start, m.match.stop)
        assert got == want, (patterns, text)
        assert m.fed_len == len(text)


def test_hold_len_covers_what_may_still_match() -> None:
    m = RegexStopMatcher([r"\d+\."])
    m.feed("pi is ")
    assert m.hold_len == 0
    m.feed("31")
    assert m.hold_len == 2  # "31" may still end with "."
    m.feed("4 and ")
    assert m.hold_len == 0 and m.match is None
    assert m.feed("7.") is not None and m.match.stop == "7." and m.hold_len == 0
    assert m.feed("more") is m.match and m.fed_len == 20


def test_refused_regexes_say_why() -> None:
    assert stop_regex_error(r"\d+\.") is None
    for bad, why in (
        ("(", "not a valid regex"),
        ("a*", "empty string"),
        ("^a", "anchors"),
        (r"a\b", "word boundaries"),
        ("(?=a)b", "lookarounds"),
        (r"(a)\1", "backreferences"),
        ("(?>a)b", "not supported"),
        ("a++", "not supported"),
        (f"a{{{MAX_NFA_NODES}}}", "too complex"),
        ("(" * 500 + "a" + ")" * 500, "stop_regex"),
        ("", "non-empty"),
    ):
        err = stop_regex_error(bad)
        assert err is not None and why in err, (bad, err)


def test_strings_and_regexes_together_first_end_wins() -> None:
    m = stop_matcher(["STOP"], [r"\d\d"])
    assert m.feed("aSTO") is None and m.hold_len == 3
    match = m.feed("P 12")
    assert match is not None and (match.start, match.stop) == (1, "STOP")
    m = stop_matcher(["xyz1"], [r"z\d"])
    match = m.feed("wxyz1")
    assert match is not None and match.stop == "xyz1"  # same end: the longest
    m = stop_matcher(["yz"], [r"x\d"])
    match = m.feed("ax1yz")
    assert match is not None and match.stop == "x1"


class CharTokenizer:
    """One token per character (ids are code points); 0 is a special token."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True, **kw: object) -> str:
        return "".join(chr(i) for i in ids if i or not skip_special_tokens)


def _ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_detokenizer_cuts_at_a_regex_match_unless_no_stop_trim() -> None:
    text = "Total: 42. Done"
    for no_trim, want in ((False, "Total: "), (True, text)):
        detok = IncrementalDetokenizer(CharTokenizer(), stop_regex=[r"\d+\."], no_stop_trim=no_trim)
        shown = [detok.update(_ids(text[:i])) for i in range(1, len(text) + 1)]
        assert shown[7] == ("Total: " if not no_trim else "Total: 4")  # "4" held back
        assert shown[-1] == want
        # finished on the match: it is kept with no_stop_trim, and ends the text either way
        assert detok.finish(_ids(text), "42.") == ("Total: 42." if no_trim else "Total: ")


def test_finish_checker_stops_on_a_regex_and_the_server_rejects_bad_ones() -> None:
    tok = CharTokenizer()
    checker = FinishChecker([0], tok.decode)
    sp = SamplingParams(stop_regex=[r"[0-9]+\."], max_new_tokens=50)
    req = Req("r", [1, 2], sp)
    for ch in "It is 12.5":
        req.output_ids.append(ord(ch))
        checker.check(req, 1000)
        if req.is_finished:
            break
    assert req.finish_reason.kind == FinishKind.STOP and req.finish_reason.matched == "12."
    assert bytes(req.output_ids).decode() == "It is 12."
    bad = Req("r2", [1, 2], SamplingParams(stop_regex=["a*"]))
    assert "empty string" in reject_reason(bad, 1000, 1000, 1000)


@pytest.mark.parametrize("value", ["x", ["x", "y"], None])
def test_sampling_params_take_sglang_forms(value) -> None:
    sp = SamplingParams.from_dict(
        {"stop_regex": value, "no_stop_trim": True, "spaces_between_special_tokens": False}
    )
    assert sp.stop_regex == ([value] if isinstance(value, str) else value or [])
    assert sp.no_stop_trim and not sp.spaces_between_special_tokens
    with pytest.raises(ValueError, match="stop_regex"):
        SamplingParams.from_dict({"stop_regex": [""]})
    with pytest.raises(ValueError, match="no_stop_trim"):
        SamplingParams.from_dict({"no_stop_trim": 1})


def test_the_stop_is_found_where_the_last_token_completed_it() -> None:
    """With special tokens shown, the stop's text may occur earlier in the output (inside a
    special token's name) than where the stop was matched, on text without them: the cut is
    at the occurrence the last token completed, before it or, with no_stop_trim, after it."""
    text = "<end>the end!"
    for no_trim, want in ((False, "<end>the "), (True, "<end>the end")):
        detok = IncrementalDetokenizer(CharTokenizer(), stop=["end"], no_stop_trim=no_trim)
        assert detok.finish(_ids(text[:-1]), "end") == want
