"""A fault that belongs to one request (its grammar, its stop check, its logprobs, a row with no
allowed token) finishes that request with an error; the batch's other requests go on, and the
pool ends whole with nothing locked."""

from __future__ import annotations

import pytest
import torch

from radixrt.core import FinishKind, Req, SamplingParams
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.scheduler.builder import build_scheduler
from radixrt.scheduler.grammar_queue import GrammarState, GrammarStats


@pytest.fixture(scope="module")
def sched(tiny_llama_path):
    scheduler, _ = build_scheduler(
        ModelConfig(model_path=str(tiny_llama_path), context_length=256),
        CacheConfig(max_total_tokens=2048),
        SchedulerConfig(),
    )
    return scheduler


class _Matcher:
    """Allows every token; `mode` makes it raise in fill_mask or accept, or allow nothing."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def fill_mask(self, bitmask: torch.Tensor, row: int, budget: int | None = None) -> None:
        if self.mode == "mask raises":
            raise RuntimeError("matcher broke")
        bitmask[row] = 0 if self.mode == "allows nothing" else -1

    def accept(self, token_id: int) -> bool:
        if self.mode == "accept raises":
            raise RuntimeError("matcher broke on accept")
        return True

    def is_accepting(self) -> bool:
        return False

    def min_tokens(self) -> None:
        return None


def _req(rid: str, **sp: object) -> Req:
    params = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True, **sp}
    return Req(rid, [5, 6, 7, 8, 9], SamplingParams(**params))


def _run(sched, reqs: list[Req]) -> None:
    for r in reqs:
        sched.add_request(r)
    for _ in range(100):
        if sched.is_idle:
            break
        sched.step()
        sched.kv.check_whole(sum(sched.kv.slots_held(r) for r in sched.running))
        sched.kv.cache.check_integrity()
    assert sched.is_idle
    sched.check_pool_whole()
    assert sched.kv.cache.protected_size == 0


@pytest.mark.parametrize("mode", ["mask raises", "accept raises", "allows nothing"])
def test_a_broken_grammar_fails_only_its_request(sched, mode: str) -> None:
    bad = _req("bad")
    words = (sched.runner.arch.vocab_size + 31) // 32
    good = [_req(f"good{i}") for i in range(3)]
    sched.add_request(good[0])
    sched.step()  # good0 is decoding when the bad one joins its batch
    bad.grammar = GrammarState(_Matcher(mode), words, GrammarStats())
    _run(sched, [bad, *good[1:]])
    assert bad.finish_reason.kind == FinishKind.ABORT
    assert bad.finish_reason.status_code == 500, bad.finish_reason
    assert bad.finish_reason.message
    for g in good:
        assert g.finish_reason.kind == FinishKind.LENGTH and len(g.output_ids) == 6


def test_a_failing_stop_check_fails_only_its_request(sched, monkeypatch) -> None:
    check = sched.finish.check

    def flaky(req: Req, context_len: int) -> None:
        if req.rid == "bad" and len(req.output_ids) == 2:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "broken")
        check(req, context_len)

    monkeypatch.setattr(sched.finish, "check", flaky)
    bad, good = _req("bad"), _req("good")
    _run(sched, [bad, good])
    assert bad.finish_reason.status_code == 500 and "finish check" in bad.finish_reason.message
    assert len(bad.output_ids) == 2
    assert good.finish_reason.kind == FinishKind.LENGTH and len(good.output_ids) == 6


def test_failing_input_logprobs_fail_only_their_request(sched, monkeypatch) -> None:
    import radixrt.scheduler.scheduler as module

    def broken(req: Req, logits: torch.Tensor, start: int) -> None:
        raise IndexError("logprobs broke")

    monkeypatch.setattr(module, "add_input_logprobs", broken)
    bad = _req("bad", return_logprob=True, logprob_start_len=0)
    good = _req("good")
    _run(sched, [bad, good])
    assert bad.finish_reason.status_code == 500 and "logprobs" in bad.finish_reason.message
    assert good.finish_reason.kind == FinishKind.LENGTH


def test_parameters_checked_against_the_model_are_refused_at_add(sched) -> None:
    vocab = sched.runner.arch.vocab_size
    for sp, field in [
        ({"top_k": vocab + 1}, "top_k"),
        ({"logprob_start_len": 5}, "logprob"),
        ({"stop_token_ids": [vocab]}, "vocabulary"),
    ]:
        req = _req("r", **sp)
        sched.add_request(req)
        assert req.finish_reason.status_code == 400 and field in req.finish_reason.message
    assert sched.is_idle
