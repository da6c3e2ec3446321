"""JSON schemas and regexes the structured-generation tests run on SmolLM2, each with a prompt.

Strings carry maxLength and numbers bounds, so that every output finishes well within the
tests' max_new_tokens even at temperature 1.0.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema

S8 = {"type": "string", "maxLength": 8}
S16 = {"type": "string", "maxLength": 16}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        "additionalProperties": False,
    }


# (prompt, schema)
SCHEMAS: list[tuple[str, dict[str, Any]]] = [
    (
        "A person as JSON:",
        _obj({"name": S16, "age": {"type": "integer", "minimum": 0, "maximum": 120}}),
    ),
    (
        "A city as JSON:",
        _obj(
            {
                "name": S16,
                "country": S16,
                "population": {"type": "integer", "minimum": 0, "maximum": 50000000},
            }
        ),
    ),
    (
        "A user account as JSON:",
        _obj(
            {
                "user": _obj(
                    {
                        "id": {"type": "integer", "minimum": 1, "maximum": 9999},
                        "email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.com$"},
                    }
                )
            }
        ),
    ),
    (
        "Tags for a blog post about cooking, as JSON:",
        _obj({"tags": {"type": "array", "items": S8, "minItems": 2, "maxItems": 3}}),
    ),
    ("The color of the sky as JSON:", _obj({"color": {"enum": ["red", "green", "blue"]}})),
    (
        "Is water wet? Answer as JSON:",
        _obj({"ok": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 20}}),
    ),
    (
        "A person with an optional nickname, as JSON:",
        _obj(
            {
                "nickname": {"type": ["string", "null"], "maxLength": 10},
                "age": {"type": "integer", "minimum": 0, "maximum": 99},
            }
        ),
    ),
    (
        "The price of a book as JSON:",
        _obj(
            {
                "price": {"type": "number", "minimum": 0, "maximum": 1000},
                "currency": {"enum": ["USD", "EUR"]},
            }
        ),
    ),
    ("A product as JSON:", _obj({"sku": S8, "note": S8}, required=["sku"])),
    (
        "A shopping list as JSON:",
        _obj(
            {
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 2,
                    "items": _obj(
                        {"name": S8, "qty": {"type": "integer", "minimum": 1, "maximum": 9}}
                    ),
                }
            }
        ),
    ),
    (
        "The year the first moon landing happened, as JSON:",
        _obj({"year": {"type": "integer", "minimum": 1900, "maximum": 2030}}),
    ),
    ("A US zip code as JSON:", _obj({"zip": {"type": "string", "pattern": "^[0-9]{5}$"}})),
    (
        "Today's date as JSON:",
        _obj({"date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}}),
    ),
    ("A config file as JSON:", _obj({"version": {"const": 2}, "name": S8})),
    (
        "A list of small numbers as JSON:",
        {
            "type": "array",
            "minItems": 1,
            "maxItems": 4,
            "items": {"type": "integer", "minimum": 0, "maximum": 99},
        },
    ),
    ("Will it rain tomorrow? Answer as JSON:", {"enum": ["yes", "no", "maybe"]}),
    (
        "A book as JSON:",
        _obj({"book": _obj({"title": S16, "author": _obj({"first": S8, "last": S8})})}),
    ),
    (
        "A measurement as JSON:",
        _obj(
            {
                "value": {
                    "anyOf": [
                        {"type": "integer", "minimum": 0, "maximum": 100},
                        {"type": "string", "maxLength": 6},
                    ]
                }
            }
        ),
    ),
    (
        "Three feature flags as JSON:",
        _obj(
            {"flags": {"type": "array", "items": {"type": "boolean"}, "minItems": 3, "maxItems": 3}}
        ),
    ),
    (
        "A student's exam result as JSON:",
        _obj(
            {
                "id": {"type": "integer", "minimum": 1, "maximum": 999},
                "score": {"type": "number", "minimum": 0, "maximum": 100},
                "passed": {"type": "boolean"},
                "grade": {"enum": ["A", "B", "C", "D", "F"]},
                "notes": {"type": ["string", "null"], "maxLength": 12},
            }
        ),
    ),
]

# (prompt, regex)
REGEXES: list[tuple[str, str]] = [
    (
        "The IP address of the local router is ",
        r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
        r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
    ),
    ("The date of the meeting is ", r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    ("Call us at ", r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}"),
    ("My favourite pet is a ", r"(cat|dog|bird)"),
    ("The train leaves at ", r"([01][0-9]|2[0-3]):[0-5][0-9]"),
    ("Write to ", r"[a-z]{1,10}@[a-z]{1,10}\.(com|org|net)"),
    ("The background color is ", r"#[0-9a-fA-F]{6}"),
    ("Is the earth round? ", r"(Yes|No), because [a-z ]{1,20}\."),
    ("The temperature in Oslo today is ", r"-?[1-9][0-9]{0,2} degrees"),
    ("The latest release is ", r"v[0-9]\.[0-9]{1,2}\.[0-9]{1,2}"),
]


def check_schema(text: str, schema: dict[str, Any]) -> None:
    """Raise if `text` is not JSON that validates against `schema`."""
    import json

    jsonschema.validate(json.loads(text), schema)


def check_regex(text: str, regex: str) -> None:
    assert re.fullmatch(regex, text), (text, regex)
