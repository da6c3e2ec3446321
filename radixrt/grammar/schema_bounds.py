"""Keywords that outlines' regex of a JSON schema ignores or writes loosely, written exactly
where they can be: numeric bounds (number_regex.py) and string patterns (pattern_regex.py).
Such a subschema is swapped for a placeholder const that outlines writes verbatim, then the
placeholder in outlines' regex for the subschema's own regex."""

from __future__ import annotations

import math
from typing import Any

from radixrt.grammar.number_regex import integer_bounds, integer_range_regex, number_range_regex
from radixrt.grammar.pattern_regex import pattern_regex

BOUND_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
MAX_BOUND = 10**18  # larger bounds stay on llguidance (a regex per digit position)
ANNOTATIONS = frozenset(  # keywords that constrain nothing
    {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated"}
)
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMAS = ("items", "additionalProperties")
_PLACEHOLDER = "radixrtbound"


def needs_own_regex(schema: dict[str, Any]) -> bool:
    """Whether `schema` (one subschema) has a keyword that only `own_regex` enforces."""
    return "pattern" in schema or any(k in schema for k in BOUND_KEYS)


def own_regex(schema: dict[str, Any]) -> str | None:
    """The exact regex of a subschema that is a bounded number or a string with a pattern
    and nothing else but annotations; None for any other subschema."""
    if schema.get("type") == "string" and "pattern" in schema:
        if all(k in ANNOTATIONS or k in ("type", "pattern") for k in schema):
            return pattern_regex(schema["pattern"])
        return None  # with minLength, format, ...: not written here
    return bound_regex(schema)


def bound_regex(schema: dict[str, Any]) -> str | None:
    """The regex of the values of `schema` when it is an integer or a number with bounds
    (inclusive or exclusive, finite, integers for a number) and nothing else but
    annotations; None when it is not, or when no value is in range."""
    kind = schema.get("type")
    if kind not in ("integer", "number") or not any(k in schema for k in BOUND_KEYS):
        return None
    if any(k not in ANNOTATIONS and k not in BOUND_KEYS and k != "type" for k in schema):
        return None
    bounds = [schema.get(k) for k in BOUND_KEYS]
    if not all(b is None or _is_finite(b) for b in bounds):
        return None  # draft-4 boolean exclusive bounds, strings, huge or infinite values
    minimum, maximum, ex_min, ex_max = bounds
    if kind == "integer":
        return integer_range_regex(*integer_bounds(minimum, maximum, ex_min, ex_max))
    if not all(b is None or float(b).is_integer() for b in bounds):
        return None
    lo, lo_open = _tightest([(minimum, False), (ex_min, True)], max)
    hi, hi_open = _tightest([(maximum, False), (ex_max, True)], min)
    return number_range_regex(lo, hi, lo_open, hi_open)


def unused_name(base: str, taken: str) -> str:
    """`base`, with "x" appended until it occurs nowhere in `taken` (a placeholder that no
    text of the schema can be mistaken for)."""
    while base in taken:
        base += "x"
    return base


def with_placeholders(schema: Any, taken: str) -> tuple[Any, dict[str, str]]:
    """`schema` with each subschema that `own_regex` writes replaced by a const string
    found nowhere in `taken` (the schema's text), and {that const as outlines writes it
    (quoted): the regex}."""
    prefix = unused_name(_PLACEHOLDER, taken)
    regexes: dict[str, str] = {}

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if not isinstance(node, dict):
            return node
        regex = own_regex(node)
        if regex is not None:
            name = f"{prefix}{len(regexes)}z"
            regexes[f'"{name}"'] = f"(?:{regex})"
            return {"const": name}
        out = dict(node)
        for key in _SUBSCHEMA_MAPS:
            if isinstance(out.get(key), dict):
                out[key] = {k: walk(v) for k, v in out[key].items()}
        for key in (*_SUBSCHEMAS, "anyOf"):
            if key in out:
                out[key] = walk(out[key])
        return out

    return walk(schema), regexes


def _tightest(bounds: list[tuple[Any, bool]], pick: Any) -> tuple[int | None, bool]:
    """The tighter of an inclusive and an exclusive bound (at a tie, the exclusive one)."""
    given = [(int(v), is_open) for v, is_open in bounds if v is not None]
    if not given:
        return None, False
    best = pick(v for v, _ in given)
    return best, any(is_open for v, is_open in given if v == best)


def _is_finite(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and abs(value) <= MAX_BOUND
    )
