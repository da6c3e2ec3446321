"""Prompt-token logprobs and ranks recorded from a prompt's logits rows, chunk by chunk."""

from __future__ import annotations

import pytest
import torch

from radixrt.core import Req, SamplingParams
from radixrt.scheduler.logprobs import add_input_logprobs


def test_each_prompt_token_gets_its_logprob_and_rank_once() -> None:
    torch.manual_seed(3)
    vocab, ids = 50, [4, 9, 9, 31, 0, 17, 44, 2]
    logits = torch.randn(len(ids), vocab)
    logits[2, :] = 0.0  # a row of ties: every token shares rank 1
    req = Req(
        "r", ids, SamplingParams(return_logprob=True, logprob_start_len=0, top_logprobs_num=2)
    )
    add_input_logprobs(req, logits[:3], 0)  # chunk 1: rows 0-2 predict tokens 1-3
    add_input_logprobs(req, logits[:3], 0)  # recomputed (a retraction): nothing added twice
    add_input_logprobs(req, logits[3:], 3)  # chunk 2 (its last row predicts past the prompt)
    logp = torch.log_softmax(logits, -1)
    want = [logp[i - 1, t].item() for i, t in enumerate(ids) if i]
    ranks = [int((logp[i - 1] > logp[i - 1, t]).sum()) + 1 for i, t in enumerate(ids) if i]
    assert req.input_logprobs[0] is None and req.input_token_ranks[0] is None
    assert req.input_logprobs[1:] == pytest.approx(want, abs=1e-6)
    assert req.input_token_ranks[1:] == ranks and ranks[2] == 1
    assert len(req.input_top_logprobs) == len(ids)
    for i, top in enumerate(req.input_top_logprobs[1:], 1):
        best = torch.topk(logp[i - 1], 2)
        assert [t for _, t in top] == best.indices.tolist() or i == 3  # (ties: any order)
