"""The Responses API's tool fields (flat function tools, `tool_choice`, `parallel_tool_calls`)
and their translation into the one internal form (server/tools); the tools as echoed in the
response object."""

from __future__ import annotations

from typing import Any

import msgspec

from radixrt.serve.http.api.responses.protocol import ResponsesRequest
from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools import CallFormat, ToolChoice, ToolPlan, ToolSpec
from radixrt.serve.http.tools.spec import EMPTY_PARAMETERS

CHOICE_MODES = ("auto", "none", "required")
CHOICE_SHAPES = (
    "tool_choice must be 'auto', 'none', 'required', {'type': 'function', 'name': ...} or "
    "{'type': 'allowed_tools', 'mode': 'auto'|'required', 'tools': [{'type': 'function', "
    "'name': ...}]}"
)


class FunctionTool(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A function tool, flat (unlike chat's {"type", "function": {...}})."""

    type: str
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None  # forced calls are schema-valid either way


def tool_plan(req: ResponsesRequest, fmt: CallFormat) -> ToolPlan:
    """The request's tools and choice in `fmt`; 400 for built-in tools, bad tools (the shared
    check_tools) and a choice naming a tool not in the list."""
    specs = tool_specs(req.tools)
    return ToolPlan(fmt, tuple(specs), tool_choice(req.tool_choice, req.parallel_tool_calls))


def tool_specs(tools: list[dict[str, Any]] | None) -> list[ToolSpec]:
    specs = []
    for i, tool in enumerate(tools or ()):
        kind = tool.get("type")
        if kind is None:
            raise BadRequestError(f"tools[{i}].type: required ('function')")
        if kind != "function":
            raise BadRequestError(
                f"tools[{i}].type: {kind!r} is a built-in tool of OpenAI's, not supported by "
                "this server (only function tools are)"
            )
        try:
            f = msgspec.convert(tool, FunctionTool)
        except msgspec.ValidationError as e:
            raise BadRequestError(f"tools[{i}]: {e}") from None
        params = EMPTY_PARAMETERS if f.parameters is None else f.parameters
        specs.append(ToolSpec(f.name, f.description or "", params))
    return specs


def tool_choice(choice: str | dict[str, Any] | None, parallel: bool | None) -> ToolChoice:
    par = parallel is not False
    if choice is None or choice in CHOICE_MODES:
        return ToolChoice(choice or "auto", parallel=par)  # type: ignore[arg-type]
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "function":
            return ToolChoice("named", name=_name(choice, "tool_choice"), parallel=par)
        if kind == "allowed_tools":
            mode = choice.get("mode")
            if mode not in ("auto", "required"):
                raise BadRequestError("tool_choice.mode: must be 'auto' or 'required'")
            tools = choice.get("tools")
            if not isinstance(tools, list):
                raise BadRequestError("tool_choice.tools: a list of {'type': 'function', 'name'}")
            names = tuple(_name(t, f"tool_choice.tools[{i}]") for i, t in enumerate(tools))
            return ToolChoice(mode, allowed=names, parallel=par)
        if kind is not None:
            raise BadRequestError(f"tool_choice.type: {kind!r} is not supported; {CHOICE_SHAPES}")
    raise BadRequestError(CHOICE_SHAPES)


def tools_echo(req: ResponsesRequest) -> list[dict[str, Any]]:
    """The tools as the response object restates them (checked before)."""
    keys = ("description", "parameters", "strict")
    return [
        {"type": "function", "name": t["name"], **{k: t.get(k) for k in keys}}
        for t in req.tools or ()
    ]


def _name(d: Any, where: str) -> str:
    if not isinstance(d, dict) or d.get("type") != "function" or not isinstance(d.get("name"), str):
        raise BadRequestError(f"{where}: a function is named by {{'type': 'function', 'name'}}")
    return str(d["name"])
