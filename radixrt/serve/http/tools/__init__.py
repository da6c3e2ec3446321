"""Tool calls, once for every dialect: the internal form of tools and choices (spec), each
family's call syntax (formats), forced calls as grammars (grammar), the streaming parser of
calls (parser), the model's reasoning apart from its answer (reasoning), the prompt with
tools (prompt) and a request's plan (plan)."""

from radixrt.serve.http.tools.formats import CALL_FORMATS, CallFormat, format_for
from radixrt.serve.http.tools.parser import (
    ArgsPiece,
    CallStart,
    OutputParser,
    ReasoningPiece,
    TextPiece,
    ToolEvent,
)
from radixrt.serve.http.tools.plan import ToolPlan, read_output
from radixrt.serve.http.tools.prompt import MESSAGE_ROLES, render_tool_chat
from radixrt.serve.http.tools.reasoning import (
    EFFORTS_ANTHROPIC,
    EFFORTS_GEMINI,
    EFFORTS_OPENAI,
    REASONING_PARSERS,
    count_reasoning_tokens,
    effort_budget,
)
from radixrt.serve.http.tools.spec import ToolCall, ToolChoice, ToolSpec

__all__ = [
    "CALL_FORMATS",
    "EFFORTS_ANTHROPIC",
    "EFFORTS_GEMINI",
    "EFFORTS_OPENAI",
    "MESSAGE_ROLES",
    "ArgsPiece",
    "CallFormat",
    "CallStart",
    "OutputParser",
    "REASONING_PARSERS",
    "ReasoningPiece",
    "TextPiece",
    "ToolCall",
    "ToolChoice",
    "ToolEvent",
    "ToolPlan",
    "ToolSpec",
    "count_reasoning_tokens",
    "effort_budget",
    "format_for",
    "read_output",
    "render_tool_chat",
]
