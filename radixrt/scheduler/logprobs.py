"""Input-token logprobs: the logprob of each prompt token given the tokens before it; and
which rows of a packed batch's logits a step computes (all of a request's where it wants them
or verifies a draft)."""

from __future__ import annotations

import torch

from radixrt.core import Batch, Req
from radixrt.scheduler.admission import wants_input_logprobs
from radixrt.scheduler.speculative.rows import forced_rows


def add_input_logprobs(req: Req, logits: torch.Tensor, start_pos: int) -> None:
    """Record prompt-token logprobs from logits (n, V) of positions start_pos..start_pos+n-1.

    Row j predicts the token at position start_pos + j + 1. Entries are kept for prompt
    positions from `logprob_start_len` on (position 0 has no logprob: None). Recording is
    idempotent, so a recomputed chunk (after a retraction) adds nothing twice.
    """
    p = req.sampling_params
    first = p.logprob_start_len
    k = p.top_logprobs_num
    if first == 0 and not req.input_logprobs:
        req.input_logprobs.append(None)
        req.input_top_logprobs.append(None)
        req.input_token_ranks.append(None)
    logp = torch.log_softmax(logits.float(), dim=-1)  # (n, V)
    positions = torch.arange(start_pos + 1, start_pos + 1 + logits.shape[0])
    keep = (positions >= first + len(req.input_logprobs)) & (positions < req.prompt_len)
    rows = keep.nonzero().flatten().tolist()
    if not rows:
        return
    targets = torch.tensor([req.input_ids[start_pos + 1 + j] for j in rows])
    kept = logp[rows]  # (r, V): the rows recorded
    picked = kept.gather(1, targets[:, None].to(logp.device))  # (r, 1)
    chosen = picked.flatten().tolist()
    ranks = ((kept > picked).sum(dim=-1) + 1).tolist()
    top = torch.topk(kept, k, dim=-1) if k > 0 else None
    for i, lp in enumerate(chosen):
        req.input_logprobs.append(lp)
        req.input_token_ranks.append(ranks[i])
        if top is not None:
            vals, ids = top.values[i].tolist(), top.indices[i].tolist()
            req.input_top_logprobs.append(list(zip(vals, ids)))
        else:
            req.input_top_logprobs.append(None)


def scores_prompt(req: Req) -> bool:
    """Whether every row `req` computes this step has logits for its prompt's logprobs (not
    rows to sample: a draft's verifying rows come first)."""
    return not req.draft_ids and wants_input_logprobs(req)


def sampled_rows(batch: Batch, logits_rows: list[int]) -> int:
    """How many of the pass's `logits_rows` are rows sampled (decode, verify): all but the
    prompt rows scored for their logprobs."""
    return len(logits_rows) - sum(r.extend_len for r in batch.reqs if scores_prompt(r))


def logits_layout(batch: Batch) -> tuple[list[int], list[int]]:
    """The logits rows of the packed batch (all, last, or none per request), and each sampled
    request's row among them (-1: not sampled)."""
    logits_rows: list[int] = []
    sample_rows: list[int] = []
    start = 0
    for req, sample in zip(batch.reqs, batch.sample_mask):
        e = req.extend_len
        if req.draft_ids:  # its verifying rows, after the forced tokens' (if any)
            logits_rows.extend(range(start + forced_rows(req), start + e))
        elif scores_prompt(req):
            logits_rows.extend(range(start, start + e))
        elif sample:
            logits_rows.append(start + e - 1)
        sample_rows.append(len(logits_rows) - 1 if sample else -1)
        start += e
    return logits_rows, sample_rows
