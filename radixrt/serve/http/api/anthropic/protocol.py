"""Anthropic Messages request bodies (/v1/messages, /v1/messages/count_tokens), the checks on
their cache_control breakpoints, the pins and sampling parameters they ask for, and the usage
block of the answer. Fields radixrt cannot honour are refused with 400; those that only say
how or where Anthropic runs a request are accepted and ignored."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from radixrt.core import PinSpec
from radixrt.serve.http.protocol import BadRequestError
from radixrt.serve.http.tools import (
    EFFORTS_ANTHROPIC,
    CallFormat,
    ToolChoice,
    ToolPlan,
    ToolSpec,
    effort_budget,
)

TTL_S = {"5m": 300.0, "1h": 3600.0}
CHOICE_MODES = {"auto": "auto", "any": "required", "tool": "named", "none": "none"}
MAX_CACHE_BREAKPOINTS = 4
THINKING_TYPES = ("enabled", "adaptive", "between_tools", "disabled")
THINKING_DISPLAYS = ("summarized", "omitted")


class CacheControl(msgspec.Struct, forbid_unknown_fields=True):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] = "5m"


class ContentBlock(msgspec.Struct, kw_only=True):
    """Any content block; `type` says which fields it uses (text: text; tool_use: id, name,
    input; tool_result: tool_use_id, content, is_error). Other types are refused."""

    type: str
    text: str | None = None
    cache_control: CacheControl | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None
    tool_use_id: str | None = None
    content: str | list[ContentBlock] | None = None
    is_error: bool = False


class Message(msgspec.Struct, forbid_unknown_fields=True):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class Tool(msgspec.Struct, kw_only=True):
    """A client tool, rendered as text into the system turn (server tools are refused)."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    cache_control: CacheControl | None = None
    type: str | None = None


class Choice(msgspec.Struct, kw_only=True):
    """tool_choice (auto, any, tool with `name`, none), and thinking: enabled with its
    budget_tokens (where the server reads reasoning), adaptive (the model thinks as it will,
    capped by output_config.effort's budget; none where the server reads no reasoning),
    between_tools (adaptive on a turn that answers tool results, else none), or disabled;
    `display` "omitted" leaves the thinking out of the answer."""

    type: str
    name: str | None = None
    disable_parallel_tool_use: bool | None = None
    budget_tokens: int | None = None  # thinking enabled: required, the thinking's cap
    display: str | None = None  # thinking: "summarized" (the thinking whole) or "omitted"


class OutputConfig(msgspec.Struct, kw_only=True):
    effort: str | None = None  # a thinking budget under adaptive thinking; else ignored
    format: Any = None  # structured output: refused

    def thinking_budget(self) -> int | None:
        """The effort's thinking budget (high where unset, Anthropic's default; max: no
        cap); 400 for another level."""
        return effort_budget(self.effort or "high", "output_config.effort", EFFORTS_ANTHROPIC)


class DiagnosticsAsk(msgspec.Struct, forbid_unknown_fields=True):
    """Cache diagnostics (diagnostics.py): the message to compare with; null opts in on a
    first turn."""

    previous_message_id: str | None = None


class MessagesRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    model: str
    messages: list[Message]
    max_tokens: int | None = None  # required by /v1/messages; 0 only fills the cache
    system: str | list[ContentBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: Choice | None = None
    cache_control: CacheControl | None = None  # automatic caching: on the last block
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    metadata: dict[str, Any] | None = None  # metadata.user_id is the session key
    thinking: Choice | None = None
    output_config: OutputConfig | None = None
    diagnostics: DiagnosticsAsk | None = None  # why this request missed that one's cache
    # Where and how Anthropic would run it: accepted and ignored.
    service_tier: str | None = None
    inference_geo: str | None = None
    speed: str | None = None
    # Features of Anthropic's own platform: refused when given.
    container: Any = None
    mcp_servers: Any = None
    context_management: Any = None


@dataclass(frozen=True, slots=True)
class Breakpoint:
    offset: int  # prompt tokens up to the end of the marked block
    ttl: str  # "5m" or "1h"


def check_request(req: MessagesRequest) -> MessagesRequest:
    """Refuse what radixrt cannot do and check the breakpoints; returns the request with a
    top-level cache_control moved onto the last block of the last message."""
    for name in ("container", "mcp_servers", "context_management"):
        if getattr(req, name) is not None:
            raise BadRequestError(f"{name}: not supported by this server")
    if req.thinking is not None and req.thinking.type not in THINKING_TYPES:
        raise BadRequestError(
            f"thinking: type {req.thinking.type!r} is not one of {', '.join(THINKING_TYPES)}"
        )
    if req.thinking is not None and req.thinking.display not in (None, *THINKING_DISPLAYS):
        raise BadRequestError(
            f"thinking.display: {req.thinking.display!r} is not one of "
            f"{', '.join(THINKING_DISPLAYS)}"
        )
    if req.output_config is not None and req.output_config.effort is not None:
        req.output_config.thinking_budget()  # (checks the level)
    if req.thinking is not None and req.thinking.type == "enabled":
        budget = req.thinking.budget_tokens
        if budget is None or budget < 1:
            raise BadRequestError("thinking.budget_tokens: a positive number is required")
    if req.tool_choice is not None and req.tool_choice.type not in CHOICE_MODES:
        raise BadRequestError(
            f"tool_choice.type: {req.tool_choice.type!r} is not one of {sorted(CHOICE_MODES)}"
        )
    if req.output_config is not None and req.output_config.format is not None:
        raise BadRequestError("output_config.format: structured outputs are not supported here")
    if not req.messages:
        raise BadRequestError("messages: at least one message is required")
    for i, m in enumerate(req.messages):
        if isinstance(m.content, list) and not m.content:
            raise BadRequestError(f"messages.{i}.content: at least one content block is required")
    req = _with_automatic_control(req)
    controls = cache_controls(req)
    if len(controls) > MAX_CACHE_BREAKPOINTS:
        raise BadRequestError(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(controls)}."
        )
    ttls = [c.ttl for c in controls]
    if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
        raise BadRequestError(
            "a cache_control block with ttl='1h' cannot come after one with ttl='5m' (in the "
            "order tools, system, messages)"
        )
    return req


def cache_controls(req: MessagesRequest) -> list[CacheControl]:
    """Every breakpoint, in prefix order: tools, then system, then messages."""
    blocks: list[Tool | ContentBlock] = [*(req.tools or ()), *system_blocks(req)]
    for m in req.messages:
        blocks += content_blocks(m.content)
    return [b.cache_control for b in blocks if b.cache_control is not None]


def tool_plan(req: MessagesRequest, fmt: CallFormat) -> ToolPlan:
    """The request's tools and tool_choice in the one internal form."""
    specs = []
    for i, t in enumerate(req.tools or ()):
        if t.type not in (None, "custom"):
            raise BadRequestError(f"tools.{i}: server tools ({t.type!r}) are not supported")
        if t.input_schema is None:
            raise BadRequestError(f"tools.{i}.input_schema: Field required")
        specs.append(ToolSpec(t.name, t.description or "", t.input_schema))
    c = req.tool_choice
    if c is None:
        return ToolPlan(fmt, tuple(specs))
    if c.type == "tool" and c.name is None:
        raise BadRequestError("tool_choice.name: Field required")
    parallel = not c.disable_parallel_tool_use
    choice = ToolChoice(CHOICE_MODES[c.type], name=c.name, parallel=parallel)  # type: ignore[arg-type]
    return ToolPlan(fmt, tuple(specs), choice)


def system_blocks(req: MessagesRequest) -> list[ContentBlock]:
    return [] if not req.system else content_blocks(req.system)


def content_blocks(content: str | list[ContentBlock]) -> list[ContentBlock]:
    """A string is one text block."""
    return [ContentBlock(type="text", text=content)] if isinstance(content, str) else content


def sampling_dict(req: MessagesRequest) -> dict[str, Any]:
    if req.max_tokens is None:
        raise BadRequestError("max_tokens: Field required")
    d: dict[str, Any] = {"max_new_tokens": req.max_tokens}
    if req.stop_sequences:
        d["stop"] = req.stop_sequences
    d.update(
        (k, v) for k in ("temperature", "top_p", "top_k") if (v := getattr(req, k)) is not None
    )
    return d


def pin_specs(
    breakpoints: list[Breakpoint], min_tokens: int, ttl_scale: float, owner: str | None
) -> list[tuple[Breakpoint, PinSpec]]:
    """The pin each breakpoint asks for: its prefix's own shared pin (a later request naming
    the same prefix extends it), sliding, counted against `owner`. Breakpoints of fewer than
    `min_tokens` tokens (or none) are not pinned, and not refused."""
    return [
        (b, PinSpec(b.offset, TTL_S[b.ttl] * ttl_scale, None, sliding=True, owner=owner))
        for b in breakpoints
        if b.offset > 0 and b.offset >= min_tokens
    ]


def usage(
    prompt_len: int, cached_tokens: int, output_tokens: int, pinned: list[tuple[int, str]]
) -> dict[str, Any]:
    """Anthropic's usage block, exact against the radix tree.

    `pinned`: (tokens, ttl) of each breakpoint whose pin was made or extended, in prefix order.
    With P = `prompt_len` and C = `cached_tokens` (the prompt tokens the tree served):
    - cache_read_input_tokens = C. It may reach past the last breakpoint, because radixrt
      caches every prefix it computed, marked or not.
    - cache_creation_input_tokens = the sum over pinned breakpoints i of
      max(0, b_i - max(b_prev, C)), where b_prev is the previous pinned breakpoint (0 for the
      first): what the pins hold that the tree did not serve, each token counted once, under
      the TTL of the first breakpoint that covers it (cache_creation's 5m/1h split).
    - input_tokens = P - read - creation: the rest, computed and not pinned.
    """
    created = {"5m": 0, "1h": 0}
    prev = 0
    for tokens, ttl in pinned:
        created[ttl] += max(0, tokens - max(prev, cached_tokens))
        prev = max(prev, tokens)
    creation = created["5m"] + created["1h"]
    return {
        "input_tokens": prompt_len - cached_tokens - creation,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": creation,
        "cache_read_input_tokens": cached_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": created["5m"],
            "ephemeral_1h_input_tokens": created["1h"],
        },
        "service_tier": "standard",
    }


def _with_automatic_control(req: MessagesRequest) -> MessagesRequest:
    if req.cache_control is None:
        return req
    last = req.messages[-1]
    blocks = content_blocks(last.content)
    if blocks[-1].cache_control is None:
        marked = msgspec.structs.replace(blocks[-1], cache_control=req.cache_control)
        last = msgspec.structs.replace(last, content=[*blocks[:-1], marked])
    return msgspec.structs.replace(req, messages=[*req.messages[:-1], last], cache_control=None)
