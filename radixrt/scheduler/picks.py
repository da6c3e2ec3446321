"""Picks: one sampled token appended to a request's output with its logprobs (the one writer
of output_ids, output_logprobs and output_top_logprobs for a step's picks, one-token steps
and verified drafts alike), and a one-token step's picks for a batch of requests."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from radixrt.core import FinishReason, Req
from radixrt.executor.sampler import NO_TOKEN, SampleOutput, Sampler
from radixrt.scheduler.grammar_queue import GrammarQueue
from radixrt.scheduler.stats import SchedulerStats, guarded

NO_PICK = (
    "no token can be sampled: every token is disallowed here (its grammar, the stop-token ban "
    "before min_new_tokens, or non-finite logits)"
)


def append_pick(req: Req, out: SampleOutput, row: int) -> bool:
    """Append row `row`'s pick of `out` to `req`'s output, with its logprob and top logprobs
    where asked; a row without a pick (NO_TOKEN) finishes `req` with an error instead.
    Returns whether a token was appended."""
    token = out.next_token_ids[row]
    if token == NO_TOKEN:
        req.finish(FinishReason.error(NO_PICK))
        return False
    req.output_ids.append(token)
    if req.sampling_params.return_logprob and out.logprobs is not None:
        req.output_logprobs.append(out.logprobs[row])
        if out.top_logprobs is not None:
            req.output_top_logprobs.append(out.top_logprobs[row])
    return True


def sample_picks(
    reqs: list[Req],
    logits: torch.Tensor,
    grammar: GrammarQueue,
    sampler: Sampler,
    stats: SchedulerStats,
    check_finish: Callable[[Req], None],
) -> list[Req]:
    """Sample one token for each of `reqs` from its logits row (len(reqs), V), then check
    finish and advance grammars (`check_finish`). A fault of one request's own (its
    grammar's mask or matcher, its stop check) or a row where no token is allowed finishes
    that request with an error; the others go on."""
    mask = grammar.vocab_mask(reqs)  # a request whose mask failed is finished
    out = sampler.sample(logits, reqs, mask)
    now = time.monotonic()
    for i, req in enumerate(reqs):
        if req.is_finished or not append_pick(req, out, i):
            continue
        req.first_token_time = req.first_token_time or now
        stats.generated_tokens += 1
        guarded(req, "the finish check", check_finish, req)
    return reqs
