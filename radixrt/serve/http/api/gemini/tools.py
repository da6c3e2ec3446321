"""Gemini's function calling in the one internal form: functionDeclarations as tools (an
OpenAPI-style `parameters` made JSON schema, or `parametersJsonSchema` as is), toolConfig's
functionCallingConfig as the choice, functionCall / functionResponse parts as calls and
results of the conversation, and a call as the functionCall part of an answer."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools import CallFormat, ToolCall, ToolChoice, ToolPlan, ToolSpec
from radixrt.serve.http.tools.grammar import compact_json
from radixrt.serve.http.tools.spec import EMPTY_PARAMETERS

MODES = {"AUTO": "auto", "ANY": "required", "NONE": "none", "VALIDATED": "auto"}
# No JSON-schema meaning (google-genai sends some keys in snake case: both spellings).
_OPENAPI_ONLY = ("nullable", "propertyOrdering", "property_ordering", "example")
_SNAKE_KEYS = {"max_length": "maxLength", "min_length": "minLength", "max_items": "maxItems",
               "min_items": "minItems", "any_of": "anyOf", "max_properties": "maxProperties",
               "min_properties": "minProperties"}  # fmt: skip


class FunctionCallingConfig(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    mode: str | None = None  # AUTO, ANY, NONE, VALIDATED
    allowed_function_names: list[str] | None = None


class ToolConfig(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    function_calling_config: FunctionCallingConfig | None = None


def tool_specs(decls: list[Any]) -> list[ToolSpec]:
    """FunctionDeclarations as tools."""
    specs = []
    for i, d in enumerate(decls):
        given = d.parameters_json_schema
        if given is None:
            given = d.parameters_json_schema_snake
        if given is not None:
            params = given
        elif d.parameters is not None:
            params = json_schema(d.parameters)
        else:
            params = EMPTY_PARAMETERS
        if not isinstance(params, dict):
            raise BadRequestError(f"functionDeclarations[{i}]: parameters must be an object")
        specs.append(ToolSpec(d.name, d.description or "", params))
    return specs


def json_schema(schema: Any, closed: bool = False) -> Any:
    """An OpenAPI schema object (upper-case types, `nullable`, keys in camel or snake case) as
    JSON schema. `closed`: an object with properties has those alone (additionalProperties
    false unless it says otherwise), as Gemini's structured output answers them."""
    if isinstance(schema, list):
        return [json_schema(s, closed) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {_SNAKE_KEYS.get(k, k): json_schema(v, closed) for k, v in schema.items()
           if k not in _OPENAPI_ONLY}  # fmt: skip
    if isinstance(out.get("type"), str):
        out["type"] = out["type"].lower()
        if schema.get("nullable") is True:
            out["type"] = [out["type"], "null"]
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: json_schema(v, closed) for k, v in schema["properties"].items()}
        if closed:
            out.setdefault("additionalProperties", False)
    return out


def tool_plan(fmt: CallFormat, specs: list[ToolSpec], config: ToolConfig | None) -> ToolPlan:
    fcc = config.function_calling_config if config is not None else None
    if fcc is None:
        return ToolPlan(fmt, tuple(specs))
    mode = MODES.get((fcc.mode or "AUTO").upper())
    if mode is None:
        raise BadRequestError(f"functionCallingConfig.mode must be one of {sorted(MODES)}")
    allowed = tuple(fcc.allowed_function_names) if fcc.allowed_function_names else None
    if allowed is not None and mode != "required":
        raise BadRequestError("allowedFunctionNames needs functionCallingConfig.mode ANY")
    return ToolPlan(fmt, tuple(specs), ToolChoice(mode, allowed=allowed))  # type: ignore[arg-type]


def call_of(call: Any, index: int) -> ToolCall:
    """A functionCall part of the conversation (ids are optional in Gemini)."""
    return ToolCall(call.id or f"call_{index}", call.name, compact_json(call.args or {}))


def result_text(response: Any) -> str:
    """A functionResponse part's `response` as the text a result turn holds."""
    return json.dumps(response.response or {}, ensure_ascii=False)


def call_part(call: ToolCall) -> dict[str, Any]:
    return {"functionCall": {"name": call.name, "args": call.arguments_value()}}
