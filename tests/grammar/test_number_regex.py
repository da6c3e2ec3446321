"""Numeric bounds as digit regexes, as properties: for random bounds (inclusive, exclusive,
absent) the regex matches a number iff it is in range, over a window around each bound and far
values; and a schema's bounds as jsonschema reads them."""

from __future__ import annotations

import re
from decimal import Decimal

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from radixrt.grammar.number_regex import integer_range_regex, number_range_regex
from radixrt.grammar.schema_bounds import bound_regex

WINDOW = 25
bound = st.none() | st.integers(-(10**7), 10**7) | st.integers(-300, 300)
far = st.lists(st.integers(-(10**15), 10**15), max_size=20)


def _near(*bounds: int | None) -> set[int]:
    """Integers around each bound and around 0 (where the sign changes)."""
    return {b + d for b in (*bounds, 0) if b is not None for d in range(-WINDOW, WINDOW + 1)}


def _in(n: int | Decimal, lo: int | None, hi: int | None, lo_open=False, hi_open=False) -> bool:
    above = lo is None or (n > lo if lo_open else n >= lo)
    below = hi is None or (n < hi if hi_open else n <= hi)
    return above and below


@settings(max_examples=300, deadline=None)
@given(bound, bound, far)
def test_integer_regex_matches_exactly_the_integers_in_range(lo, hi, far_values) -> None:
    regex = integer_range_regex(lo, hi)
    if lo is not None and hi is not None and lo > hi:
        assert regex is None
        return
    assert regex is not None
    pattern = re.compile(regex)
    for n in _near(lo, hi) | set(far_values):
        assert bool(pattern.fullmatch(str(n))) == _in(n, lo, hi), (lo, hi, n, regex)
    assert not pattern.fullmatch("-0") and not pattern.fullmatch("007")  # canonical only


@st.composite
def _decimal_texts(draw, lo: int | None, hi: int | None) -> list[str]:
    """Decimals without an exponent near the bounds: a sign, a canonical integer part and
    a fraction of 0-4 digits (zeros included)."""
    ints = sorted(_near(lo, hi))
    out = []
    for _ in range(40):
        n = draw(st.sampled_from(ints) | st.integers(-(10**9), 10**9))
        frac = draw(st.text("0123456789", max_size=4) | st.sampled_from(["0", "00", "5", "01"]))
        text = f"{'-' if n < 0 else ''}{abs(n)}" + (f".{frac}" if frac else "")
        if n == 0 and draw(st.booleans()) and frac.strip("0"):
            text = "-" + text  # -0.x: a negative number with integer part 0
        out.append(text)
    return out


@settings(max_examples=300, deadline=None)
@given(bound, bound, st.booleans(), st.booleans(), st.data())
def test_number_regex_matches_exactly_the_decimals_in_range(lo, hi, lo_open, hi_open, data):
    regex = number_range_regex(lo, hi, lo_open, hi_open)
    empty = lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_open or hi_open)))
    assert (regex is None) == empty
    if regex is None:
        return
    pattern = re.compile(regex)
    for text in data.draw(_decimal_texts(lo, hi)):
        expected = _in(Decimal(text), lo, hi, lo_open, hi_open)
        assert bool(pattern.fullmatch(text)) == expected, (lo, hi, lo_open, hi_open, text)
    assert not any(pattern.fullmatch(t) for t in ("-0", "-0.0", "1e3", "01", "1."))


schema_bound = st.none() | st.integers(-500, 500) | st.floats(-500, 500).map(lambda f: round(f, 1))


@settings(max_examples=300, deadline=None)
@given(schema_bound, schema_bound, schema_bound, schema_bound)
def test_an_integer_schemas_bounds_as_jsonschema_reads_them(minimum, maximum, ex_min, ex_max):
    bounds = {"minimum": minimum, "maximum": maximum}
    bounds |= {"exclusiveMinimum": ex_min, "exclusiveMaximum": ex_max}
    schema = {"type": "integer", **{k: v for k, v in bounds.items() if v is not None}}
    regex = bound_regex(schema)
    near = _near(*(None if b is None else int(b) for b in bounds.values()))
    valid = {n for n in near if jsonschema.Draft202012Validator(schema).is_valid(n)}
    if len(schema) == 1:
        assert regex is None  # no bound: outlines' own integer regex
        return
    if regex is None:  # no integer in range
        assert not valid
        return
    assert {n for n in near if re.fullmatch(regex, str(n))} == valid, (schema, regex)


def test_bound_regex_takes_only_what_it_writes_exactly() -> None:
    assert bound_regex({"type": "number", "minimum": 0, "maximum": 1.0}) is not None
    assert bound_regex({"type": "integer", "minimum": 1, "description": "a count"}) is not None
    for schema in (
        {"type": "number", "minimum": 0.5},  # a fractional bound on a number
        {"type": "integer", "minimum": 0, "multipleOf": 2},
        {"type": "integer", "minimum": 0, "exclusiveMinimum": True},  # draft 4
        {"type": "integer", "maximum": float("inf")},
        {"type": "integer", "maximum": 10**30},
        {"type": ["integer", "null"], "minimum": 0},
        {"type": "string", "minimum": 0},
        {"type": "integer"},
    ):
        assert bound_regex(schema) is None, schema
