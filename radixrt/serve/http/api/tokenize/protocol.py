"""Bodies of /tokenize and /detokenize (vLLM's fields) and their answers, computed on the
tokenizer thread. A chat is templated and tokenized as /v1/chat/completions does it, so its
count is the prompt tokens a chat completion of the same messages is charged."""

from __future__ import annotations

from typing import Any

import msgspec

from radixrt.serve.http.api.openai.messages import TemplateOptions, render_messages
from radixrt.serve.http.protocol import BadRequestError, Limits
from radixrt.serve.http.tools import ToolPlan


class TokenizeRequest(TemplateOptions, kw_only=True, forbid_unknown_fields=True):
    """`prompt` (text) or `messages` (a chat, with the template options chat completions
    take), not both. add_special_tokens defaults as in vLLM: True for text (the tokenizer's
    own, as /v1/completions encodes a prompt), False for a chat (its template writes them)."""

    model: str | None = None
    prompt: str | None = None
    add_special_tokens: bool | None = None
    return_token_strs: bool = False


class DetokenizeRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    model: str | None = None
    tokens: list[int]


def tokenize(
    req: TokenizeRequest, tokenizer: Any, limits: Limits, plan: ToolPlan
) -> dict[str, Any]:
    """{"count", "max_model_len", "tokens", "token_strs"} (token_strs null unless asked);
    `plan`: no tools, in the server's call format (a chat renders as chat completions do)."""
    if (req.prompt is None) == (req.messages is None):
        raise BadRequestError("give prompt (text) or messages (a chat), one of them")
    if req.messages is not None:
        text = render_messages(req, plan, tokenizer, limits)
        special = bool(req.add_special_tokens)
    else:
        if req.continue_final_message or req.chat_template_kwargs or not req.add_generation_prompt:
            raise BadRequestError(
                "continue_final_message, add_generation_prompt and chat_template_kwargs "
                "apply to messages, not to a prompt"
            )
        text = req.prompt or ""
        limits.check_text(text)
        special = req.add_special_tokens is None or req.add_special_tokens
    ids = list(tokenizer.encode(text, add_special_tokens=special))
    strs = tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
    return {"count": len(ids), "max_model_len": limits.context_length, "tokens": ids,
            "token_strs": strs}  # fmt: skip


def detokenize(req: DetokenizeRequest, tokenizer: Any, limits: Limits) -> dict[str, Any]:
    """{"prompt": the ids' text}; a 400 names an id outside the vocabulary."""
    bad = next((t for t in req.tokens if not 0 <= t < limits.vocab_size), None)
    if bad is not None:
        raise BadRequestError(f"token id {bad} is outside the vocabulary [0, {limits.vocab_size})")
    try:
        return {"prompt": tokenizer.decode(req.tokens)}
    except (ValueError, TypeError, OverflowError, KeyError, IndexError) as e:
        # ids the model has but the tokenizer does not (a vocabulary padded past its ids)
        raise BadRequestError(f"the tokens cannot be decoded: {e}") from None


def tokenizer_info(tokenizer: Any, limits: Limits) -> dict[str, Any]:
    """The tokenizer's special tokens and chat template (what a client needs to tokenize and
    template alike), the context length and the vocabulary size."""
    return {
        "tokenizer_class": type(tokenizer).__name__,
        "eos_token": tokenizer.eos_token,
        "bos_token": tokenizer.bos_token,
        "pad_token": tokenizer.pad_token,
        "unk_token": tokenizer.unk_token,
        "chat_template": getattr(tokenizer, "chat_template", None),
        "model_max_length": limits.context_length,
        "vocab_size": limits.vocab_size,
    }
