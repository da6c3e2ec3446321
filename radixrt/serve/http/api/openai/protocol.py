"""OpenAI request bodies (completions, chat) and their translation into prompts and
SamplingParams. Fields radixrt cannot honour are refused with 400 rather than ignored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import msgspec

from radixrt.core import PinSpec
from radixrt.serve.http.api.openai.structured import StructuredFields, add_spec
from radixrt.serve.http.api.openai.tools import ToolCallItem, ToolDef, calls_of
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
from radixrt.serve.http.tools import MESSAGE_ROLES, ToolPlan, render_tool_chat

MAX_OPENAI_TOP_LOGPROBS = 20
COMPLETION_DEFAULT_MAX_TOKENS = 16
# prompt_cache_retention -> (TTL in seconds, sliding): "in_memory" lives while it is used (a hit
# moves its expiry to 10 minutes on), "24h" for a day from the last request that asked for it.
PROMPT_CACHE_RETENTION = {"in_memory": (600.0, True), "24h": (86400.0, False)}
_RETENTION_SPELLINGS = {"in-memory": "in_memory"}
CHAT_ROLES = {**MESSAGE_ROLES, "tool": "tool"}
# Chat fields of OpenAI's own platform or of models with other modalities: null or absent only.
REFUSED_CHAT_FIELDS = {
    "reasoning_effort": "no reasoning mode is served",
    "audio": "text output only",
    "web_search_options": "no web search",
    "functions": "use tools",
    "function_call": "use tool_choice",
}


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class ContentPart(msgspec.Struct):
    type: str
    text: str | None = None


class Prediction(msgspec.Struct, forbid_unknown_fields=True):
    """Predicted output: `{"type": "content", "content": text or text parts}`, the text the
    answer is expected to repeat for the most part (a file being edited). Its tokens are
    drafted for speculative decoding; the answer is the same with or without it."""

    type: str
    content: str | list[ContentPart]

    def text(self) -> str:
        if self.type != "content":
            raise BadRequestError(f"prediction type {self.type!r} is not supported; use content")
        return _parts_text(self.content, "prediction")


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


@dataclass(frozen=True)
class LogprobAsk:
    """What a call's logprobs show: the output tokens' with `output` alternatives each (None:
    no logprobs), the prompt's with `prompt` alternatives (vLLM's prompt_logprobs; None: not
    asked), tokens named "token_id:<id>" (`as_ids`). The request may compute more (one
    alternative count serves both): the render shows what was asked."""

    output: int | None = None
    prompt: int | None = None
    as_ids: bool = False


def logprob_ask(req: CompletionRequest | ChatCompletionRequest) -> LogprobAsk:
    if isinstance(req, CompletionRequest):
        output = req.logprobs
    else:
        output = (req.top_logprobs or 0) if req.logprobs else None
    return LogprobAsk(output, req.prompt_logprobs, req.return_tokens_as_token_ids)


def add_prompt_logprobs(d: dict[str, Any], req: _SamplingFields) -> None:
    """Sampling fields for vLLM's prompt_logprobs (every prompt token scored; the
    alternatives' count the larger of the two asks), else nothing."""
    k = req.prompt_logprobs
    if k is None:
        return
    if not 0 <= k <= MAX_OPENAI_TOP_LOGPROBS:
        raise BadRequestError(f"prompt_logprobs must be in [0, {MAX_OPENAI_TOP_LOGPROBS}]")
    if req.stream:
        raise BadRequestError(
            "prompt_logprobs needs stream false: a prompt's logprobs are known when its "
            "request finishes"
        )
    top = max(d.get("top_logprobs_num", 0), k)
    d.update(return_logprob=True, logprob_start_len=0, top_logprobs_num=top)


class CompletionRequest(_SamplingFields, forbid_unknown_fields=True, kw_only=True):
    prompt: str | list[Any]
    logprobs: int | None = None
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None


class ChatMessage(msgspec.Struct):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallItem] | None = None  # assistant
    tool_call_id: str | None = None  # tool


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
    # OpenAI's bookkeeping fields: metadata checked and kept on nothing (no completion is
    # stored: store true is refused), safety_identifier like user, service_tier ignored (as
    # on /v1/responses), modalities text only, verbosity medium only (no other is trained).
    metadata: dict[str, str] | None = None
    store: bool | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    modalities: list[str] | None = None
    verbosity: str | None = None
    reasoning_effort: str | None = None
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


def prepare_completion(req: CompletionRequest, tokenizer: Any, limits: Limits) -> PreparedRequest:
    """Prompts (text, texts, ids or lists of ids) and one SamplingParams per prompt."""
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


def truncated(prompts: list[list[int]], keep: int | None, limits: Limits) -> list[list[int]]:
    """vLLM's truncate_prompt_tokens: each prompt's last `keep` tokens (-1: the context
    length; None: as they are)."""
    if keep is None:
        return prompts
    if keep == -1:
        keep = limits.context_length
    if keep < 1:
        raise BadRequestError(f"truncate_prompt_tokens must be -1 or >= 1, got {keep}")
    return [ids[-keep:] for ids in prompts]


def echo_prompts(
    req: CompletionRequest, prompts: list[list[int]], tokenizer: Any
) -> list[str] | None:
    """With `echo`, each prompt's text as its choices repeat it: a text prompt as sent, one of
    token ids decoded (on the tokenizer thread, once per prompt); None without echo."""
    if not req.echo:
        return None
    p = req.prompt
    texts = [p] if isinstance(p, str) else p if p and all(isinstance(x, str) for x in p) else None
    if texts is None:
        return [tokenizer.decode(ids) for ids in prompts]
    if req.truncate_prompt_tokens is None:
        return texts
    # A prompt truncate_prompt_tokens cut (it tokenizes to more than it kept) is echoed as its
    # kept tokens decode; one it did not cut, as sent.
    return [text if len(tokenizer.encode(text)) <= len(ids) else tokenizer.decode(ids)
            for text, ids in zip(texts, prompts, strict=True)]  # fmt: skip


def prepare_chat(
    req: ChatCompletionRequest,
    tokenizer: Any,
    limits: Limits,
    plan: ToolPlan,
    encode: Callable[[str], list[int]] | None = None,
) -> PreparedRequest:
    """Render the messages (and `plan`'s tools) with the tokenizer's chat template; one
    prompt, tokenized by `encode` (the tokenizer's own by default)."""
    req.check_fields()
    text = render_messages(req, plan, tokenizer, limits)
    if encode is None:
        prompts = [tokenizer.encode(text, add_special_tokens=False)]
    else:
        prompts = [encode(text)]
    d = req.sampling_dict()
    if req.response_format is not None:
        add_spec(d, req.response_format.sampling_dict(), "response_format")
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
    kept = text if cut[0] == prompts[0] else None  # a cut prompt is not its text's tokens
    return replace(_prepare(cut, d, max_tokens, limits, req.rid), text=kept)


class TemplateOptions(msgspec.Struct, kw_only=True):
    """How a chat's messages go through the template (ChatCompletionRequest's, /tokenize's)."""

    messages: list[ChatMessage] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None


def render_messages(
    req: ChatCompletionRequest | TemplateOptions, plan: ToolPlan, tokenizer: Any, limits: Limits
) -> str:
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


def chat_messages(req: ChatCompletionRequest) -> list[dict[str, str]]:
    """The messages as the chat template takes them (text content only)."""
    return chat_messages_of(req.messages)


def chat_messages_of(messages: list[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": _role(m, i), "content": _content_text(m)} for i, m in enumerate(messages)]


def chat_turns(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as the tool-aware renderer takes them (calls and results kept)."""
    turns: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        turn: dict[str, Any] = {"role": _role(m, i), "content": _content_text(m)}
        if m.tool_calls:
            turn["tool_calls"] = calls_of(m.tool_calls)
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
    return _parts_text(m.content, "message")


def _parts_text(content: str | list[ContentPart] | None, what: str) -> str:
    """Text content, or its text parts joined (400 naming `what` for any other part)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise BadRequestError(f"{what} content of type {part.type!r} is not supported")
        parts.append(part.text)
    return "".join(parts)
