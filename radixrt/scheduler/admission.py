"""Per-request admission checks the scheduler makes: validity, prefix sharing, logprobs."""

from __future__ import annotations

from radixrt.core import Req


def reject_reason(req: Req, context_len: int, capacity: int, vocab_size: int) -> str | None:
    """Why `req` can never run (a message for the client), or None when it can."""
    if req.prompt_len == 0:
        return "the prompt is empty"
    if req.prompt_len >= context_len:
        return f"the prompt has {req.prompt_len} tokens; the context length is {context_len}"
    if req.prompt_len + 1 > capacity:  # capacity is whole pages: no rounding needed
        return f"the prompt has {req.prompt_len} tokens but the KV pool holds only {capacity}"
    if any(not 0 <= t < vocab_size for t in req.input_ids):
        return f"input_ids must be in [0, {vocab_size})"
    return req.sampling_params.check_against(req.prompt_len, vocab_size)


def shares_uncached_prefix(req: Req, admitted: list[Req], min_len: int = 32) -> bool:
    """True when an admitted request of the same cache namespace is about to compute at least
    min_len tokens that `req` also starts with after the same prefix: `req` should wait and
    reuse them from the cache. Another namespace's prefill is never waited on: it cannot be
    shared, and waiting would let one tenant time another's prompts."""
    ids = req.fill_ids
    for other in admitted:
        o, k = other.fill_ids, other.kv_len
        if other.extra_key != req.extra_key:
            continue
        if len(o) > k + min_len and ids[k : k + min_len] == o[k : k + min_len] and ids[:k] == o[:k]:
            return True
    return False


def wants_input_logprobs(req: Req) -> bool:
    """True while `req` still computes prompt positions whose logprobs were asked for."""
    p = req.sampling_params
    return (
        p.return_logprob
        and p.logprob_start_len >= 0
        and not req.output_ids
        and req.kv_len < req.prompt_len
    )
