"""OpenAI request bodies (completions, chat) and their translation into prompts and
SamplingParams. Fields radixrt cannot honour are refused with 400 rather than ignored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import msgspec

from radixrt.core import PinSpec
from radixrt.serve.http.api.openai.messages import (
    ChatMessage,
    ContentPart,
    parts_text,
    render_messages,
)
from radixrt.serve.http.api.openai.prompt_options import (
    MAX_OPENAI_TOP_LOGPROBS,
    LogprobAsk,
    add_prompt_logprobs,
    truncated,
)
from radixrt.serve.http.api.openai.structured import StructuredFields, add_spec
from radixrt.serve.http.api.openai.tools import ToolDef
from radixrt.serve.http.protocol import (
    BadRequestError,
    Limits,
    PreparedRequest,
    check_id,
    check_metadata,
    check_token_ids,
    fit_to_context,
    resolve_prediction,
    to_sampling_params,
)
from radixrt.serve.http.tools import EFFORTS_OPENAI, ToolPlan, effort_budget

COMPLETION_DEFAULT_MAX_TOKENS = 16
# prompt_cache_retention -> (TTL in seconds, sliding): "in_memory" lives while it is used (a hit
# moves its expiry to 10 minutes on), "24h" for a day from the last request that asked for it.
PROMPT_CACHE_RETENTION = {"in_memory": (600.0, True), "24h": (86400.0, False)}
_RETENTION_SPELLINGS = {"in-memory": "in_memory"}
# Chat fields of OpenAI's own platform or of models with other modalities: null or absent only.
REFUSED_CHAT_FIELDS = {
    "audio": "text output only",
    "web_search_options": "no web search",
    "functions": "use tools",
    "function_call": "use tool_choice",
}


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class Prediction(msgspec.Struct, forbid_unknown_fields=True):
    """Predicted output: `{"type": "content", "content": text or text parts}`, the text the
    answer is expected to repeat for the most part (a file being edited). Its tokens are
    drafted for speculative decoding; the answer is the same with or without it."""

    type: str
    content: str | list[ContentPart]

    def text(self) -> str:
        if self.type != "content":
            raise BadRequestError(f"prediction type {self.type!r} is not supported; use content")
        return parts_text(self.content, "prediction")


class _SamplingFields(StructuredFields, forbid_unknown_fields=True):
    """Fields both endpoints share, plus radixrt's extensions (top_k, min_p, ...) and the
    other engines' constraint fields (StructuredFields)."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    prompt_cache_key: str | None = None  # a session key for routing across replicas
    prompt_cache_retention: str | None = None  # pin the prompt: PROMPT_CACHE_RETENTION
    cache_salt: str | None = None  # a prefix-cache namespace of the caller's own
    explain_cache: bool = False  # usage.prompt_tokens_details.cache_explanation (no stream)
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    no_stop_trim: bool | None = None  # keep a matched stop string (SGLang's name)
    include_stop_str_in_output: bool | None = None  # vLLM's name for it
    end_on_exit: bool | None = None
    rid: str | None = None
    # vLLM's: sample only among these ids; each prompt cut to its last N tokens (-1: the
    # context length); logprobs' tokens named "token_id:<id>" (the ids exactly, for RL loops).
    allowed_token_ids: list[int] | None = None
    truncate_prompt_tokens: int | None = None
    return_tokens_as_token_ids: bool = False
    # vLLM's prompt_logprobs: each prompt token's logprob, rank and this many alternatives.
    prompt_logprobs: int | None = None
    # Predicted output (chat; on completions an extension): its text is tokenized with the
    # prompt (resolve_prediction), drafted from, and changes nothing but the speed.
    prediction: Prediction | None = None

    def sampling_dict(self) -> dict[str, Any]:
        for name in ("user", "prompt_cache_key", "cache_salt"):
            check_id(getattr(self, name), name)
        names = (
            "temperature",
            "top_p",
            "n",
            "stop",
            "seed",
            "presence_penalty",
            "frequency_penalty",
            "top_k",
            "min_p",
            "repetition_penalty",
            "stop_token_ids",
            "ignore_eos",
            "skip_special_tokens",
            "spaces_between_special_tokens",
            "no_stop_trim",
            "end_on_exit",
        )
        d = {k: v for k in names if (v := getattr(self, k)) is not None}
        if self.include_stop_str_in_output is not None:
            if d.setdefault("no_stop_trim", self.include_stop_str_in_output) != (
                self.include_stop_str_in_output
            ):
                raise BadRequestError("no_stop_trim and include_stop_str_in_output disagree")
        if self.min_tokens is not None:
            d["min_new_tokens"] = self.min_tokens
        if self.logit_bias:  # {"token id": bias}: ids and values checked with the rest
            d["logit_bias"] = self.logit_bias
        if self.allowed_token_ids is not None:
            if not self.allowed_token_ids:  # (SamplingParams' empty list: every token)
                raise BadRequestError(
                    "allowed_token_ids: an empty list allows no token (leave it out to allow "
                    "every token)"
                )
            d["allowed_token_ids"] = self.allowed_token_ids
        if self.prediction is not None:
            d["prediction"] = self.prediction.text()
        d.update(self.spec_dict())
        return d


def logprob_ask(req: CompletionRequest | ChatCompletionRequest) -> LogprobAsk:
    if isinstance(req, CompletionRequest):
        output = req.logprobs
    else:
        output = (req.top_logprobs or 0) if req.logprobs else None
    return LogprobAsk(output, req.prompt_logprobs, req.return_tokens_as_token_ids)


class CompletionRequest(_SamplingFields, forbid_unknown_fields=True, kw_only=True):
    prompt: str | list[Any]
    logprobs: int | None = None
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None


class ResponseFormat(msgspec.Struct, forbid_unknown_fields=True):
    """`text`, `json_object` (any JSON object) or `json_schema` ({"name", "schema", ...})."""

    type: str
    json_schema: dict[str, Any] | None = None

    def sampling_dict(self) -> dict[str, Any]:
        if self.type == "text":
            return {}
        if self.type == "json_object":
            return {"json_schema": {"type": "object"}}
        if self.type == "json_schema":
            if self.json_schema is None or not isinstance(self.json_schema.get("schema"), dict):
                raise BadRequestError(
                    "response_format json_schema needs json_schema.schema, an object"
                )
            return {"json_schema": self.json_schema["schema"]}
        raise BadRequestError(
            f"response_format type {self.type!r} is not supported; use "
            "text, json_object or json_schema"
        )


class ChatCacheOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """`prompt_cache_options` on chat: the response to compare this prompt with
    (diagnostics.py). Pins are asked with prompt_cache_retention here."""

    comparison_response_id: str | None = None


class ChatCompletionRequest(_SamplingFields, forbid_unknown_fields=True, kw_only=True):
    messages: list[ChatMessage]
    response_format: ResponseFormat | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[ToolDef] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    prompt_cache_options: ChatCacheOptions | None = None
    # vLLM's template options: a final assistant message continued (its text the answer's
    # start, the answer only what follows), the generation prompt left off, template kwargs.
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    # vLLM's: the most tokens a reasoning model may think (--reasoning-parser; then
    # </think> is forced and the answer follows). OpenAI's reasoning_effort is a level whose
    # budget (tools/reasoning.py: EFFORT_BUDGETS) applies where thinking_token_budget is unset.
    thinking_token_budget: int | None = None
    reasoning_effort: str | None = None
    # OpenAI's bookkeeping fields: metadata checked and kept on nothing (no completion is
    # stored: store true is refused), safety_identifier like user, service_tier ignored (as
    # on /v1/responses), modalities text only, verbosity medium only (no other is trained).
    metadata: dict[str, str] | None = None
    store: bool | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    modalities: list[str] | None = None
    verbosity: str | None = None
    audio: Any = None
    web_search_options: Any = None
    functions: Any = None
    function_call: Any = None

    def check_fields(self) -> None:
        """400 naming the field for what this server cannot honour."""
        for name, why in REFUSED_CHAT_FIELDS.items():
            if getattr(self, name) is not None:
                raise BadRequestError(f"{name}: not supported ({why})")
        if self.store:
            raise BadRequestError(
                "store: chat completions are not stored by this server (the Responses API "
                "stores responses: /v1/responses)"
            )
        if self.modalities is not None and self.modalities != ["text"]:
            raise BadRequestError(f"modalities: only ['text'] is served, got {self.modalities!r}")
        if self.verbosity not in (None, "medium"):
            raise BadRequestError(f"verbosity: {self.verbosity!r} is not supported")
        check_metadata(self.metadata)
        check_id(self.safety_identifier, "safety_identifier")


def completion_prompts(req: CompletionRequest, tokenizer: Any, limits: Limits) -> list[list[int]]:
    """The prompts (text, texts, ids or lists of ids) as token ids, whole."""
    if req.suffix is not None or (req.best_of or 1) > 1:
        raise BadRequestError("suffix and best_of are not supported")
    p = req.prompt
    if isinstance(p, str):
        limits.check_text(p)
        prompts = [tokenizer.encode(p)]
    elif p and all(isinstance(x, str) for x in p):
        limits.check_prompt_count(len(p))
        for x in p:
            limits.check_text(x)
        prompts = [tokenizer.encode(x) for x in p]
    elif p and all(isinstance(x, list) for x in p):
        limits.check_prompt_count(len(p))
        prompts = [check_token_ids(x, "prompt") for x in p]
    else:
        prompts = [check_token_ids(p, "prompt")]
    return prompts


def prepare_completion(
    req: CompletionRequest, prompts: list[list[int]], tokenizer: Any, limits: Limits
) -> PreparedRequest:
    """The `prompts` (completion_prompts', cut by truncate_prompt_tokens) and one
    SamplingParams per prompt."""
    d = req.sampling_dict()
    if req.logprobs is not None:
        if not 0 <= req.logprobs <= MAX_OPENAI_TOP_LOGPROBS:
            raise BadRequestError(f"logprobs must be in [0, {MAX_OPENAI_TOP_LOGPROBS}]")
        d.update(return_logprob=True, top_logprobs_num=req.logprobs)
        if req.echo:  # the prompt's tokens with their logprobs (the first has none)
            if req.stream:
                raise BadRequestError(
                    "echo with logprobs needs stream false: a prompt's logprobs are known "
                    "when its request finishes"
                )
            d["logprob_start_len"] = 0
    add_prompt_logprobs(d, req)
    d = resolve_prediction(d, tokenizer, limits)
    max_tokens = COMPLETION_DEFAULT_MAX_TOKENS if req.max_tokens is None else req.max_tokens
    prompts = truncated(prompts, req.truncate_prompt_tokens, limits)
    return _prepare(prompts, {**d, "max_new_tokens": max_tokens}, req.max_tokens, limits, req.rid)


def thinking_budget(req: ChatCompletionRequest) -> tuple[int | None, str]:
    """The request's thinking budget and the field that set it: thinking_token_budget, else
    reasoning_effort's level (None: no cap)."""
    if req.thinking_token_budget is not None or req.reasoning_effort is None:
        return req.thinking_token_budget, "thinking_token_budget"
    return effort_budget(req.reasoning_effort, "reasoning_effort", EFFORTS_OPENAI), (
        "reasoning_effort"
    )


def prepare_chat(
    req: ChatCompletionRequest,
    tokenizer: Any,
    limits: Limits,
    plan: ToolPlan,
    encode: Callable[[str], list[int]] | None = None,
    reasoning: str = "none",
) -> tuple[PreparedRequest, ToolPlan]:
    """Render the messages (and `plan`'s tools) with the tokenizer's chat template; one
    prompt, tokenized by `encode` (the tokenizer's own by default). The plan that reads the
    output: `plan`, reading reasoning as the parser `reasoning` does where it may."""
    req.check_fields()
    text = render_messages(req, plan, tokenizer, limits)
    if encode is None:
        prompts = [tokenizer.encode(text, add_special_tokens=False)]
    else:
        prompts = [encode(text)]
    d = req.sampling_dict()
    if req.response_format is not None:
        add_spec(d, req.response_format.sampling_dict(), "response_format")
    budget, asked_by = thinking_budget(req)  # (d: the request's own grammar)
    plan = plan.with_reasoning(reasoning, text, d, tokenizer, budget=budget, asked_by=asked_by)
    d.update(plan.sampling_dict(tokenizer, d))
    if req.top_logprobs is not None and not req.logprobs:
        raise BadRequestError("top_logprobs needs logprobs: true")
    if req.logprobs:
        top = req.top_logprobs or 0
        if not 0 <= top <= MAX_OPENAI_TOP_LOGPROBS:
            raise BadRequestError(f"top_logprobs must be in [0, {MAX_OPENAI_TOP_LOGPROBS}]")
        d.update(return_logprob=True, top_logprobs_num=top)
    add_prompt_logprobs(d, req)
    max_tokens = (
        req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    )
    if max_tokens is not None:
        d["max_new_tokens"] = max_tokens
    d = resolve_prediction(d, tokenizer, limits)
    cut = truncated(prompts, req.truncate_prompt_tokens, limits)
    kept = text if len(cut[0]) == len(prompts[0]) else None  # a cut prompt is not its text's
    return replace(_prepare(cut, d, max_tokens, limits, req.rid), text=kept), plan


def _prepare(
    prompts: list[list[int]],
    d: dict[str, Any],
    explicit_max: int | None,
    limits: Limits,
    rid: str | None,
) -> PreparedRequest:
    params = []
    for ids in prompts:
        sp = to_sampling_params(d)
        if explicit_max is None and "max_new_tokens" not in d:
            sp = sp.replace(max_new_tokens=limits.context_length)  # until EOS; clamped below
        params.append(fit_to_context(ids, sp, limits, explicit_max is not None))
    if rid is not None and len(prompts) > 1:
        raise BadRequestError("rid takes a single prompt")
    check_id(rid, "rid")
    return PreparedRequest(prompts, params, None if rid is None else [rid], len(prompts) == 1)


def retention_pins(
    retention: str | None, prompts: list[list[int]], ttl_scale: float, owner: str | None
) -> list[PinSpec] | None:
    """`prompt_cache_retention` as pins of each whole prompt, counted against `owner` (the
    tenant); None when not asked. `ttl_scale`: ServerConfig.cache_ttl_scale."""
    if retention is None:
        return None
    found = PROMPT_CACHE_RETENTION.get(_RETENTION_SPELLINGS.get(retention, retention))
    if found is None:
        allowed = ", ".join(repr(k) for k in (*PROMPT_CACHE_RETENTION, *_RETENTION_SPELLINGS))
        raise BadRequestError(f"prompt_cache_retention must be one of {allowed}, got {retention!r}")
    ttl_s, sliding = found
    # One spec serves every prompt: the scheduler cuts its offset to each prompt's length.
    offset = max(len(ids) for ids in prompts)
    return [PinSpec(offset, ttl_s * ttl_scale, sliding=sliding, owner=owner)]
