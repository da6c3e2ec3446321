"""The body of /generate (text or token ids, one prompt or a list) and its preparation into
validated prompts and sampling parameters (the checks themselves: server/protocol.py)."""

from __future__ import annotations

from typing import Any

import msgspec

from radixrt.serve.http.protocol import (
    BadRequestError,
    Limits,
    PreparedRequest,
    check_id,
    check_token_ids,
    fit_to_context,
    resolve_prediction,
    to_sampling_params,
)

_UNSET = msgspec.UNSET


class GenerateRequest(msgspec.Struct, forbid_unknown_fields=True):
    text: str | list[str] | None = None
    input_ids: list[Any] | None = None  # list[int] (one prompt) or list[list[int]]
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None
    stream: bool = False
    return_logprob: bool | msgspec.UnsetType = _UNSET
    logprob_start_len: int | msgspec.UnsetType = _UNSET
    top_logprobs_num: int | msgspec.UnsetType = _UNSET
    rid: str | list[str] | None = None
    extra_key: str | None = None  # prefix-cache namespace (the older name of cache_salt)
    cache_salt: str | None = None  # a namespace of the caller's own: other salts never match
    explain_cache: bool = False  # meta_info.cache_explanation: why the prompt missed (no stream)
    cache_id: str | None = None  # a /v1/caches handle: its tokens go before every prompt
    # Logprob entries (logprob, token id, text) carry each token's own text, not None.
    return_text_in_logprobs: bool = False
    # SGLang's fields for what radixrt does not serve, sent by its clients as null / false
    # (bench_serving always sends lora_path and return_routed_experts): any other value is a
    # 400 naming the field, never ignored.
    lora_path: str | list[str | None] | None = None
    return_routed_experts: bool = False
    image_data: Any = None


# What radixrt refuses of SGLang's fields, and why (the field's value when it is not off).
_NOT_SERVED = {
    "lora_path": "this server serves no LoRA adapters",
    "return_routed_experts": "this server reports no routed experts",
    "image_data": "this server serves text only",
}


def check_not_served(req: GenerateRequest) -> None:
    """400 for an SGLang field radixrt does not serve, given a value other than off."""
    for name, why in _NOT_SERVED.items():
        value = getattr(req, name)
        is_off = value in (None, False) or (isinstance(value, list) and not any(value))
        if not is_off:
            raise BadRequestError(f"{name}: {why}")


def prepare_generate(
    req: GenerateRequest, tokenizer: Any, limits: Limits, prefix: list[int] | None = None
) -> PreparedRequest:
    """Tokenize and validate a /generate body; `prefix` (a cache handle's tokens) goes before
    every prompt (a BOS the tokenizer puts at the start of a text prompt is then left out)."""
    check_not_served(req)
    if (req.text is None) == (req.input_ids is None):
        raise BadRequestError("give exactly one of text and input_ids")
    if req.text is not None:
        is_single = isinstance(req.text, str)
        texts = [req.text] if isinstance(req.text, str) else req.text
        limits.check_prompt_count(len(texts))
        for t in texts:
            limits.check_text(t)
        prompts = [tokenizer.encode(t) for t in texts]
    else:
        ids = req.input_ids or []
        is_single = not ids or not isinstance(ids[0], list)
        prompts = [ids] if is_single else ids
        limits.check_prompt_count(len(prompts))
        prompts = [check_token_ids(p, "input_ids") for p in prompts]
    if not prompts:
        raise BadRequestError("the prompt list is empty")
    if prefix:
        bos = getattr(tokenizer, "bos_token_id", None) if req.text is not None else None
        cut = [1 if p and bos is not None and p[0] == bos else 0 for p in prompts]
        prompts = [prefix + p[c:] for p, c in zip(prompts, cut, strict=True)]
    check_id(req.extra_key, "extra_key")
    raw = req.sampling_params
    if isinstance(raw, list) and len(raw) != len(prompts):
        raise BadRequestError(f"{len(raw)} sampling_params for {len(prompts)} prompts")
    # A predicted output given as text becomes its ids here: once per dict, before one dict
    # stands for every prompt.
    dicts = (
        [resolve_prediction(d, tokenizer, limits) for d in raw]
        if isinstance(raw, list)
        else [resolve_prediction(raw or {}, tokenizer, limits)] * len(prompts)
    )
    rids = [req.rid] if isinstance(req.rid, str) else req.rid
    if rids is not None and len(rids) != len(prompts):
        raise BadRequestError(f"{len(rids)} rids for {len(prompts)} prompts")
    for rid in rids or ():
        check_id(rid, "rid")
    logprob_args = {
        k: v
        for k in ("return_logprob", "logprob_start_len", "top_logprobs_num")
        if (v := getattr(req, k)) is not _UNSET
    }
    params = []
    for ids, d in zip(prompts, dicts, strict=True):
        explicit_max = "max_new_tokens" in d or "max_tokens" in d
        sp = to_sampling_params({**d, **logprob_args})
        params.append(fit_to_context(ids, sp, limits, explicit_max))
    return PreparedRequest(prompts, params, rids, is_single)
