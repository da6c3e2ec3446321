"""JSON schemas as outlines regexes, without the backends (no torch): the regex a schema is
compiled from (numeric bounds and string patterns written by schema_bounds.py), and whether
that regex enforces every keyword of the schema."""

from __future__ import annotations

import json
from typing import Any

import outlines_core  # type: ignore[import-untyped]

from radixrt.grammar.base import GrammarError, GrammarSpec
from radixrt.grammar.schema_bounds import ANNOTATIONS, needs_own_regex, own_regex, with_placeholders

# JSON whitespace between tokens: at most one space, so a schema's output length stays bounded.
JSON_WHITESPACE = r"[ ]?"
# JSON-schema keywords whose every constraint the outlines regex enforces (numeric bounds and
# patterns: where schema_bounds.own_regex writes them). Any other keyword goes to llguidance.
_ENFORCED = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "enum", "const"}
    | {"anyOf", "$ref", "$defs", "definitions", "minLength", "maxLength", "minItems", "maxItems"}
)


def schema_regex(schema_text: str, whitespace: str = JSON_WHITESPACE) -> str:
    """The regex outlines compiles a JSON schema (a JSON string) into, with `whitespace`
    between tokens and the subschemas that own_regex writes; GrammarError if it cannot."""
    try:
        schema, bounds = with_placeholders(json.loads(schema_text), schema_text)
    except (ValueError, RecursionError):
        schema, bounds = None, {}  # outlines says what is wrong with it
    text = json.dumps(schema) if bounds else schema_text
    try:
        regex = str(outlines_core.json_schema.build_regex_from_schema(text, whitespace))
    except (ValueError, TypeError) as e:
        raise GrammarError(f"invalid json_schema: {e}") from None
    for placeholder, bound in bounds.items():
        regex = regex.replace(placeholder, bound)
    return regex


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
