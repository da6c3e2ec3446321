"""A schema's numeric bounds and string patterns on the regex path: written into outlines'
regex wherever the subschema sits (properties, items, anyOf, $defs), counted as enforced only
where written exactly, and placeholders that never collide with the schema's own text."""

from __future__ import annotations

import json
import random
import re

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.scenarios.agent.tools import example_value, make_tools
from radixrt.grammar.base import COMPACT_JSON
from radixrt.grammar.schema_regex import schema_enforced, schema_regex

COUNT = {"type": "integer", "minimum": 1, "maximum": 1500}
SCHEMA = {
    "type": "object",
    "properties": {
        "n": COUNT,
        "ratio": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
        "temps": {"type": "array", "items": {"type": "integer", "minimum": -40}, "maxItems": 2},
        "at": {"anyOf": [{"$ref": "#/$defs/year"}, {"type": "null"}]},
        "note": {"type": "string", "maxLength": 4, "description": "radixrtbound0z"},
    },
    "required": ["n", "ratio", "temps", "at"],
    "additionalProperties": False,
    "$defs": {"year": {"type": "integer", "exclusiveMinimum": 1899, "maximum": 2100}},
}


def _doc(**changes: object) -> str:
    doc = {"n": 1500, "ratio": 0.25, "temps": [-40, 7], "at": 1900} | changes
    return json.dumps(doc, separators=(",", ":"))


def test_bounds_are_enforced_wherever_the_subschema_sits() -> None:
    assert schema_enforced(SCHEMA)
    regex = re.compile(schema_regex(json.dumps(SCHEMA), layout=COMPACT_JSON))
    good = [_doc(), _doc(n=1, ratio=0), _doc(temps=[], at=None), _doc(at=2100, note="ab")]
    bad = [_doc(n=0), _doc(n=1501), _doc(ratio=1), _doc(ratio=1.0), _doc(temps=[-41])]
    bad += [_doc(at=1899), _doc(at=2101), _doc(n=-3)]
    for text in good + bad:
        valid = jsonschema.Draft202012Validator(SCHEMA).is_valid(json.loads(text))
        assert bool(regex.fullmatch(text)) == valid == (text in good), text


def test_a_bounded_root_and_a_bound_outlines_cannot_write() -> None:
    assert re.fullmatch(schema_regex(json.dumps(COUNT)), "1234")
    assert not re.fullmatch(schema_regex(json.dumps(COUNT)), "1501")
    assert not schema_enforced({"type": "integer", "minimum": 0, "multipleOf": 5})
    assert not schema_enforced({"type": "number", "maximum": 2.5})
    assert not schema_enforced({"type": "object", "properties": {"x": {"minimum": 1}}})


def test_the_agent_benchmarks_tools_are_enforced_by_the_regex() -> None:
    rng = random.Random(0)
    for tool in make_tools(16, seed=0):
        params = tool["function"]["parameters"]
        assert schema_enforced(params)
        regex = re.compile(schema_regex(json.dumps(params), layout=COMPACT_JSON))
        value = example_value(params, rng)
        assert regex.fullmatch(json.dumps(value, separators=(",", ":")))


PATTERNS = [r"^[A-Z]{2}-\d{1,3}$", r"^(?:ab|c)+\.x?$", r"^[a-z &~#.-]*$", r"^(a|b\w)?z{2,}$"]


ALPHABET = "aAbBcxz09-. &~#._\"\\'"


@st.composite
def _pattern_and_value(draw) -> tuple[str, str]:
    """A pattern and a string near it: one that matches, maybe with one character changed."""
    pattern = draw(st.sampled_from(PATTERNS))
    value = draw(st.from_regex(pattern, fullmatch=True, alphabet=ALPHABET))
    if value and draw(st.booleans()):
        i = draw(st.integers(0, len(value) - 1))
        value = value[:i] + draw(st.sampled_from(ALPHABET)) + value[i + 1 :]
    return pattern, value


@settings(max_examples=300, deadline=None)
@given(_pattern_and_value())
def test_a_pattern_matches_exactly_the_json_strings_that_validate(case) -> None:
    pattern, value = case
    schema = {"type": "string", "pattern": pattern, "description": "a code"}
    assert schema_enforced(schema)
    regex = schema_regex(json.dumps(schema), layout=COMPACT_JSON)
    valid = jsonschema.Draft202012Validator(schema).is_valid(value)
    assert bool(re.fullmatch(regex, json.dumps(value))) == valid, (pattern, value, regex)


def test_patterns_the_regex_cannot_write_exactly_stay_on_llguidance() -> None:
    for pattern in (
        "abc",  # unanchored: a search
        "^[^,]+$",  # a negated class holds the quote
        '^a"b$',
        r"^a\\b$",
        "^a.b$",
        r"^\s+$",
        "^a{,3}$",  # Python and ECMA read `{,3}` differently
        "^(?=a)a$",
        "^é+$",
        "^(",
    ):
        assert not schema_enforced({"type": "string", "pattern": pattern}), pattern
    assert not schema_enforced({"type": "string", "pattern": "^a+$", "maxLength": 3})
