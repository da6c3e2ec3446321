"""OpenAI Responses request bodies (/v1/responses): input items, text formats and prompt-cache
options, and the checks that answer what radixrt cannot honour with a 400 naming the field.
Fields that only say how or where OpenAI runs a request are accepted and ignored."""

from __future__ import annotations

from typing import Any

import msgspec

from radixrt.serve.http.api.responses.input_items import InputItem, check_input
from radixrt.serve.http.protocol import BadRequestError, check_id, check_metadata
from radixrt.serve.http.tools import EFFORTS_OPENAI, effort_budget

TTL_S = {"30m": 1800.0, "12h": 43200.0}  # prompt_cache_options.ttl
DEFAULT_TTL = "30m"  # OpenAI's default, and a stored response's pin when none is asked
# Features of OpenAI's own platform: any value but null is refused.
REFUSED = ("conversation", "prompt", "context_management", "background_options",
           "access_programs", "image", "moderation", "policy")  # fmt: skip


class TextFormat(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """`text`, `json_object`, or `json_schema` with `name` and `schema` (flat, unlike chat's)."""

    type: str
    name: str | None = None
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class TextConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    format: TextFormat | None = None
    verbosity: str | None = None


class PromptCacheOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    ttl: str | None = None  # TTL_S; the pin of the whole prompt (and of a stored response)
    prewarm: bool = False  # compute and pin the prompt, generate nothing
    mode: str | None = None
    comparison_response_id: str | None = None


class StreamOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    include_obfuscation: bool | None = None  # accepted; no obfuscation is added


class ReasoningOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """`reasoning`: `effort`, a level whose thinking budget (tools/reasoning.py) caps a
    reasoning model's thinking where the server reads it; `summary` "auto" only (no summarizer
    runs: the reasoning comes whole, as the reasoning item's reasoning_text)."""

    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None  # summary's earlier name

    @property
    def budget(self) -> int | None:
        if self.effort is None:
            return None
        return effort_budget(self.effort, "reasoning.effort", EFFORTS_OPENAI)


class ResponsesRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    model: str | None = None
    input: str | list[InputItem] = ""
    instructions: str | None = None
    max_output_tokens: int | None = None  # 0: compute the prompt only, like prewarm
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None  # radixrt's extension, as on chat: a sampled answer repeats
    text: TextConfig | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    store: bool | None = None  # None: true, as at OpenAI
    previous_response_id: str | None = None
    prompt_cache_key: str | None = None  # the session key (routing under --dp, the guard)
    prompt_cache_retention: str | None = None  # as on chat: api/openai/protocol.py
    prompt_cache_options: PromptCacheOptions | None = None
    cache_salt: str | None = None  # a prefix-cache namespace of the caller's own
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: int | None = None
    truncation: str | None = None
    service_tier: str | None = None  # accepted, ignored
    top_logprobs: int | None = None
    include: list[str] | None = None
    background: bool | None = None
    reasoning: ReasoningOptions | None = None
    conversation: Any = None
    prompt: Any = None
    context_management: Any = None
    background_options: Any = None
    access_programs: Any = None
    image: Any = None
    moderation: Any = None
    policy: Any = None

    @property
    def is_stored(self) -> bool:
        return self.store is not False

    @property
    def is_prewarm(self) -> bool:
        """Compute (and pin) the prompt without generating: prewarm, or max_output_tokens 0."""
        options = self.prompt_cache_options
        return (options is not None and options.prewarm) or self.max_output_tokens == 0

    @property
    def ttl(self) -> str | None:
        return None if self.prompt_cache_options is None else self.prompt_cache_options.ttl


def _check_reasoning(options: ReasoningOptions) -> None:
    """400 for a summary other than auto (none is written) or an unknown effort level."""
    for name in ("summary", "generate_summary"):
        value = getattr(options, name)
        if value not in (None, "auto"):
            raise BadRequestError(
                f"reasoning.{name}: {value!r} is not served (no summarizer runs; a reasoning "
                "model's thinking comes whole as a reasoning item where the server reads it, "
                "--reasoning-parser); use 'auto' or leave it out"
            )
    options.budget  # noqa: B018 (checks the level)


def check_request(req: ResponsesRequest) -> ResponsesRequest:
    """Refuse, with a 400 naming the field, what radixrt cannot do; returns `req`."""
    for name in REFUSED:
        if getattr(req, name) is not None:
            raise BadRequestError(f"{name}: not supported by this server")
    if req.background:
        raise BadRequestError("background: background responses are not supported")
    if req.reasoning is not None:
        _check_reasoning(req.reasoning)
    for value in req.include or ():
        raise BadRequestError(f"include: {value!r} is not produced by this server")
    if req.top_logprobs:
        raise BadRequestError("top_logprobs: not supported on /v1/responses")
    if req.truncation not in (None, "disabled"):
        raise BadRequestError(f"truncation: {req.truncation!r} is not supported; use 'disabled'")
    if req.max_output_tokens is not None and req.max_output_tokens < 0:
        raise BadRequestError("max_output_tokens: must be >= 0")
    if req.text is not None and req.text.verbosity not in (None, "medium"):
        raise BadRequestError(f"text.verbosity: {req.text.verbosity!r} is not supported")
    check_metadata(req.metadata)
    _check_cache_options(req.prompt_cache_options)
    if not req.input and req.previous_response_id is None and not req.instructions:
        raise BadRequestError("input: required (text or a list of input items)")
    check_input(req.input)
    for name in ("previous_response_id", "prompt_cache_key", "user", "cache_salt"):
        check_id(getattr(req, name), name)
    return req


def sampling_dict(req: ResponsesRequest) -> dict[str, Any]:
    d: dict[str, Any] = {
        k: v for k in ("temperature", "top_p", "seed") if (v := getattr(req, k)) is not None
    }
    if req.is_prewarm:
        d["max_new_tokens"] = 0
    elif req.max_output_tokens is not None:
        d["max_new_tokens"] = req.max_output_tokens
    fmt = req.text.format if req.text is not None else None
    if fmt is None or fmt.type == "text":
        return d
    if fmt.type == "json_object":
        return {**d, "json_schema": {"type": "object"}}
    if fmt.type == "json_schema":
        if fmt.schema is None:
            raise BadRequestError("text.format.schema: required for type 'json_schema'")
        return {**d, "json_schema": fmt.schema}
    raise BadRequestError(
        f"text.format.type: {fmt.type!r} is not supported; use text, json_object or json_schema"
    )


def _check_cache_options(options: PromptCacheOptions | None) -> None:
    if options is None:
        return
    if options.ttl is not None and options.ttl not in TTL_S:
        allowed = ", ".join(repr(k) for k in TTL_S)
        raise BadRequestError(f"prompt_cache_options.ttl: must be one of {allowed}")
    if options.mode not in (None, "implicit"):
        raise BadRequestError(
            f"prompt_cache_options.mode: {options.mode!r} is not supported (every prefix is "
            "cached; there are no explicit breakpoints)"
        )
