"""Drafts verified in a prompt's own pass (Speculation.plan_prompt_ends) on a tiny random
Llama: a prompt answered before gets its first tokens in the pass that computes it, greedy
tokens and output logprobs as without speculation on the C kernels and on torch_native
(paged slots, chunked prefill, beside decoding requests), no draft where prompt logprobs are
asked, a guess not drafted, an abort after such a pass; the pool whole after every step."""

from __future__ import annotations

import pytest
from test_speculative import _build, _check, _fresh, _prompt, _req, _run

from radixrt.core import FinishKind
from radixrt.scheduler.speculative.step_cost import PRIOR_K, StepCost

TORCH = {"attention_backend": "torch_native", "cpu_kernels": "off"}
K = 6


def _spec(path, **kw):
    s = _build(path, K, **kw)
    s.speculation.depths.cost = StepCost(fixed_k=PRIOR_K["cpu"])  # the prior: drafts are made
    return s


@pytest.fixture(scope="module")
def scheds(tiny_llama_path):
    return {
        "cpu": (_build(tiny_llama_path, 0), _spec(tiny_llama_path)),
        "torch_native": (_build(tiny_llama_path, 0, model=TORCH),
                         _spec(tiny_llama_path, model=TORCH)),
    }  # fmt: skip


def _first_pass(s, req) -> None:
    """Add `req` and run the step that computes its prompt (it alone waits)."""
    s.add_request(req)
    s.step()
    _check(s)


@pytest.mark.parametrize("backend", ["cpu", "torch_native"])
def test_a_prompt_answered_before_gets_its_first_tokens_in_its_own_pass(scheds, backend) -> None:
    plain, spec = scheds[backend]
    _fresh(plain, spec)
    ids = _prompt(41, 20)
    ref = _run(plain, [_req("a", ids, 24)])["a"]
    _run(spec, [_req("warm", ids, 24)])  # its answer is a cached path after the prompt
    spec.kv.cache.check_integrity()
    r = _req("b", ids, 24)
    passes = spec.stats.forward_passes
    steps, accepted = spec.stats.spec_prompt_end_steps, spec.stats.spec_prompt_end_accepted
    _first_pass(spec, r)
    # The prompt (all but its last token cached) and a draft of K tokens in one pass: the
    # last prompt token's pick and the K accepted drafts.
    assert r.output_ids == ref[: K + 1] and r.spec_accepted == K
    assert spec.stats.spec_prompt_end_steps == steps + 1
    assert spec.stats.spec_prompt_end_accepted == accepted + K
    assert _run(spec, []) == {} and r.output_ids == ref
    assert spec.stats.forward_passes - passes < 24 // (K + 1) + 2


def test_a_cold_prompt_and_its_draft_in_one_pass(scheds) -> None:
    """Nothing of the prompt cached, its tail repeating its start (a trusted match): the
    whole prompt is an extend and the draft after it decode rows of the same request, in
    the same pass; the tokens and their logprobs are a decode step's."""
    plain, spec = scheds["cpu"]
    _fresh(plain, spec)
    head = _prompt(42, 10)
    ids = head + _prompt(52, 10) + head[:5]  # after head[:5] came head[5:] before
    ref = _req("a", ids, 16, return_logprob=True)
    _run(plain, [ref])
    r = _req("c", ids, 16, return_logprob=True)
    _first_pass(spec, r)
    assert r.spec_drafted == K  # head[5:], verified in the prompt's pass
    _run(spec, [])
    assert r.output_ids == ref.output_ids
    assert r.output_logprobs == pytest.approx(ref.output_logprobs, abs=1e-4)


def test_paged_and_beside_a_decoding_request(tiny_llama_path) -> None:
    plain, spec = _build(tiny_llama_path, 0, page_size=4), _spec(tiny_llama_path, page_size=4)
    ids, other = _prompt(43, 21), _prompt(44, 18)
    ref = _run(plain, [_req("a", ids, 20)])["a"]
    ref_other = _run(plain, [_req("o", other, 20)])["o"]
    _run(spec, [_req("warm", ids, 20)])
    o = _req("o", other, 20)
    _first_pass(spec, o)  # decoding from here on
    r = _req("b", ids, 20)
    _first_pass(spec, r)  # its prompt's pass, with o's decode (and o's own draft, if any)
    assert r.output_ids == ref[: len(r.output_ids)] and len(r.output_ids) == K + 1
    out = _run(spec, [])
    assert out == {} and r.output_ids == ref and o.output_ids == ref_other


def test_chunked_prefill_drafts_after_its_last_chunk(tiny_llama_path) -> None:
    plain = _build(tiny_llama_path, 0, chunked_prefill_size=8)
    spec = _spec(tiny_llama_path, chunked_prefill_size=8)
    ids = _prompt(45, 12) * 3  # 36 tokens: chunks of 8, 8, 8, 8, 4; its tail repeats
    ref = _run(plain, [_req("a", ids, 20)])["a"]
    r = _req("b", ids, 20)
    spec.add_request(r)
    for _ in range(4):
        spec.step()
        _check(spec)
        assert r.output_ids == [] and r.spec_drafted == 0  # no token before the last chunk
    spec.step()  # the last chunk and a draft after it
    _check(spec)
    assert r.spec_drafted == K and r.output_ids
    assert _run(spec, []) == {} and r.output_ids == ref


def test_no_draft_where_prompt_logprobs_are_asked(scheds) -> None:
    plain, spec = scheds["cpu"]
    _fresh(plain, spec)
    ids = _prompt(47, 20)
    ref_req = _req("a", ids, 12, return_logprob=True, logprob_start_len=0)
    _run(plain, [ref_req])
    _run(spec, [_req("warm", ids, 12)])
    r = _req("b", ids, 12, return_logprob=True, logprob_start_len=0)
    _first_pass(spec, r)
    assert len(r.output_ids) == 1 and r.spec_drafted == 0
    _run(spec, [])
    assert r.output_ids == ref_req.output_ids
    assert len(r.input_logprobs) == len(ref_req.input_logprobs)


def test_output_logprobs_of_a_draft_in_the_prompts_pass(scheds) -> None:
    """Every emitted token has its logprob, the one a decode step gives it."""
    plain, spec = scheds["cpu"]
    _fresh(plain, spec)
    ids = _prompt(48, 20)
    ref = _req("a", ids, 12, return_logprob=True)
    _run(plain, [ref])
    _run(spec, [_req("warm", ids, 12)])
    r = _req("b", ids, 12, return_logprob=True)
    _first_pass(spec, r)
    assert len(r.output_ids) == K + 1 == len(r.output_logprobs)
    _run(spec, [])
    assert r.output_ids == ref.output_ids
    assert r.output_logprobs == pytest.approx(ref.output_logprobs, abs=1e-4)


def test_a_guess_is_not_drafted_after_a_prompt(scheds) -> None:
    """A prompt whose tail occurs nowhere before (a weak match at most) verifies no draft."""
    plain, spec = scheds["cpu"]
    _fresh(plain, spec)
    r = _req("a", _prompt(49, 20), 8)
    _first_pass(spec, r)
    assert r.spec_drafted == 0 and len(r.output_ids) == 1
    _run(spec, [])


def test_max_new_tokens_and_stop_inside_the_first_pass(scheds) -> None:
    plain, spec = scheds["cpu"]
    _fresh(plain, spec)
    ids = _prompt(50, 20)
    full = _run(plain, [_req("a", ids, 20)])["a"]
    _run(spec, [_req("warm", ids, 20)])
    r = _req("b", ids, 3)
    _first_pass(spec, r)
    assert r.output_ids == full[:3] and r.finish_reason.kind == FinishKind.LENGTH
    _run(spec, [])
    stop = full[2]
    s = _req("c", ids, 20, stop_token_ids=[stop])
    _first_pass(spec, s)
    assert s.output_ids == full[: full.index(stop) + 1]
    assert s.finish_reason.kind == FinishKind.STOP
    _run(spec, [])


def test_abort_after_the_prompts_pass(scheds) -> None:
    plain, spec = scheds["cpu"]
    _fresh(plain, spec)
    ids = _prompt(51, 20)
    _run(spec, [_req("warm", ids, 30)])
    a = _req("a", ids, 30)
    _first_pass(spec, a)
    assert a.spec_accepted == K and not a.is_finished
    assert spec.abort("a") is a
    _check(spec)
    _run(spec, [])
