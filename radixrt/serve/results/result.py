"""The response shape shared by the Engine and the server: {text, output_ids, meta_info}."""

from __future__ import annotations

import time
from typing import Any

from radixrt.core.messages import TopLogprobs
from radixrt.serve.results.detokenizer import IncrementalDetokenizer
from radixrt.serve.results.state import ReqOutput


def build_result(req: ReqOutput, detok: IncrementalDetokenizer) -> dict[str, Any]:
    """The request's result as of now; text is final once `req` is finished.

    Only copies of the request's lists are read, so another thread may append meanwhile.
    """
    reason = req.finish_reason
    ids = list(req.output_ids)
    if reason is not None:
        text = detok.finish(ids, reason.matched)
    else:
        text = detok.update(ids)
    meta = result_meta(req, len(ids))
    if req.sampling_params.return_logprob:
        n = len(ids)
        logprobs, tops = list(req.output_logprobs)[:n], list(req.output_top_logprobs)[:n]
        meta.update(output_logprob_meta(req, ids, logprobs, tops))
        meta.update(input_logprob_meta(req))
    return {"text": text, "output_ids": ids, "meta_info": meta}


def result_meta(req: ReqOutput, num_out: int) -> dict[str, Any]:
    """meta_info without logprobs, with `num_out` output tokens so far."""
    reason = req.finish_reason
    meta: dict[str, Any] = {
        "id": req.rid,
        "prompt_tokens": req.prompt_len,
        "completion_tokens": num_out,
        "cached_tokens": req.cached_tokens,
        "finish_reason": reason.to_dict() if reason is not None else None,
        "e2e_latency": time.monotonic() - req.arrival_time,
    }
    if req.cached_tokens_by_tier:  # lower KV tiers configured
        meta["cached_tokens_by_tier"] = dict(req.cached_tokens_by_tier)
        meta["cache_load_time"] = req.cache_load_s
    if req.spec_drafted:  # speculative decoding drafted for it
        meta["spec_draft_tokens"] = req.spec_drafted
        meta["spec_accepted_tokens"] = req.spec_accepted
        meta["spec_steps"] = req.spec_steps
        meta["spec_tokens_per_step"] = round(req.spec_tokens_per_step(num_out) or 1.0, 3)
    if req.sampling_params.prediction_ids:  # a predicted output: how much of it was used
        meta["prediction_tokens"] = len(req.sampling_params.prediction_ids)
        meta["prediction_accepted_tokens"] = req.prediction_accepted
        meta["prediction_rejected_tokens"] = req.prediction_drafted - req.prediction_accepted
    return meta


def output_logprob_meta(
    req: ReqOutput, ids: list[int], logprobs: list[float], tops: list[TopLogprobs]
) -> dict[str, Any]:
    """Entries as (logprob, token id, None) triples for output tokens `ids` (all of them, or
    a stream's new ones) and their top alternatives when asked for."""
    meta: dict[str, Any] = {
        "output_token_logprobs": [(lp, t, None) for lp, t in zip(logprobs, ids, strict=False)]
    }
    if req.sampling_params.top_logprobs_num > 0:
        meta["output_top_logprobs"] = [[(lp, t, None) for lp, t in top] for top in tops]
    return meta


def input_logprob_meta(req: ReqOutput) -> dict[str, Any]:
    """The prompt's entries from logprob_start_len, when asked for (filled in at finish)."""
    p = req.sampling_params
    if p.logprob_start_len < 0:
        return {}
    first = p.logprob_start_len
    meta: dict[str, Any] = {
        "input_token_logprobs": [
            (lp, req.input_ids[first + i], None) for i, lp in enumerate(list(req.input_logprobs))
        ]
    }
    if p.top_logprobs_num > 0:
        meta["input_top_logprobs"] = [
            None if top is None else [(lp, t, None) for lp, t in top]
            for top in list(req.input_top_logprobs)
        ]
    return meta
