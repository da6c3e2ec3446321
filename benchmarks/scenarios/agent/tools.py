"""The agent benchmark's data, made deterministically from a seed: a long list of plausible
tool definitions (enums, integer bounds, nested objects, arrays, `additionalProperties:
false`), schema-valid example arguments for scripted history turns, and tool results."""

from __future__ import annotations

import json
import random
from typing import Any

DOMAINS = [
    "invoice", "customer", "ticket", "shipment", "calendar_event", "repository", "deployment",
    "sensor", "playlist", "recipe", "flight", "hotel_booking", "payment", "employee",
    "warehouse_item", "support_chat", "dataset", "experiment", "alert", "document",
]  # fmt: skip
VERBS = {
    "get": "Fetch one {d} by its identifier",
    "search": "Search {d}s matching filters, newest first",
    "create": "Create a new {d} with the given fields",
    "update": "Change fields of an existing {d}",
}
WORDS = [
    "alpha", "north", "blue", "rapid", "quiet", "delta", "amber", "solid", "prime", "urban",
    "cedar", "lunar", "metro", "coral", "vivid", "ember",
]  # fmt: skip
STATUSES = [
    ["open", "pending", "closed"], ["draft", "active", "archived"],
    ["low", "medium", "high", "urgent"], ["queued", "running", "failed", "done"],
]  # fmt: skip


def _field(rng: random.Random, domain: str, i: int) -> tuple[str, dict[str, Any]]:
    """One parameter of a tool: a name and its schema, of one of six shapes."""
    kind = rng.randrange(6)
    word = rng.choice(WORDS)
    if kind == 0:
        return f"{word}_note", {
            "type": "string",
            "maxLength": 24,
            "description": f"A short {word} note.",
        }
    if kind == 1:
        lo = rng.randrange(0, 10)
        hi = lo + rng.choice([10, 100, 1000])
        return f"{word}_count", {"type": "integer", "minimum": lo, "maximum": hi}
    if kind == 2:
        return "status", {"type": "string", "enum": rng.choice(STATUSES)}
    if kind == 3:
        return f"include_{word}", {"type": "boolean", "description": f"Whether to add {word} data."}
    if kind == 4:
        return f"{word}_tags", {
            "type": "array",
            "items": {"type": "string", "maxLength": 12},
            "maxItems": 3,
        }
    return f"{domain}_{word}_range", {
        "type": "object",
        "properties": {
            "start": {"type": "integer", "minimum": 0, "maximum": 9999},
            "end": {"type": "integer", "minimum": 0, "maximum": 9999},
        },
        "required": ["start", "end"],
        "additionalProperties": False,
    }


def make_tools(n: int = 16, seed: int = 0) -> list[dict[str, Any]]:
    """`n` OpenAI-style function tools, the same for the same (n, seed); 16 with SmolLM2's
    tokenizer are about 3k tokens of prompt (Hermes text form)."""
    rng = random.Random(seed)
    pairs = rng.sample([(d, v) for d in DOMAINS for v in VERBS], min(n, len(DOMAINS) * 4))
    tools = []
    for domain, verb in pairs:
        props: dict[str, Any] = {f"{domain}_id": {"type": "string", "maxLength": 16}}
        for i in range(rng.randrange(2, 4)):
            name, schema = _field(rng, domain, i)
            props.setdefault(name, schema)
        required = [f"{domain}_id", *[k for k in list(props)[1:] if rng.random() < 0.5]]
        params = {
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": False,
        }
        desc = VERBS[verb].format(d=domain.replace("_", " ")) + "."
        tools.append(
            {
                "type": "function",
                "function": {"name": f"{verb}_{domain}", "description": desc, "parameters": params},
            }
        )
    return tools


def example_value(schema: dict[str, Any], rng: random.Random) -> Any:
    """A value valid against `schema` (the shapes make_tools writes)."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        return {k: example_value(s, rng) for k, s in schema["properties"].items()}
    if kind == "array":
        return [example_value(schema["items"], rng) for _ in range(rng.randrange(1, 3))]
    if kind == "integer":
        return rng.randint(schema.get("minimum", 0), schema.get("maximum", 100))
    if kind == "boolean":
        return rng.random() < 0.5
    return f"{rng.choice(WORDS)}-{rng.randrange(1000)}"[: schema.get("maxLength", 64)]


def tool_result(name: str, args: dict[str, Any], rng: random.Random) -> str:
    """What the tool returns: a small JSON record echoing the call."""
    rows = [
        {"id": f"{rng.choice(WORDS)}-{rng.randrange(10000)}", "score": rng.randrange(100)}
        for _ in range(3)
    ]
    return json.dumps({"ok": True, "tool": name, "query": args, "rows": rows})
