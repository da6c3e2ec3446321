"""JSON schemas as outlines regexes, without the backends (no torch): the regex a schema is
compiled from (numeric bounds and string patterns written by schema_bounds.py), and whether
that regex enforces every keyword of the schema."""

from __future__ import annotations

import json
from typing import Any

import outlines_core  # type: ignore[import-untyped]

from radixrt.grammar.base import CANONICAL_JSON, GrammarError, GrammarSpec, JsonLayout
from radixrt.grammar.schema_bounds import (
    ANNOTATIONS,
    needs_own_regex,
    own_regex,
    unused_name,
    with_placeholders,
)

_SPACE = "radixrtspace"  # outlines' whitespace, rewritten into the layout's separators
# JSON-schema keywords whose every constraint the outlines regex enforces (numeric bounds and
# patterns: where schema_bounds.own_regex writes them). Any other keyword goes to llguidance.
_ENFORCED = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "enum", "const"}
    | {"anyOf", "$ref", "$defs", "definitions", "minLength", "maxLength", "minItems", "maxItems"}
)


def schema_regex(schema_text: str, layout: JsonLayout = CANONICAL_JSON) -> str:
    """The regex outlines compiles a JSON schema (a JSON string) into, written in `layout`
    (the language llguidance's compile of the schema in that layout accepts), with the
    subschemas that own_regex writes; GrammarError if it cannot."""
    try:
        decoded = json.loads(schema_text)
        schema, bounds = with_placeholders(decoded, schema_text)
        taken = schema_text + json.dumps(decoded, ensure_ascii=False)
    except (ValueError, RecursionError):
        schema, bounds, taken = None, {}, schema_text  # outlines says what is wrong with it
    text = json.dumps(schema) if bounds else schema_text
    space = unused_name(_SPACE, taken)
    try:
        regex = str(outlines_core.json_schema.build_regex_from_schema(text, space))
    except (ValueError, TypeError) as e:
        raise GrammarError(f"invalid json_schema: {e}") from None
    regex = _with_separators(regex, space, layout)
    for placeholder, bound in bounds.items():
        regex = regex.replace(placeholder, bound)
    return regex


def _with_separators(regex: str, space: str, layout: JsonLayout) -> str:
    """outlines writes `space` on both sides of an object's `:` and `,`, after an array's
    `,` and inside brackets: the separators take the first three, the brackets none."""
    regex = regex.replace(f"{space}:{space}", layout.key_separator)
    regex = regex.replace(f"{space},{space}", layout.item_separator)
    regex = regex.replace(f",{space}", layout.item_separator)
    return regex.replace(space, "")


def outlines_enforces(spec: GrammarSpec) -> bool:
    """Whether outlines' regex of `spec` enforces all of it (a regex always does)."""
    if spec.kind == "regex":
        return True
    try:
        return schema_enforced(json.loads(spec.text))
    except (ValueError, RecursionError):
        return False


def schema_enforced(schema: Any) -> bool:
    """Whether every keyword of `schema` and of its subschemas is in _ENFORCED or
    ANNOTATIONS, or is one that own_regex writes (True and False, the trivial schemas,
    are)."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    if needs_own_regex(schema):
        return own_regex(schema) is not None
    if any(k not in _ENFORCED and k not in ANNOTATIONS for k in schema):
        return False
    subs: list[Any] = []
    for key in ("properties", "$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            subs += schema[key].values()
    for key in ("items", "additionalProperties"):
        if key in schema:
            subs.append(schema[key])
    any_of = schema.get("anyOf", [])
    if not isinstance(any_of, list):
        return False
    return all(schema_enforced(s) for s in [*any_of, *subs])
