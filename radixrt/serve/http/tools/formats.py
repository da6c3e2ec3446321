"""How each model family writes tool calls, as data: where calls open and close, the key of
the arguments, how a tool list and tool results read in a prompt whose chat template has no
tool support. `detect_format` picks the family's format from the chat template's text."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from radixrt.serve.http.tools.spec import ToolCall, ToolSpec

TOOLS_IN_TEMPLATE = re.compile(r"\btools\b")


@dataclass(frozen=True, slots=True)
class CallFormat:
    """One family's call syntax. Calls are JSON objects `{"name": ..., <args_key>: {...}}`;
    `opener`/`closer` wrap each call (Hermes), or `opener` starts one region of calls that
    `array` holds as a JSON list (Mistral); `opener` None: a region is only at the start of
    the output, after an optional `lead` token (Llama 3). `forced_*`: what a forced call's
    grammar writes around each call, between calls, and around them all."""

    name: str
    args_key: str
    opener: str | None
    closer: str | None
    array: bool
    lead: str | None
    forced_prefix: str
    forced_suffix: str
    forced_sep: str
    forced_open: str
    forced_close: str
    tools_head: str
    tools_tail: str

    def tools_text(self, tools: list[ToolSpec]) -> str:
        """The tool list and how to call, for a system turn (templates without tools)."""
        return "\n".join([self.tools_head, *map(tool_line, tools), self.tools_tail])

    def call_text(self, calls: list[ToolCall]) -> str:
        """An assistant's calls as the model writes them (forced layout, so a replayed turn
        has the tokens the model produced)."""
        bodies = [
            f'{{"name":{json.dumps(c.name, ensure_ascii=False)},"{self.args_key}":'
            f"{c.arguments or '{}'}}}"
            for c in calls
        ]
        inner = self.forced_sep.join(self.forced_prefix + b + self.forced_suffix for b in bodies)
        return (self.opener if self.array and self.opener else "") + (
            self.forced_open + inner + self.forced_close
        )

    def results_text(self, results: list[str]) -> str:
        """Tool results for a user turn (templates without tools)."""
        return "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)


def tool_line(tool: ToolSpec) -> str:
    """One tool as one line of JSON; the same tool always gives the same text."""
    return json.dumps(tool.as_openai(), ensure_ascii=False, sort_keys=True)


HERMES = CallFormat(
    name="hermes",
    args_key="arguments",
    opener="<tool_call>",
    closer="</tool_call>",
    array=False,
    lead=None,
    forced_prefix="<tool_call>\n",
    forced_suffix="\n</tool_call>",
    forced_sep="\n",
    forced_open="",
    forced_close="",
    tools_head=(
        "# Tools\n\nYou may call functions to help with the request. Their signatures follow, "
        "one JSON object per line, between <tools> and </tools>:\n<tools>"
    ),
    tools_tail=(
        "</tools>\n\nTo call a function, answer with its name and arguments as a JSON object "
        "between <tool_call> and </tool_call>, one block per call:\n<tool_call>\n"
        '{"name": <function name>, "arguments": <arguments as a JSON object>}\n</tool_call>'
    ),
)

LLAMA3_JSON = CallFormat(
    name="llama3_json",
    args_key="parameters",
    opener=None,
    closer=None,
    array=False,
    lead="<|python_tag|>",
    forced_prefix="",
    forced_suffix="",
    forced_sep="; ",
    forced_open="",
    forced_close="",
    tools_head=(
        "You may call functions to help with the request. To call one, answer only with a "
        'JSON object {"name": <function name>, "parameters": <arguments as a JSON object>}. '
        "The functions, one JSON object per line:"
    ),
    tools_tail="",
)

MISTRAL = CallFormat(
    name="mistral",
    args_key="arguments",
    opener="[TOOL_CALLS]",
    closer=None,
    array=True,
    lead=None,
    forced_prefix="",
    forced_suffix="",
    forced_sep=", ",
    forced_open="[",
    forced_close="]",
    tools_head="[AVAILABLE_TOOLS]",
    tools_tail=(
        "[/AVAILABLE_TOOLS]To call functions, answer with [TOOL_CALLS] and a JSON list of "
        '{"name": <function name>, "arguments": <arguments as a JSON object>}.'
    ),
)

# Granite 3.x: <|tool_call|> and a JSON list, like Mistral's.
GRANITE = CallFormat(
    name="granite",
    args_key="arguments",
    opener="<|tool_call|>",
    closer=None,
    array=True,
    lead=None,
    forced_prefix="",
    forced_suffix="",
    forced_sep=", ",
    forced_open="[",
    forced_close="]",
    tools_head="You may call functions. Their signatures, one JSON object per line:",
    tools_tail=(
        "To call functions, answer with <|tool_call|> and a JSON list of "
        '{"name": <function name>, "arguments": <arguments as a JSON object>}.'
    ),
)

CALL_FORMATS: dict[str, CallFormat] = {f.name: f for f in (HERMES, LLAMA3_JSON, MISTRAL, GRANITE)}
AUTO_FORMAT = "auto"


def detect_format(template: str | None) -> CallFormat:
    """The call format a chat template's text shows; Hermes (the most widely trained) when
    it shows none."""
    text = template or ""
    if "[TOOL_CALLS]" in text:
        return MISTRAL
    if "<|tool_call|>" in text:
        return GRANITE
    if "<tool_call>" in text:
        return HERMES
    if "<|python_tag|>" in text or ("ipython" in text and '"parameters"' in text):
        return LLAMA3_JSON
    return HERMES


def format_for(name: str, tokenizer: Any) -> CallFormat:
    """`name` from CALL_FORMATS, or AUTO_FORMAT: detected from the tokenizer's template."""
    if name == AUTO_FORMAT:
        return detect_format(_template_text(tokenizer))
    if name not in CALL_FORMATS:
        raise ValueError(f"unknown tool-call format {name!r}; choose from {sorted(CALL_FORMATS)}")
    return CALL_FORMATS[name]


def template_takes_tools(tokenizer: Any) -> bool:
    """Whether the chat template renders a `tools` argument itself (asked per chat request:
    the search of a template's text is done once per template)."""
    return _mentions_tools(_template_text(tokenizer) or "")


@functools.lru_cache(maxsize=16)
def _mentions_tools(template: str) -> bool:
    return bool(TOOLS_IN_TEMPLATE.search(template))


def _template_text(tokenizer: Any) -> str | None:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: the default, or the tool-use one
        return str(template.get("tool_use") or template.get("default") or "")
    return template if isinstance(template, str) else None
