"""A conversation with tools through the model's chat template: its own `tools` argument
when the template renders one, else the call format's text (the tool list at the end of the
system turn, calls as the model writes them, results in a user turn). Either way the tool
list sits at the front, so every turn of an agent reuses its cached prefix.

Messages are dicts: role and content (text), plus `tool_calls` (list[ToolCall]) on an
assistant turn and `tool_call_id`/`name` on a `tool` turn (a result)."""

from __future__ import annotations

from typing import Any

from radixrt.serve.http.protocol import Limits, render_chat
from radixrt.serve.http.tools.formats import CallFormat, template_takes_tools
from radixrt.serve.http.tools.plan import ToolPlan
from radixrt.serve.http.tools.spec import ToolCall

SEP = "\n\n"
# A message's role as the chat template takes it: OpenAI's `developer` is the system turn
# (the templates served know system, user, assistant and tool). Results are `tool` turns.
MESSAGE_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}


def render_tool_chat(
    messages: list[dict[str, Any]],
    plan: ToolPlan,
    tokenizer: Any,
    limits: Limits,
    add_generation_prompt: bool = True,
    template_kwargs: dict[str, Any] | None = None,
    continue_final_message: bool = False,
) -> str:
    """The prompt text of `messages` with `plan`'s tools (render_chat's other arguments)."""
    if template_takes_tools(tokenizer):
        tools = [t.as_openai() for t in plan.tools] or None
        return render_chat(native_messages(messages), tokenizer, limits, add_generation_prompt,
                           tools, template_kwargs, continue_final_message)  # fmt: skip
    return render_chat(text_messages(messages, plan), tokenizer, limits, add_generation_prompt,
                       None, template_kwargs, continue_final_message)  # fmt: skip


def native_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages in the shape tool-aware templates take (calls with parsed arguments)."""
    out = []
    for m in messages:
        m = dict(m)
        calls: list[ToolCall] = m.pop("tool_calls", None) or []
        if calls:
            m["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_value()},
                }
                for c in calls
            ]
        out.append(m)
    return out


def text_messages(messages: list[dict[str, Any]], plan: ToolPlan) -> list[dict[str, str]]:
    """Messages with the tools, calls and results written as text in `plan.fmt`."""
    fmt = plan.fmt
    out: list[dict[str, str]] = []
    results: list[str] = []
    for m in messages:
        if m["role"] == "tool":
            results.append(m.get("content") or "")
            continue
        if results:
            out.append({"role": "user", "content": fmt.results_text(results)})
            results = []
        out.append({"role": m["role"], "content": _turn_text(fmt, m)})
    if results:
        out.append({"role": "user", "content": fmt.results_text(results)})
    if plan.tools:
        tools_text = fmt.tools_text(list(plan.tools))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + SEP + tools_text}
        else:
            out.insert(0, {"role": "system", "content": tools_text})
    return out


def _turn_text(fmt: CallFormat, m: dict[str, Any]) -> str:
    text = m.get("content") or ""
    calls: list[ToolCall] = m.get("tool_calls") or []
    if not calls:
        return str(text)
    return (f"{text}\n" if text else "") + fmt.call_text(calls)
