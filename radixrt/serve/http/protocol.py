"""The checks every endpoint applies before a request is sent: the server's Limits, body
decoding, sampling parameters, prompt fit, chat rendering and client-chosen ids.

Anything a client can get wrong is caught here and becomes a 400 (BadRequestError): the
scheduler only ever sees prompts that fit and sampling parameters that validated. Each
dialect's bodies and their parse live in its folder (api/*/protocol.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import msgspec

from radixrt.core import (
    FitLimits,
    SamplingParams,
    check_fit,
)
from radixrt.core.config import ServerConfig
from radixrt.core.messages import ReadyMsg
from radixrt.core.sampling import with_prediction_ids
from radixrt.core.text.stop_regex import stop_regex_error

MAX_N = 64  # samples per prompt
MAX_TOP_LOGPROBS = 100
MAX_ID_LEN = 256  # characters of a client's rid or extra_key
# OpenAI's `metadata` (chat, responses): at most 16 keys, keys 64 characters, values 512.
MAX_METADATA_KEYS, MAX_METADATA_KEY_LEN, MAX_METADATA_VALUE_LEN = 16, 64, 512


class BadRequestError(ValueError):
    """The client's request is invalid; answered with 400 and this message."""


@dataclass(frozen=True)
class Limits:
    """What a request must fit: the model and pool as measured by the scheduler at start-up,
    and the server's bounds on the work one request may ask for (`server`)."""

    context_length: int
    max_total_tokens: int
    vocab_size: int
    max_prompt_chars: int = 2**62  # the server's --max-prompt-chars, resolved
    server: ServerConfig = ServerConfig()

    @classmethod
    def from_server(cls, ready: ReadyMsg, config: ServerConfig, tokenizer: Any) -> Limits:
        """The limits of a server; a prompt longer than the context length times the longest
        token's characters cannot fit, so that is the default character bound."""
        chars = config.max_prompt_chars
        if chars is None:
            chars = ready.context_length * max(map(len, tokenizer.get_vocab()), default=1)
        return cls(ready.context_length, ready.max_total_tokens, ready.vocab_size, chars, config)

    @property
    def fit(self) -> FitLimits:
        return FitLimits(self.context_length, self.max_total_tokens, self.vocab_size)

    def check_prompt_count(self, num: int) -> None:
        if num > self.server.max_prompts_per_request:
            raise BadRequestError(
                f"{num} prompts in one request; at most {self.server.max_prompts_per_request} "
                "(--max-prompts-per-request)"
            )

    def check_text(self, text: str, what: str = "the prompt") -> None:
        """Refuse text too long to fit the context, before tokenizing it."""
        self.check_length(len(text), what)

    def check_length(self, num_chars: int, what: str) -> None:
        if num_chars > self.max_prompt_chars:
            raise BadRequestError(
                f"{what} has {num_chars} characters, more than can fit the context "
                f"({self.max_prompt_chars}, --max-prompt-chars)"
            )


@dataclass(frozen=True)
class PreparedRequest:
    prompts: list[list[int]]
    params: list[SamplingParams]
    rids: list[str] | None
    is_single: bool  # one prompt given bare (not in a list): answer with one object
    text: str | None = None  # a chat's rendered prompt (one prompt), kept with its answer


def decode_body(body: bytes, cls: type[Any]) -> Any:
    """Parse a JSON body into `cls`; malformed JSON, unknown fields or wrong types raise 400."""
    try:
        return msgspec.json.decode(body, type=cls)
    except msgspec.ValidationError as e:
        raise BadRequestError(f"invalid request: {e}") from None
    except msgspec.DecodeError as e:
        raise BadRequestError(f"malformed JSON: {e}") from None
    except RecursionError:
        raise BadRequestError("the JSON body is nested too deeply") from None


def to_sampling_params(d: dict[str, Any]) -> SamplingParams:
    """Validate a sampling dict (core's checks of every field, plus the server's bounds)."""
    try:
        sp = SamplingParams.from_dict(d)
    except (ValueError, TypeError) as e:
        raise BadRequestError(str(e)) from None
    if sp.n > MAX_N:
        raise BadRequestError(f"invalid sampling parameter n={sp.n}: must be <= {MAX_N}")
    if sp.top_logprobs_num > MAX_TOP_LOGPROBS:
        raise BadRequestError(
            f"invalid sampling parameter top_logprobs_num="
            f"{sp.top_logprobs_num}: must be <= {MAX_TOP_LOGPROBS}"
        )
    return sp


def resolve_prediction(d: dict[str, Any], tokenizer: Any, limits: Limits) -> dict[str, Any]:
    """`d` with a predicted output given as text (`prediction`) tokenized into prediction_ids,
    without special tokens, its length in characters checked first like a prompt's (its
    length in tokens: check_fit); a 400 names a prediction that is not text."""

    def encode(text: str) -> list[int]:
        limits.check_text(text, "the prediction")
        return list(tokenizer.encode(text, add_special_tokens=False))

    try:
        resolved: dict[str, Any] = with_prediction_ids(d, encode)
    except ValueError as e:
        raise BadRequestError(str(e)) from None
    return resolved


def fit_to_context(
    ids: list[int], sp: SamplingParams, limits: Limits, explicit_max: bool
) -> SamplingParams:
    """Check the prompt against the model and pool (core's check_fit, the scheduler's rules)
    and the server's stop-string bounds; clamp a default max_new_tokens to fit."""
    check_stop_strings(sp, limits)
    if (why := check_fit(ids, sp, limits.fit)) is not None:
        raise BadRequestError(why)
    n, room = len(ids), limits.fit.room
    if n + sp.max_new_tokens > room:
        if explicit_max:
            raise BadRequestError(
                f"the prompt has {n} tokens and max_new_tokens is {sp.max_new_tokens}: more "
                f"than fits (context length {limits.context_length}, KV pool "
                f"{limits.max_total_tokens} tokens)"
            )
        most = room - n
        sp = sp.replace(max_new_tokens=most, min_new_tokens=min(sp.min_new_tokens, most))
    return sp


# Names a caller's chat_template_kwargs may not set: apply_chat_template's own arguments
# (the dialects set them), the tokenizer's special tokens and the template's helpers (a
# template may print a token per message: a long one would multiply the prompt).
_TEMPLATE_OWN_ARGS = frozenset(
    {"conversation", "messages", "tools", "documents", "tokenize", "add_generation_prompt",
     "continue_final_message", "return_dict", "return_tensors", "chat_template", "padding",
     "truncation", "max_length", "tokenizer_kwargs", "return_assistant_tokens_mask",
     "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
     "mask_token", "additional_special_tokens", "raise_exception", "strftime_now"}
)  # fmt: skip
MAX_TEMPLATE_KWARGS_CHARS = 4096  # chat_template_kwargs as JSON


def check_template_kwargs(kwargs: dict[str, Any], tokenizer: Any) -> None:
    """A caller's chat_template_kwargs: flags and short values the template reads (e.g.
    {"enable_thinking": false}): strings, numbers, booleans or null, at most
    MAX_TEMPLATE_KWARGS_CHARS in all, none of the names it may not set; else 400."""
    own = _TEMPLATE_OWN_ARGS | set(getattr(tokenizer, "special_tokens_map", None) or {})
    if reserved := sorted(set(kwargs) & own):
        raise BadRequestError(f"chat_template_kwargs may not set {', '.join(reserved)}")
    bad = next((k for k, v in kwargs.items() if not isinstance(v, str | int | float | None)), None)
    if bad is not None:
        raise BadRequestError(
            f"chat_template_kwargs {bad!r}: values are strings, numbers, booleans or null"
        )
    if len(json.dumps(kwargs)) > MAX_TEMPLATE_KWARGS_CHARS:
        raise BadRequestError(
            f"chat_template_kwargs is longer than {MAX_TEMPLATE_KWARGS_CHARS} characters"
        )


def render_chat(
    messages: list[dict[str, Any]],
    tokenizer: Any,
    limits: Limits,
    add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
    template_kwargs: dict[str, Any] | None = None,
    continue_final_message: bool = False,
) -> str:
    """A conversation through the tokenizer's chat template (with `tools` when the template
    takes them, and the caller's `template_kwargs`, e.g. {"enable_thinking": false}), checked
    against the server's bounds before (message count, characters) and after (the rendered
    text); every chat dialect renders through here. `continue_final_message`: the last
    message (an assistant's) left open, its text the end of the prompt (the template's own
    way: its end-of-turn cut off)."""
    most = limits.server.max_chat_messages
    if len(messages) > most:
        raise BadRequestError(f"{len(messages)} messages; at most {most} (--max-chat-messages)")
    if getattr(tokenizer, "chat_template", None) is None:
        raise BadRequestError("this model's tokenizer has no chat template")
    size = sum(len(str(m.get("content") or "")) + len(m["role"]) for m in messages)
    if tools is not None or any("tool_calls" in m for m in messages):
        size += len(json.dumps([tools, [m.get("tool_calls") for m in messages]], default=str))
    extra: dict[str, Any] = dict(template_kwargs or {})
    check_template_kwargs(extra, tokenizer)
    limits.check_length(size, "the conversation")
    if tools is not None:
        extra["tools"] = tools
    if continue_final_message:
        extra["continue_final_message"] = True
    try:
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
        )
    except Exception as e:  # jinja raises for conversations its template refuses
        raise BadRequestError(f"the chat template rejected the messages: {e}") from None
    limits.check_text(text, "the rendered conversation")
    return text  # type: ignore[no-any-return]


def check_stop_strings(sp: SamplingParams, limits: Limits) -> None:
    """Stop strings and regexes count together against --max-stop-strings, and each against
    --max-stop-string-len; a regex must be one the stop matcher takes (text/stop_regex.py)."""
    most, longest_allowed = limits.server.max_stop_strings, limits.server.max_stop_string_len
    count = len(sp.stop) + len(sp.stop_regex)
    if count > most:
        raise BadRequestError(
            f"{count} stop strings and regexes; at most {most} (--max-stop-strings)"
        )
    longest = max(map(len, [*sp.stop, *sp.stop_regex]), default=0)
    if longest > longest_allowed:
        raise BadRequestError(
            f"a stop string or regex has {longest} characters; at most {longest_allowed} "
            "(--max-stop-string-len)"
        )
    for pattern in sp.stop_regex:
        if (why := stop_regex_error(pattern)) is not None:
            raise BadRequestError(why)


def logprob_entries(prompts: list[list[int]], params: list[SamplingParams]) -> int:
    """The logprob entries a call may get back: per sample, its prompt's tokens from
    logprob_start_len (when asked for) and max_new_tokens, each with 1 + top_logprobs_num."""
    total = 0
    for ids, sp in zip(prompts, params, strict=True):
        if sp.return_logprob:
            tokens = sp.max_new_tokens
            if sp.logprob_start_len >= 0:
                tokens += max(0, len(ids) - sp.logprob_start_len)
            total += tokens * (1 + sp.top_logprobs_num) * sp.n
    return total


def check_logprob_volume(prompts: list[list[int]], params: list[SamplingParams], most: int) -> None:
    """Refuse a call whose logprobs would pass the server's volume budget (400)."""
    total = logprob_entries(prompts, params)
    if total > most:
        raise BadRequestError(
            f"the request asks for {total} logprob entries (tokens x (1 + top logprobs), "
            f"prompt and output, over prompts x n); at most {most} (--max-logprob-entries)"
        )


def check_id(value: str | None, name: str) -> None:
    """A client-chosen id (rid, extra_key): at most MAX_ID_LEN characters."""
    if value is not None and len(value) > MAX_ID_LEN:
        raise BadRequestError(f"{name} has {len(value)} characters; at most {MAX_ID_LEN}")


def check_metadata(metadata: dict[str, str] | None) -> None:
    """OpenAI's `metadata` limits, else 400."""
    if metadata is None:
        return
    if len(metadata) > MAX_METADATA_KEYS:
        raise BadRequestError(f"metadata: at most {MAX_METADATA_KEYS} keys")
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_LEN or len(value) > MAX_METADATA_VALUE_LEN:
            raise BadRequestError(
                f"metadata.{key[:MAX_METADATA_KEY_LEN]}: keys have at most "
                f"{MAX_METADATA_KEY_LEN} characters, values {MAX_METADATA_VALUE_LEN}"
            )


def check_token_ids(ids: Any, name: str) -> list[int]:
    """A list of ints (not bools), else 400."""
    if not isinstance(ids, list) or not all(type(t) is int for t in ids):
        raise BadRequestError(f"{name} must be a list of integers or a list of such lists")
    return ids
