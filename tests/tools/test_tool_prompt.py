"""Conversations with tools through the chat template: the template's own `tools` argument
when it has one, else the call format's text; the tool list at the front either way."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from radixrt.core.config import TOOL_CALL_FORMATS
from radixrt.serve.http.protocol import Limits
from radixrt.serve.http.tools import CALL_FORMATS, ToolCall, ToolPlan, ToolSpec, render_tool_chat
from radixrt.serve.http.tools.formats import HERMES, format_for, template_takes_tools

LIMITS = Limits(context_length=4096, max_total_tokens=8192, vocab_size=49152)
TOOLS = (ToolSpec("add", "Add two integers", {"type": "object", "properties": {}}),)
# A small tool-aware template of the Hermes kind (tools in the system turn, calls in tags).
NATIVE = (
    "{% if tools %}<|im_start|>system\nTOOLS:{% for t in tools %}\n{{ t | tojson }}{% endfor %}"
    "<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n'
    "</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": "2 + 3?"},
    {"role": "assistant", "content": "", "tool_calls": [ToolCall("c1", "add", '{"a":2}')]},
    {"role": "tool", "tool_call_id": "c1", "content": "5"},
]


@pytest.fixture(scope="module")
def tokenizer(smollm2_path: Path) -> Any:
    from radixrt.model.families.loader import load_tokenizer

    return load_tokenizer(smollm2_path)


def test_without_template_tools_the_format_writes_them(tokenizer: Any) -> None:
    assert not template_takes_tools(tokenizer)
    plan = ToolPlan(format_for("auto", tokenizer), TOOLS)
    text = render_tool_chat(TURNS, plan, tokenizer, LIMITS)
    assert text.startswith("<|im_start|>system\n# Tools") and '"name": "add"' in text
    assert '<|im_start|>assistant\n<tool_call>\n{"name":"add","arguments":{"a":2}}' in text
    assert "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>" in text


def test_a_tool_aware_template_renders_its_own_way(tokenizer: Any) -> None:
    tok = copy.copy(tokenizer)
    tok.chat_template = NATIVE
    assert template_takes_tools(tok) and format_for("auto", tok) is HERMES
    text = render_tool_chat(TURNS, ToolPlan(HERMES, TOOLS), tok, LIMITS)
    assert text.startswith('<|im_start|>system\nTOOLS:{"type": "function", "function": {')
    assert '{"name": "add", "arguments": {"a": 2}}' in text  # the template's own layout
    assert text.endswith("<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n")


def test_the_config_lists_every_format() -> None:
    assert TOOL_CALL_FORMATS == ("auto", *CALL_FORMATS)
