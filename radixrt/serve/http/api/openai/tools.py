"""OpenAI's tool fields (chat `tools`, `tool_choice`, `parallel_tool_calls`, assistant
`tool_calls`, `tool` messages) and their translation into the one internal form."""

from __future__ import annotations

from typing import Any

import msgspec

from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools import CallFormat, ToolCall, ToolChoice, ToolPlan, ToolSpec
from radixrt.serve.http.tools.spec import EMPTY_PARAMETERS


class FunctionDef(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None  # calls are always schema-valid when forced


class ToolDef(msgspec.Struct, forbid_unknown_fields=True):
    type: str
    function: FunctionDef


class FunctionCall(msgspec.Struct):
    name: str
    arguments: str


class ToolCallItem(msgspec.Struct):
    id: str
    function: FunctionCall
    type: str = "function"


def tool_specs(tools: list[ToolDef] | None) -> list[ToolSpec]:
    specs = []
    for i, t in enumerate(tools or ()):
        if t.type != "function":
            raise BadRequestError(f"tools.{i}.type: only 'function' tools are supported")
        f = t.function
        params = EMPTY_PARAMETERS if f.parameters is None else f.parameters
        specs.append(ToolSpec(f.name, f.description or "", params))
    return specs


def tool_choice(choice: str | dict[str, Any] | None, parallel: bool | None) -> ToolChoice:
    """`none`, `auto`, `required`, {"type": "function", "function": {"name"}} or
    {"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}."""
    par = True if parallel is None else parallel
    if choice is None or choice in ("auto", "none", "required"):
        return ToolChoice(choice or "auto", parallel=par)  # type: ignore[arg-type]
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "function" and isinstance(choice.get("function"), dict):
            return ToolChoice("named", name=_name(choice["function"]), parallel=par)
        allowed = choice.get("allowed_tools")
        if kind == "allowed_tools" and isinstance(allowed, dict):
            mode = allowed.get("mode", "auto")
            if mode not in ("auto", "required"):
                raise BadRequestError("tool_choice.allowed_tools.mode must be auto or required")
            names = tuple(_name(t.get("function", t)) for t in allowed.get("tools") or ())
            return ToolChoice(mode, allowed=names, parallel=par)
    raise BadRequestError(
        "tool_choice must be 'none', 'auto', 'required', {'type': 'function', 'function': "
        "{'name': ...}} or {'type': 'allowed_tools', ...}"
    )


def tool_plan(
    fmt: CallFormat,
    tools: list[ToolDef] | None,
    choice: str | dict[str, Any] | None,
    parallel: bool | None,
) -> ToolPlan:
    specs = tool_specs(tools)
    picked = tool_choice(choice, parallel)
    if choice is not None and not specs and picked.mode != "none":
        raise BadRequestError("tool_choice needs tools")
    return ToolPlan(fmt, tuple(specs), picked)


def calls_of(items: list[ToolCallItem] | None) -> list[ToolCall]:
    return [ToolCall(c.id, c.function.name, c.function.arguments) for c in items or ()]


def call_items(calls: list[ToolCall]) -> list[dict[str, Any]]:
    """A whole message's `tool_calls`."""
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in calls
    ]


def _name(d: Any) -> str:
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise BadRequestError("tool_choice: a tool is named by {'name': ...}")
    return str(d["name"])
