"""Per-request admission checks the scheduler makes: validity, prefix sharing, logprobs."""

from __future__ import annotations

from radixrt.core import FitLimits, Req, check_fit
from radixrt.core.text.stop_regex import stop_regex_error


def reject_reason(req: Req, context_len: int, capacity: int, vocab_size: int) -> str | None:
    """Why `req` can never run (a message for the client), or None when it can."""
    limits = FitLimits(context_len, capacity, vocab_size)
    for pattern in req.sampling_params.stop_regex:  # the server checked; the Engine may not
        if (why := stop_regex_error(pattern)) is not None:
            return why
    return check_fit(req.input_ids, req.sampling_params, limits)


def shares_uncached_prefix(req: Req, admitted: list[Req], min_len: int = 32) -> bool:
    """True when an admitted request of the same cache namespace is computing a run of at least
    min_len tokens that `req` also starts with (after the same cached prefix) and has not
    finished it: `req` should wait and reuse the run from the cache. The run counts from where
    the other's computation began (its cached prefix), so a chunked prefill that stops a few
    tokens short of the end of a shared run still holds its sharers back for the tail: else
    each of them recomputes it. Another namespace's prefill is never waited on: it cannot be
    shared, and waiting would let one tenant time another's prompts."""
    ids = req.fill_ids
    for other in admitted:
        if other.extra_key != req.extra_key:
            continue
        o, k = other.fill_ids, other.kv_len
        start = min(other.cached_tokens, k)  # where the other's own computation began
        # Equal up to here: a run of min_len from `start`, one token of which is not computed.
        need = max(start + min_len, k + 1)
        if need <= min(len(ids), len(o)) and ids[:need] == o[:need]:
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
