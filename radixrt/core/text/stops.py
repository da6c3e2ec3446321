"""A request's stop strings and stop regexes as one matcher (`stop_matcher`): the scheduler's
finish check and the detokenizer's cut both feed it the same text."""

from __future__ import annotations

from collections.abc import Sequence

from radixrt.core.text.stop_matcher import StopMatch, StopMatcher
from radixrt.core.text.stop_regex import RegexStopMatcher


class BothStopMatcher:
    """StopMatcher's interface over strings and regexes together: the first match is the one
    that ends first, then the longest (the rule each of the two keeps on its own)."""

    __slots__ = ("_strings", "_regexes", "fed_len", "match")

    def __init__(self, stops: Sequence[str], regexes: list[str]) -> None:
        self._strings = StopMatcher(stops)
        self._regexes = RegexStopMatcher(regexes)
        self.fed_len = 0
        self.match: StopMatch | None = None

    @property
    def hold_len(self) -> int:
        if self.match is not None:
            return 0
        return max(self._strings.hold_len, self._regexes.hold_len)

    def feed(self, text: str) -> StopMatch | None:
        self.fed_len += len(text)
        if self.match is not None:
            return self.match
        found = [m for m in (self._strings.feed(text), self._regexes.feed(text)) if m]
        if found:
            self.match = min(found, key=lambda m: (m.end, m.start))
        return self.match


def stop_matcher(
    stops: Sequence[str], regexes: Sequence[str] = ()
) -> StopMatcher | BothStopMatcher:
    """The matcher of `stops` and `regexes` (a plain StopMatcher when there are no regexes)."""
    if not regexes:
        return StopMatcher(stops)
    return BothStopMatcher(stops, list(regexes))
