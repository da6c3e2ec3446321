"""Responses input items: messages (text parts), function_call and function_call_output, the
checks on them, and their translation into the turns the tool-aware renderer takes."""

from __future__ import annotations

from typing import Any

import msgspec

from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools import MESSAGE_ROLES, ToolCall

ROLES = MESSAGE_ROLES  # (developer -> system)
TEXT_PARTS = ("input_text", "output_text")
CALL_FIELDS = {"function_call": ("call_id", "name", "arguments"),
               "function_call_output": ("call_id", "output")}  # fmt: skip


class ContentPart(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A content part: input_text / output_text are taken; the fields of images and files are
    named only so that their type, not an unknown field, is what the 400 names."""

    type: str
    text: str | None = None
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None
    refusal: str | None = None
    image_url: str | None = None
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None
    detail: str | None = None


class InputItem(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """An input item; `type` says which fields it uses (message: role, content; function_call:
    call_id, name, arguments; function_call_output: call_id, output)."""

    type: str = "message"
    role: str | None = None
    content: str | list[ContentPart] | None = None
    id: str | None = None
    status: str | None = None
    phase: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[ContentPart] | None = None
    namespace: str | None = None
    summary: list[ContentPart] | None = None  # reasoning: its summary (not shown to the model)
    encrypted_content: str | None = None  # reasoning: never given by this server; ignored
    caller: dict[str, Any] | None = None  # who made a call: ignored (every call is direct)
    is_async: bool | None = msgspec.field(default=None, name="async")  # ignored, as async_
    async_: bool | None = None  # the name pydantic's model_dump() gives it


def input_messages(items: str | list[InputItem]) -> list[dict[str, Any]]:
    """The input as the tool-aware renderer takes it (server/tools/prompt.py): messages
    (developer -> system); function_call items as `tool_calls` of an assistant turn (the
    one just before, else a new one); function_call_output items as `tool` turns. Checked
    before."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}] if items else []
    turns: list[dict[str, Any]] = []
    thought: list[str] = []  # reasoning items' text, for the assistant turn they precede
    for item in items:
        if item.type == "reasoning":
            thought.append(_text(item.content if isinstance(item.content, list) else []))
            continue
        if item.type == "function_call":
            call = ToolCall(item.call_id or "", item.name or "", item.arguments or "")
            if not turns or turns[-1]["role"] != "assistant":
                turns.append({"role": "assistant", "content": ""})
            turns[-1]["tool_calls"] = [*turns[-1].get("tool_calls", ()), call]
            _think(turns[-1], thought)
        elif item.type == "function_call_output":
            output = item.output if isinstance(item.output, str) else _text(item.output or [])
            turns.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
        else:
            turns.append({"role": ROLES[item.role or ""], "content": _item_text(item)})
            if turns[-1]["role"] == "assistant":
                _think(turns[-1], thought)
    return turns


def _think(turn: dict[str, Any], thought: list[str]) -> None:
    """The reasoning read before an assistant turn, as its `reasoning_content` (templates
    that show an assistant's reasoning take it there)."""
    if thought:
        turn["reasoning_content"] = "".join(thought)
        thought.clear()


def check_input(items: str | list[InputItem]) -> None:
    """400 naming the item and field for what cannot be taken."""
    for i, item in enumerate(items if isinstance(items, list) else ()):
        where = f"input[{i}]"
        if item.type in CALL_FIELDS:
            for name in CALL_FIELDS[item.type]:
                if getattr(item, name) is None:
                    raise BadRequestError(f"{where}.{name}: required for {item.type} items")
            _check_output(item, where)
            continue
        if item.type == "reasoning":  # (a reasoning parser's item, given back)
            for j, part in enumerate(item.content if isinstance(item.content, list) else ()):
                if part.type != "reasoning_text" or part.text is None:
                    raise BadRequestError(f"{where}.content[{j}].type: reasoning_text only")
            continue
        if item.type == "item_reference":
            raise BadRequestError(f"{where}: item_reference is not supported; use "
                                  "previous_response_id")  # fmt: skip
        if item.type != "message":
            raise BadRequestError(f"{where}.type: items of type {item.type!r} are not supported")
        if item.role not in ROLES:
            raise BadRequestError(f"{where}.role: must be one of {', '.join(ROLES)}")
        if item.content is None:
            raise BadRequestError(f"{where}.content: required")
        for j, part in enumerate(item.content if isinstance(item.content, list) else ()):
            if part.type not in TEXT_PARTS or part.text is None:
                raise BadRequestError(
                    f"{where}.content[{j}].type: {part.type!r} is not supported (text only: "
                    "input_text, output_text)"
                )


def _check_output(item: InputItem, where: str) -> None:
    for j, part in enumerate(item.output if isinstance(item.output, list) else ()):
        if part.type != "input_text" or part.text is None:
            raise BadRequestError(
                f"{where}.output[{j}].type: {part.type!r} is not supported (text only: input_text)"
            )


def _item_text(item: InputItem) -> str:
    return item.content if isinstance(item.content, str) else _text(item.content or [])


def _text(parts: list[ContentPart]) -> str:
    return "".join(part.text or "" for part in parts)
