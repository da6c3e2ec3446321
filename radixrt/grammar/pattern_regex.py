"""A string schema's `pattern` as a regex over the JSON text, where that is exact: the pattern
is anchored at both ends (a whole-string match, not a search) and built of literals, classes,
groups, alternatives and greedy repeats over characters that JSON writes as themselves."""

from __future__ import annotations

import re._constants as C  # type: ignore[import-not-found]
import re._parser as sre_parse  # type: ignore[import-not-found]
from typing import Any

from radixrt.grammar.regex_size import PARSE_ERRORS

# \d and \w as ECMA reads them: ASCII (Python's, which jsonschema checks with, add Unicode
# digits and letters, so these write a subset of what validates, never more).
_CLASSES = {
    C.CATEGORY_DIGIT: [(48, 57)],
    C.CATEGORY_WORD: [(48, 57), (65, 90), (95, 95), (97, 122)],
}
_META = set("\\.+*?()|[]{}^$#&-~")  # Rust's meta characters: escaped wherever they are


class _NotExact(Exception):
    pass


def pattern_regex(pattern: Any) -> str | None:
    """The regex of the JSON strings (quotes included) whose value matches `pattern` whole;
    None when this cannot be written exactly (unanchored, a construct outside the subset, a
    character JSON escapes: quotes, backslashes, control and non-ASCII characters)."""
    if not isinstance(pattern, str) or "{," in pattern:  # `{,n}`: Python and ECMA differ
        return None
    try:
        parsed = sre_parse.parse(pattern)
        if parsed.state.flags & ~C.SRE_FLAG_UNICODE:  # (?i), (?x), ...
            return None
        items = list(parsed)
        if len(items) < 2 or items[0] != (C.AT, C.AT_BEGINNING) or items[-1] != (C.AT, C.AT_END):
            return None
        return '"' + _sequence(items[1:-1]) + '"'
    except (_NotExact, *PARSE_ERRORS):
        return None


def _sequence(items: list[tuple[Any, Any]]) -> str:
    return "".join(_item(op, av) for op, av in items)


def _item(op: Any, av: Any) -> str:
    if op is C.LITERAL:
        return _literal(av)
    if op is C.IN:
        return _class(av)
    if op is C.SUBPATTERN:
        _, add_flags, del_flags, body = av
        if add_flags or del_flags:
            raise _NotExact
        return f"(?:{_sequence(list(body))})"
    if op is C.BRANCH:
        return "(?:" + "|".join(_sequence(list(alt)) for alt in av[1]) + ")"
    if op is C.MAX_REPEAT:
        lo, hi, body = av
        count = f"{{{lo},}}" if hi == C.MAXREPEAT else f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"
        return f"(?:{_sequence(list(body))}){count}"
    raise _NotExact  # `.`, anchors inside, lazy repeats, backreferences, lookarounds


def _class(items: list[tuple[Any, Any]]) -> str:
    ranges: list[tuple[int, int]] = []
    for kind, value in items:
        if kind is C.LITERAL:
            ranges.append((value, value))
        elif kind is C.RANGE:
            ranges.append(value)
        elif kind is C.CATEGORY and value in _CLASSES:
            ranges += _CLASSES[value]
        else:
            raise _NotExact  # negated classes, \s, ... may hold a quote or a control character
    parts = []
    for lo, hi in ranges:
        _check(lo, hi)
        parts.append(_escaped(lo) if lo == hi else f"{_escaped(lo)}-{_escaped(hi)}")
    return "[" + "".join(parts) + "]"


def _literal(code: int) -> str:
    _check(code, code)
    return _escaped(code)


def _escaped(code: int) -> str:
    return ("\\" if chr(code) in _META else "") + chr(code)


def _check(lo: int, hi: int) -> None:
    """Characters JSON writes as themselves: printable ASCII but the quote and backslash."""
    if not 0x20 <= lo <= hi <= 0x7E or lo <= 0x22 <= hi or lo <= 0x5C <= hi:
        raise _NotExact
