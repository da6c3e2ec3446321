"""The one internal form of tools, whatever the dialect: a function tool (name, description,
JSON-schema parameters), the caller's choice (auto, none, required, one named tool) and a
call the model made. Every dialect's parse ends here, and the checks live here once."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from radixrt.serve.http.protocol import BadRequestError

MAX_TOOLS = 128
MAX_SCHEMA_CHARS = 65536  # one tool's parameters as JSON
NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}

ChoiceMode = Literal["auto", "none", "required", "named"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call; `parameters` is a JSON schema of type object."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: dict(EMPTY_PARAMETERS))

    def as_openai(self) -> dict[str, Any]:
        """The tool as chat templates take it (`tools=` of apply_chat_template)."""
        fn = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": fn}


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """auto: the model may call any tool or answer; none: it answers (the tools stay in the
    prompt, so its cached prefix does not change); required: at least one call of any
    `allowed` tool (None: all); named: a call of `name`. `parallel`: more than one call."""

    mode: ChoiceMode = "auto"
    name: str | None = None
    allowed: tuple[str, ...] | None = None
    parallel: bool = True

    def __post_init__(self) -> None:
        if self.mode == "named" and self.parallel:
            object.__setattr__(self, "parallel", False)

    @property
    def is_forced(self) -> bool:
        return self.mode in ("required", "named")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model made (or a client replays): `arguments` is the JSON text as written."""

    id: str
    name: str
    arguments: str

    def arguments_value(self) -> Any:
        """The arguments parsed; the text itself when it is not JSON (a truncated call)."""
        try:
            return json.loads(self.arguments)
        except ValueError:
            return self.arguments


def check_tools(tools: list[ToolSpec], choice: ToolChoice) -> None:
    """400 for what no request may ask: too many tools, a bad or repeated name, parameters
    that are not an object schema, a choice naming a tool that is not in the list."""
    if len(tools) > MAX_TOOLS:
        raise BadRequestError(f"tools: {len(tools)} tools; at most {MAX_TOOLS}")
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if not NAME_RE.fullmatch(tool.name):
            raise BadRequestError(
                f"tools.{i}.name: {tool.name!r} must be 1-64 letters, digits, '_', '.' or '-'"
            )
        if tool.name in seen:
            raise BadRequestError(f"tools.{i}.name: {tool.name!r} is given twice")
        seen.add(tool.name)
        check_parameters(tool.parameters, f"tools.{i}")
    if choice.is_forced and not tools:
        raise BadRequestError(f"tool_choice {choice.mode!r} needs at least one tool")
    for name in [choice.name, *(choice.allowed or ())]:
        if name is not None and name not in seen:
            raise BadRequestError(f"tool_choice: no tool is named {name!r}")


def check_parameters(schema: Any, where: str) -> None:
    if not isinstance(schema, dict):
        raise BadRequestError(f"{where}: parameters must be a JSON schema object")
    kind = schema.get("type", "object")
    if kind != "object":
        raise BadRequestError(f"{where}: parameters must be a schema of type 'object'")
    if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
        raise BadRequestError(f"{where}: parameters has more than {MAX_SCHEMA_CHARS} characters")


def allowed_tools(tools: list[ToolSpec], choice: ToolChoice) -> list[ToolSpec]:
    """The tools a call may be of, in the request's order (`auto` with allowed_tools too)."""
    if choice.mode == "named":
        return [t for t in tools if t.name == choice.name]
    if choice.allowed is not None:
        return [t for t in tools if t.name in choice.allowed]
    return list(tools)
