"""Numeric bounds as regexes over the digits: the JSON numbers (integers, or decimals with an
optional fraction and no exponent) whose value lies between two bounds, each inclusive,
exclusive or absent, so that a regex engine enforces a schema's minimum and maximum exactly."""

from __future__ import annotations

import math
from decimal import Decimal

_FRACTION = r"(?:\.[0-9]+)?"
_ZERO_FRACTION = r"(?:\.0+)?"
_NONZERO_FRACTION = r"\.[0-9]*[1-9][0-9]*"


def integer_range_regex(lo: int | None, hi: int | None) -> str | None:
    """A regex matching exactly the canonical decimals (no leading zeros, no `-0`) of the
    integers n with lo <= n <= hi (None: unbounded on that side); None if there are none."""
    if lo is not None and hi is not None and lo > hi:
        return None
    parts = []
    if hi is None or hi >= 0:
        parts.append(_naturals(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:  # -n for 1 <= n <= -lo
        parts.append("-" + _group(_naturals(max(-hi, 1) if hi is not None else 1, _neg(lo))))
    return _alt(parts)


def number_range_regex(
    lo: int | None, hi: int | None, lo_open: bool = False, hi_open: bool = False
) -> str | None:
    """A regex matching exactly the JSON numbers without an exponent (`-?int(.digits)?`, no
    `-0`) whose value x has lo <= x <= hi (< with `*_open`; None: unbounded). The bounds are
    integers; None if no such number exists."""
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_open or hi_open))):
        return None
    parts = []
    if hi is None or hi > 0 or (hi == 0 and not hi_open):
        low, low_open = (lo, lo_open) if lo is not None and lo >= 0 else (0, False)
        parts.append(_decimals(low, low_open, hi, hi_open))
    if lo is None or lo < 0:  # -y for y > 0 with -hi <= y <= -lo
        low, low_open = (-hi, hi_open) if hi is not None and hi < 0 else (0, True)
        parts.append("-" + _group(_decimals(low, low_open, _neg(lo), lo_open)))
    return _alt(parts)


def integer_bounds(
    minimum: float | None, maximum: float | None, ex_min: float | None, ex_max: float | None
) -> tuple[int | None, int | None]:
    """The inclusive integer bounds equivalent to a schema's (numbers or None)."""
    lows = [math.ceil(Decimal(str(minimum)))] if minimum is not None else []
    if ex_min is not None:
        lows.append(math.floor(Decimal(str(ex_min))) + 1)
    highs = [math.floor(Decimal(str(maximum)))] if maximum is not None else []
    if ex_max is not None:
        highs.append(math.ceil(Decimal(str(ex_max))) - 1)
    return (max(lows) if lows else None), (min(highs) if highs else None)


def _decimals(lo: int, lo_open: bool, hi: int | None, hi_open: bool) -> str:
    """Non-negative decimals x with lo <(=) x <(=) hi; 0 <= lo, and the interval is not empty."""
    if hi == lo:  # a closed point
        return f"{lo}{_ZERO_FRACTION}"
    parts = [f"{lo}{_NONZERO_FRACTION if lo_open else _FRACTION}"]  # integer part lo
    if hi is None or hi - lo >= 2:  # integer parts strictly between: any fraction
        parts.append(_group(_naturals(lo + 1, None if hi is None else hi - 1)) + _FRACTION)
    if hi is not None:
        parts.append(_group(f"{hi}{_ZERO_FRACTION}") if not hi_open else "")
    return _alt([p for p in parts if p])


def _naturals(lo: int, hi: int | None) -> str:
    """Canonical decimals of the integers in [lo, hi] (0 <= lo <= hi; hi None: unbounded)."""
    if hi is None:
        width = len(str(lo))  # [lo, 10**width - 1], then every longer number
        return _alt([_naturals(lo, 10**width - 1), f"[1-9][0-9]{{{width},}}"])
    parts = []
    for width in range(len(str(lo)), len(str(hi)) + 1):
        first = max(lo, 10 ** (width - 1) if width > 1 else 0)
        last = min(hi, 10**width - 1)
        parts.append(_same_width(str(first), str(last)))
    return _alt(parts)


def _same_width(lo: str, hi: str) -> str:
    """Digit strings of len(lo) == len(hi) between lo and hi (as numbers), lo <= hi."""
    if not lo:
        return ""
    rest = len(lo) - 1
    if lo[0] == hi[0]:
        return lo[0] + _group(_same_width(lo[1:], hi[1:]))
    low_full = lo[1:] == "0" * rest  # lo's first digit takes every tail
    high_full = hi[1:] == "9" * rest
    first = int(lo[0]) + (0 if low_full else 1)
    last = int(hi[0]) - (0 if high_full else 1)
    parts = []
    if not low_full:
        parts.append(lo[0] + _group(_same_width(lo[1:], "9" * rest)))
    if first <= last:
        parts.append(_digit(first, last) + _digits(rest))
    if not high_full:
        parts.append(hi[0] + _group(_same_width("0" * rest, hi[1:])))
    return _alt(parts)


def _digit(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"[{lo}-{hi}]"


def _digits(n: int) -> str:
    return "" if n == 0 else "[0-9]" if n == 1 else f"[0-9]{{{n}}}"


def _alt(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def _group(regex: str) -> str:
    """`regex` safe to concatenate: wrapped when it has a `|` outside every group."""
    depth = 0
    for c in regex:  # the regexes here have no escaped parentheses or bars
        depth += (c == "(") - (c == ")")
        if c == "|" and depth == 0:
            return f"(?:{regex})"
    return regex


def _neg(value: int | None) -> int | None:
    return None if value is None else -value
