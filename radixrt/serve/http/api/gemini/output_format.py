"""generationConfig's output format and thinking: `responseMimeType` text/plain, application/json
(any JSON value, or `responseSchema`'s, an OpenAPI schema made JSON schema, or
`responseJsonSchema`'s as given) or text/x.enum (one of a string schema's enum values, as
plain text); `thinkingConfig` as "no thinking", or, where the server reads reasoning
(--reasoning-parser), includeThoughts: the reasoning as thought parts."""

from __future__ import annotations

from typing import Any

import msgspec

from radixrt.serve.http.api.gemini.tools import json_schema
from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools import EFFORTS_GEMINI, effort_budget
from radixrt.serve.http.tools.grammar import literal_regex

MIME_TYPES = ("text/plain", "application/json", "text/x.enum")


class ThinkingConfig(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    thinking_budget: int | None = None
    include_thoughts: bool | None = None
    thinking_level: str | None = None
    # google-genai sends these in snake case (they pass through its camel-casing).
    thinking_budget_snake: int | None = msgspec.field(default=None, name="thinking_budget")
    include_thoughts_snake: bool | None = msgspec.field(default=None, name="include_thoughts")
    thinking_level_snake: str | None = msgspec.field(default=None, name="thinking_level")


def format_fields(
    mime: str | None, response_schema: Any, response_json_schema: Any
) -> dict[str, Any]:
    """The sampling fields (`json_schema` or `regex`) of an output format; {} for plain text."""
    if response_schema is not None and response_json_schema is not None:
        raise BadRequestError("set responseSchema or responseJsonSchema, not both")
    given = response_json_schema
    if response_schema is not None:
        given = json_schema(response_schema, closed=True)
    mime = mime or "text/plain"
    if mime == "text/plain":
        if given is not None:
            raise BadRequestError(
                "responseSchema needs responseMimeType application/json or text/x.enum"
            )
        return {}
    if mime == "application/json":
        schema = {} if given is None else given  # {}: any JSON value
        if not isinstance(schema, dict):
            raise BadRequestError("responseSchema must be an object")
        return {"json_schema": schema}
    if mime == "text/x.enum":
        values = given.get("enum") if isinstance(given, dict) else None
        if not values or not all(isinstance(v, str) and v for v in values):
            raise BadRequestError(
                "responseMimeType text/x.enum needs a responseSchema of type STRING with enum "
                "values (non-empty strings)"
            )
        return {"regex": "|".join(literal_regex(v) for v in values)}
    raise BadRequestError(
        f"responseMimeType {mime!r} is not supported; use {', '.join(MIME_TYPES)}"
    )


def wants_thoughts(config: ThinkingConfig | None) -> bool:
    """Whether a thinkingConfig asks for the thoughts (includeThoughts)."""
    return config is not None and bool(config.include_thoughts or config.include_thoughts_snake)


def thinking_level(config: ThinkingConfig) -> str | None:
    """A thinkingConfig's thinkingLevel in either spelling (None where unset or unspecified)."""
    level = (
        config.thinking_level if config.thinking_level is not None else config.thinking_level_snake
    )
    return None if level in (None, "THINKING_LEVEL_UNSPECIFIED") else level


def thinking_budget(config: ThinkingConfig | None) -> int | None:
    """The most tokens a thinkingConfig lets the model think: its thinkingBudget (0: no
    thinking), or its thinkingLevel's budget (tools/reasoning.py: EFFORT_BUDGETS); None where
    it sets neither or a budget of -1 (the model's own choice); 400 for another negative
    budget, an unknown level, or both a budget and a level (as Gemini answers)."""
    if config is None:
        return None
    budget = config.thinking_budget
    if budget is None:
        budget = config.thinking_budget_snake
    level = thinking_level(config)
    if level is not None:
        if budget is not None:
            raise BadRequestError("thinkingConfig: set thinkingBudget or thinkingLevel, not both")
        return effort_budget(level, "thinkingConfig.thinkingLevel", EFFORTS_GEMINI)
    if budget is None or budget == -1:
        return None
    if budget < 0:
        raise BadRequestError(
            f"thinkingConfig.thinkingBudget: {budget} is neither -1 (dynamic) nor >= 0"
        )
    return budget


def check_thinking(config: ThinkingConfig | None, reads_reasoning: bool = False) -> None:
    """Where the server reads no reasoning, a thinkingConfig may only ask for no thinking
    (budget 0, no thoughts), else 400; where it does, a budget or a level caps the thinking
    (thinking_budget)."""
    if config is None or reads_reasoning:
        return
    budgets = (config.thinking_budget, config.thinking_budget_snake)
    level = thinking_level(config)
    if any(b not in (None, 0) for b in budgets) or wants_thoughts(config) or level:
        raise BadRequestError(
            "thinkingConfig: no thinking mode is served (thinkingBudget 0, or leave it out; "
            "thoughts need a server started with --reasoning-parser)"
        )
