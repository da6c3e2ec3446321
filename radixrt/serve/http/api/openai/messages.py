"""Chat messages as the chat template takes them: roles (OpenAI's developer the system turn,
an unknown role a 400), text content, tool calls and results, and the rendering of a
conversation with its template options (chat completions' and /tokenize's alike)."""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from radixrt.serve.http.api.openai.tools import ToolCallItem, calls_of
from radixrt.serve.http.protocol import BadRequestError, Limits
from radixrt.serve.http.tools import MESSAGE_ROLES, ToolPlan, render_tool_chat

CHAT_ROLES = {**MESSAGE_ROLES, "tool": "tool"}


class ContentPart(msgspec.Struct):
    type: str
    text: str | None = None


class ChatMessage(msgspec.Struct):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallItem] | None = None  # assistant
    tool_call_id: str | None = None  # tool
    # An assistant's reasoning as a reasoning parser gave it (vLLM's and SGLang's field, and
    # its newer name): passed to the template, which may show it (Qwen3's, within a turn's
    # tool calls), so the next turn's prompt holds the tokens the model wrote.
    reasoning_content: str | None = None
    reasoning: str | None = None


class TemplateOptions(msgspec.Struct, kw_only=True):
    """How a chat's messages go through the template (ChatCompletionRequest's, /tokenize's)."""

    messages: list[ChatMessage] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None


class Templated(Protocol):
    """A request's messages and template options (ChatCompletionRequest, TemplateOptions)."""

    @property
    def messages(self) -> list[ChatMessage] | None: ...
    @property
    def add_generation_prompt(self) -> bool: ...
    @property
    def continue_final_message(self) -> bool: ...
    @property
    def chat_template_kwargs(self) -> dict[str, Any] | None: ...


def render_messages(req: Templated, plan: ToolPlan, tokenizer: Any, limits: Limits) -> str:
    """The prompt text of a chat: its messages and `plan`'s tools through the template. With
    continue_final_message the last message, an assistant's text, is left open the way the
    template renders it (its end-of-turn cut off, no generation prompt after it), and the
    answer goes on from there, as in vLLM."""
    if not req.messages:
        raise BadRequestError("messages must be a non-empty list")
    turns = chat_turns(req.messages)
    if req.continue_final_message:
        last = turns[-1]
        if last["role"] != "assistant" or last.get("tool_calls") or not last["content"].strip():
            raise BadRequestError(
                "continue_final_message needs the last message to be an assistant's text"
            )
    add = req.add_generation_prompt and not req.continue_final_message
    return render_tool_chat(turns, plan, tokenizer, limits, add, req.chat_template_kwargs,
                            req.continue_final_message)  # fmt: skip


def chat_messages_of(messages: list[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": _role(m, i), "content": _content_text(m)} for i, m in enumerate(messages)]


def chat_turns(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as the tool-aware renderer takes them (calls and results kept)."""
    turns: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        turn: dict[str, Any] = {"role": _role(m, i), "content": _content_text(m)}
        if m.tool_calls:
            turn["tool_calls"] = calls_of(m.tool_calls)
        thought = m.reasoning_content or m.reasoning
        if thought and m.role == "assistant":
            turn["reasoning_content"] = thought
        if m.role == "tool":
            turn["tool_call_id"] = m.tool_call_id or ""
            if m.name is not None:
                turn["name"] = m.name
        turns.append(turn)
    return turns


def _role(m: ChatMessage, i: int) -> str:
    """The template's role of messages[i] (developer -> system), else 400."""
    role = CHAT_ROLES.get(m.role)
    if role is None:
        raise BadRequestError(
            f"messages[{i}].role: {m.role!r} is not one of {', '.join(CHAT_ROLES)}"
        )
    return role


def _content_text(m: ChatMessage) -> str:
    return parts_text(m.content, "message")


def parts_text(content: str | list[ContentPart] | None, what: str) -> str:
    """Text content, or its text parts joined (400 naming `what` for any other part)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise BadRequestError(f"{what} content of type {part.type!r} is not supported")
        parts.append(part.text)
    return "".join(parts)
