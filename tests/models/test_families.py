"""Every family equals transformers on the same tiny random weights: per-position prompt
logprobs, greedy tokens and their logprobs, on prompts longer than the 16-key window, with
prefill chunks of 24 tokens (each chunk at and across the window boundary), the radix cache
serving a shared prefix, and decode rows sharing a cached prefix."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from hf_reference import hf_greedy_nocache, load_hf
from pool_checks import assert_pool_whole
from tiny_families import FAMILIES, make_family

from radixrt import Engine

TOL = 5e-3  # nats
NEW = 10


def _ids(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 49000) for _ in range(n)]


A = _ids(1, 60)
C = _ids(2, 45)
B = A[:40] + _ids(3, 22)  # shares 40 tokens with A
D = A[:50] + _ids(4, 12)  # shares 50 with A, 40 with B


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    return make_family(tmp_path_factory.mktemp(request.param), request.param, smollm2_path)


@torch.inference_mode()
def _hf_prompt_logprobs(hf, ids: list[int]) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= 1."""
    lp = torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), -1)
    return [lp[i - 1, ids[i]].item() for i in range(1, len(ids))]


def _check(out: dict, ids: list[int], start: int, hf) -> None:
    """Prompt logprobs from position `start` on, then the greedy tokens and their logprobs."""
    meta = out["meta_info"]
    got = [lp for lp, _, _ in meta["input_token_logprobs"]]
    if start == 0:  # position 0 has no prediction
        assert got[0] is None
        got, start = got[1:], 1
    assert got == pytest.approx(_hf_prompt_logprobs(hf, ids)[start - 1 :], abs=TOL)
    tokens, logprobs = hf_greedy_nocache(hf, ids, NEW)
    assert out["output_ids"] == tokens
    assert len(set(tokens)) >= 3, "weights too narrow: greedy output repeats one token"
    assert [lp for lp, _, _ in meta["output_token_logprobs"]] == pytest.approx(logprobs, abs=TOL)


def test_family_matches_transformers(family: Path) -> None:
    hf = load_hf(family)
    greedy = {"temperature": 0, "max_new_tokens": NEW, "ignore_eos": True, "return_logprob": True}
    with Engine(str(family), max_total_tokens=4096, context_length=256,
                chunked_prefill_size=24) as engine:  # fmt: skip
        first = engine.generate(
            input_ids=[A, C], sampling_params={**greedy, "logprob_start_len": 0}
        )
        _check(first[0], A, 0, hf)
        _check(first[1], C, 0, hf)
        # B and D hit A's cached prefix and decode side by side over it.
        second = engine.generate(
            input_ids=[B, D], sampling_params={**greedy, "logprob_start_len": 50}
        )
        for out, ids in zip(second, (B, D)):
            assert out["meta_info"]["cached_tokens"] >= 40
            _check(out, ids, 50, hf)
        assert_pool_whole(engine)
