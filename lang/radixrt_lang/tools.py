"""Tool calls inside programs: a tool as a JSON schema (from a dict, an OpenAI-style tool or
a plain Python function's signature), a forced call of one of them as one JSON schema (so
the backend's grammar makes the arguments valid whenever they fit max_tokens), the call the
model wrote parsed back, and running it."""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable
from typing import Any

from radixrt_lang.errors import OutputParseError

Tool = dict[str, Any] | Callable[..., Any]
_JSON_TYPES: dict[Any, str] = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "boolean",
    list: "array",
    dict: "object",
}


def tool_spec(tool: Tool) -> dict[str, Any]:
    """{"name", "description", "parameters"} of a tool given as such a dict, as an OpenAI
    tool ({"type": "function", "function": {...}}), or as a function (its signature's
    annotations: int, float, str, bool, list, dict, Literal[...]; parameters without a
    default are required; the docstring's first paragraph is the description)."""
    if callable(tool) and not isinstance(tool, dict):
        return _function_spec(tool)
    if not isinstance(tool, dict):
        raise TypeError(f"a tool is a dict or a function, got {type(tool).__name__}")
    fn = tool.get("function", tool) if tool.get("type") == "function" else tool
    if not isinstance(fn.get("name"), str):
        raise ValueError(f"a tool needs a name: {tool!r}")
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    return {"name": fn["name"], "description": fn.get("description", ""), "parameters": params}


def call_schema(specs: list[dict[str, Any]]) -> dict[str, Any]:
    """One call of any of `specs`: {"name": <its name>, "arguments": <its parameters>}."""
    if not specs:
        raise ValueError("a tool call needs at least one tool")
    names = [s["name"] for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"tool names must differ: {names}")
    options = [
        {
            "type": "object",
            "properties": {"name": {"const": s["name"]}, "arguments": s["parameters"]},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for s in specs
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def parse_call(text: str, names: set[str]) -> dict[str, Any]:
    """The call the model wrote: {"name", "arguments"}; OutputParseError when it is not one
    (cut short by max_tokens, or a backend that does not enforce the schema)."""
    try:
        value = json.loads(text)
    except ValueError:
        raise OutputParseError(f"expected a tool call as JSON, the model wrote {text!r}") from None
    if not isinstance(value, dict) or value.get("name") not in names:
        raise OutputParseError(f"expected a call of one of {sorted(names)}, got {text!r}")
    if not isinstance(value.get("arguments"), dict):
        raise OutputParseError(f"expected the call's arguments as an object, got {text!r}")
    return {"name": value["name"], "arguments": value["arguments"]}


def run_call(call: dict[str, Any], tools: list[Tool]) -> Any:
    """Run the function a parsed call names with its arguments (tools given as functions)."""
    for tool in tools:
        if callable(tool) and not isinstance(tool, dict) and tool.__name__ == call["name"]:
            return tool(**call["arguments"])
    raise KeyError(f"no function tool named {call['name']!r}")


def _function_spec(fn: Callable[..., Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required = []
    for name, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(f"{fn.__name__}: *args and **kwargs cannot be tool parameters")
        properties[name] = _schema_of(hints.get(name, str), f"{fn.__name__}({name})")
        if p.default is p.empty:
            required.append(name)
    doc = inspect.getdoc(fn) or ""
    parameters = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return {"name": fn.__name__, "description": doc.split("\n\n")[0], "parameters": parameters}


def _schema_of(hint: Any, where: str) -> dict[str, Any]:
    if typing.get_origin(hint) is typing.Literal:
        return {"enum": list(typing.get_args(hint))}
    base = typing.get_origin(hint) or hint
    if base not in _JSON_TYPES:
        raise ValueError(f"{where}: {hint!r} is not a JSON type (int, float, str, bool, ...)")
    return {"type": _JSON_TYPES[base]}
