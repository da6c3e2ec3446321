"""Gemini request bodies (cachedContents, generateContent), their times and durations, and the
rendering of a Gemini conversation into the chat template's messages and a prompt. Fields
radixrt cannot honour are refused with 400 rather than ignored."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import msgspec

from radixrt.core import SamplingParams
from radixrt.serve.http.api.gemini.output_format import (
    ThinkingConfig,
    check_thinking,
    format_fields,
    thinking_budget,
    wants_thoughts,
)
from radixrt.serve.http.api.gemini.tools import (
    ToolConfig,
    call_of,
    result_text,
    tool_plan,
    tool_specs,
)
from radixrt.serve.http.cache_handles import CacheHandle
from radixrt.serve.http.continuations import NoContinuations
from radixrt.serve.http.protocol import (
    MAX_N,
    BadRequestError,
    Limits,
    fit_to_context,
    render_chat,
    to_sampling_params,
)
from radixrt.serve.http.tools import CallFormat, ToolPlan, ToolSpec
from radixrt.serve.http.tools.prompt import text_messages

ROLES = {"user": "user", "model": "assistant"}  # Gemini's -> the chat template's
_SAMPLING_NAMES = {  # generationConfig's (snake case) -> SamplingParams'
    "temperature": "temperature",
    "top_p": "top_p",
    "max_output_tokens": "max_new_tokens",
    "stop_sequences": "stop",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}
_DURATION = re.compile(r"(\d{1,12})(\.\d{1,9})?s")
_TIME = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(\.\d{1,9})?([Zz]|[+-]\d\d:\d\d)?"
)  # RFC 3339; no offset (what the SDK sends for a naive datetime) is read as UTC


class FunctionCall(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    args: dict[str, Any] | None = None
    id: str | None = None


class FunctionResponse(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    response: dict[str, Any] | None = None
    id: str | None = None


class Part(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """A text, functionCall or functionResponse part (images and files are refused); a text
    part with `thought` is the model's reasoning given back (taken, not shown to it)."""

    text: str | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    thought: bool | None = None
    thought_signature: str | None = None  # never given by this server; ignored


class Content(msgspec.Struct, forbid_unknown_fields=True):
    parts: list[Part] = []
    role: str | None = None  # user (the default) or model; ignored on systemInstruction

    @property
    def text(self) -> str:
        return "".join(p.text or "" for p in self.parts if not p.thought)


class FunctionDeclaration(
    msgspec.Struct, forbid_unknown_fields=True, rename="camel", omit_defaults=True
):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    parameters_json_schema: Any = None
    response: dict[str, Any] | None = None
    response_json_schema: Any = None
    # google-genai sends these two in snake case (they pass through its camel-casing).
    parameters_json_schema_snake: Any = msgspec.field(default=None, name="parameters_json_schema")
    response_json_schema_snake: Any = msgspec.field(default=None, name="response_json_schema")


class Tool(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    function_declarations: list[FunctionDeclaration] = []


class GenerationConfig(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    temperature: float | None = None
    top_p: float | None = None
    top_k: float | None = None  # the SDK sends a float
    max_output_tokens: int | None = None
    stop_sequences: list[str] | None = None
    candidate_count: int | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    response_mime_type: str | None = None
    response_schema: Any = None  # OpenAPI's subset (upper-case types, nullable)
    response_json_schema: Any = None  # JSON schema as is
    response_modalities: list[str] | None = None  # TEXT only
    thinking_config: ThinkingConfig | None = None


class SafetySetting(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """Taken and without effect: no content filter runs here, so no threshold blocks."""

    category: str
    threshold: str
    method: str | None = None


class CreateCachedContentRequest(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    model: str
    contents: list[Content] = []
    system_instruction: Content | None = None
    tools: list[Tool] = []
    ttl: str | None = None  # "300s", "1.5s"
    expire_time: str | None = None  # RFC 3339
    display_name: str | None = None


class UpdateCachedContentRequest(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    ttl: str | None = None
    expire_time: str | None = None


class GenerateContentRequest(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    contents: list[Content]
    system_instruction: Content | None = None
    tools: list[Tool] = []
    tool_config: ToolConfig | None = None
    generation_config: GenerationConfig | None = None
    cached_content: str | None = None  # "cachedContents/{id}"
    model: str | None = None
    safety_settings: list[SafetySetting] | None = None


class CountTokensRequest(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """`:countTokens`: either `contents`, or a whole `generateContentRequest` (which may name a
    cachedContent, whose tokens are then counted too)."""

    contents: list[Content] = []
    generate_content_request: GenerateContentRequest | None = None


@dataclass(frozen=True)
class PreparedContent:
    input_ids: list[int]
    params: SamplingParams
    starts_with_handle: bool  # input_ids begin with the handle's ids (so its pin applies)
    plan: ToolPlan
    text: str  # the rendered prompt the ids are of


# A prompt text's ids given a prefix of it whose ids are known (a cache handle's; or None):
# the pipeline's continuations (an answered turn it replays), else the prefix's and the
# tokenizer's.
Encode = Callable[[str, tuple[str, list[int]] | None], list[int]]


def parse_duration(value: str, what: str = "ttl") -> float:
    """A protobuf Duration in JSON ("300s", "1.5s") in seconds."""
    m = _DURATION.fullmatch(value)
    if m is None:
        raise BadRequestError(f"{what} must be a duration like '300s' or '1.5s', got {value!r}")
    return int(m[1]) + float(m[2] or 0)


def parse_time(value: str, what: str = "expireTime") -> float:
    """An RFC 3339 timestamp in unix seconds."""
    m = _TIME.fullmatch(value)
    if m is None:
        raise BadRequestError(f"{what} must be an RFC 3339 time like '2025-01-31T12:00:00Z'")
    offset = timedelta(0)
    if m[8] and m[8] not in "Zz":
        sign = -1 if m[8][0] == "-" else 1
        offset = sign * timedelta(hours=int(m[8][1:3]), minutes=int(m[8][4:6]))
    year, month, day, hour, minute, second = (int(m[i]) for i in range(1, 7))
    try:
        zone = timezone(offset)  # refuses offsets of a day or more
        t = datetime(year, month, day, hour, minute, second, tzinfo=zone)
    except ValueError as e:
        raise BadRequestError(f"{what}: {e}") from None
    return t.timestamp() + float(m[7] or 0)


def format_time(t: float) -> str:
    """Unix seconds as RFC 3339 in UTC with microseconds ("2025-01-31T12:00:00.123456Z")."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def model_resource(model: str) -> str:
    """The resource name ("models/x") of the model a client calls "x" or "models/x"."""
    return model if model.startswith("models/") else "models/" + model


def declarations(tools: list[Tool]) -> list[ToolSpec]:
    return tool_specs([d for tool in tools for d in tool.function_declarations])


def conversation(
    contents: list[Content], system: Content | None, tools: list[ToolSpec], fmt: CallFormat
) -> list[dict[str, str]]:
    """The chat template's messages, with the tools, calls and results written as text in the
    model's call format: a system message (the instruction, then the tools) when either is
    given, then the contents."""
    messages: list[dict[str, Any]] = []
    if system is not None and system.text:
        messages.append({"role": "system", "content": system.text})
    num_calls = 0
    for i, content in enumerate(contents):
        role = ROLES.get(content.role or "user")
        if role is None:
            raise BadRequestError(f"contents[{i}].role must be 'user' or 'model'")
        calls = []
        for p in content.parts:
            if p.function_call is not None:
                calls.append(call_of(p.function_call, num_calls))
                num_calls += 1
            if p.function_response is not None:
                messages.append({"role": "tool", "content": result_text(p.function_response)})
        text = content.text
        if text or calls or not content.parts:
            turn: dict[str, Any] = {"role": role, "content": text}
            if calls:
                turn["tool_calls"] = calls
            messages.append(turn)
    return text_messages(messages, ToolPlan(fmt, tuple(tools)))


def cache_prefix(
    body: CreateCachedContentRequest, tokenizer: Any, limits: Limits, fmt: CallFormat
) -> tuple[list[int], dict[str, Any]]:
    """A cache's tokens (its conversation with no generation prompt) and the handle's meta:
    the messages, tools and text that requests on top of it continue."""
    tools = declarations(body.tools)
    messages = conversation(body.contents, body.system_instruction, tools, fmt)
    if not messages:
        raise BadRequestError("a cached content needs contents, a systemInstruction or tools")
    text = render_chat(messages, tokenizer, limits, add_generation_prompt=False)
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    fit_to_context(ids, SamplingParams(max_new_tokens=0), limits, True)
    meta = {"model": model_resource(body.model), "messages": messages, "text": text}
    meta["tools"] = tools
    return ids, meta


def prepare_content(
    body: GenerateContentRequest,
    handle: CacheHandle | None,
    tokenizer: Any,
    limits: Limits,
    fmt: CallFormat,
    encode: Encode | None = None,
    reasoning: str = "none",
) -> PreparedContent:
    """The prompt of a generateContent request: with a cache, the whole conversation (the
    cache's, then the request's) rendered with a generation prompt; when that text starts with
    the cache's own, the handle's ids plus the rest's tokens, so the cached tokens match.
    Reasoning, read as the parser `reasoning` does, is given as thought parts where the
    request asks for them (includeThoughts), else left out."""
    ids, starts, text = _prompt(body, handle, tokenizer, limits, fmt, encode)
    tools = declarations(body.tools) if handle is None else handle.meta.get("tools", [])
    plan = tool_plan(fmt, tools, body.tool_config)
    config = body.generation_config or GenerationConfig()
    explicit_max = config.max_output_tokens is not None
    d = sampling_dict(config, reasoning != "none")
    thoughts = wants_thoughts(config.thinking_config)  # (checked by sampling_dict)
    budget = thinking_budget(config.thinking_config)
    plan = plan.with_reasoning(reasoning, text, d, tokenizer, thoughts, budget, None)
    d.update(plan.sampling_dict(tokenizer, d))
    sp = to_sampling_params(d)
    if not explicit_max:
        sp = sp.replace(max_new_tokens=limits.context_length)  # until EOS; clamped to fit
    sp = fit_to_context(ids, sp, limits, explicit_max)
    return PreparedContent(ids, sp, starts, plan, text)


def prompt_ids(
    body: GenerateContentRequest,
    handle: CacheHandle | None,
    tokenizer: Any,
    limits: Limits,
    fmt: CallFormat,
    encode: Encode | None = None,
) -> tuple[list[int], bool]:
    """The prompt's token ids (prepare_content's, not yet checked against the context) and
    whether they begin with the handle's ids."""
    ids, starts, _ = _prompt(body, handle, tokenizer, limits, fmt, encode)
    return ids, starts


def _prompt(
    body: GenerateContentRequest,
    handle: CacheHandle | None,
    tokenizer: Any,
    limits: Limits,
    fmt: CallFormat,
    encode: Encode | None,
) -> tuple[list[int], bool, str]:
    if not body.contents:
        raise BadRequestError("contents must not be empty")
    if handle is None:
        tools = declarations(body.tools)
        messages = conversation(body.contents, body.system_instruction, tools, fmt)
    elif body.system_instruction is not None or body.tools:
        raise BadRequestError(
            "a request with cachedContent cannot set systemInstruction or tools; "
            "they belong in the cached content"
        )
    else:
        messages = handle.meta["messages"] + conversation(body.contents, None, [], fmt)
    text = render_chat(messages, tokenizer, limits)
    known = (handle.meta["text"], handle.input_ids) if handle is not None else None
    if encode is None:
        ids = NoContinuations().encode("", text, tokenizer, known)
    else:
        ids = encode(text, known)
    return ids, handle is not None and ids[: handle.tokens] == handle.input_ids, text


def count_request(body: CountTokensRequest) -> GenerateContentRequest:
    """The generateContent request a countTokens body stands for."""
    if body.generate_content_request is not None:
        if body.contents:
            raise BadRequestError("set contents or generateContentRequest, not both")
        return body.generate_content_request
    return GenerateContentRequest(contents=body.contents)


def sampling_dict(config: GenerationConfig, reads_reasoning: bool = False) -> dict[str, Any]:
    """generationConfig as radixrt's sampling parameters, its thinkingConfig checked
    (`reads_reasoning`: the server reads reasoning, so it may ask for thoughts)."""
    if config.candidate_count is not None and not 1 <= config.candidate_count <= MAX_N:
        raise BadRequestError(f"candidateCount must be in [1, {MAX_N}]")
    if config.response_modalities not in (None, [], ["TEXT"]):
        raise BadRequestError("responseModalities: only TEXT is served")
    check_thinking(config.thinking_config, reads_reasoning)
    d = format_fields(config.response_mime_type, config.response_schema,
                      config.response_json_schema)  # fmt: skip
    if (config.candidate_count or 1) > 1:
        d["n"] = config.candidate_count  # the one n fan-out: candidates 0..n-1
    if config.top_k is not None:
        if not config.top_k.is_integer():
            raise BadRequestError(f"topK must be an integer, got {config.top_k}")
        d["top_k"] = int(config.top_k)
    for theirs, ours in _SAMPLING_NAMES.items():
        if (v := getattr(config, theirs)) is not None:
            d[ours] = v
    return d
