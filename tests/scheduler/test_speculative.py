"""Speculative decoding on a tiny random Llama: greedy tokens identical with and without
drafts (tree and own-token drafts, stops and max_new_tokens cut inside an accepted draft,
paged slots, mixed batches), the pool whole after every step, aborts mid-speculation."""

from __future__ import annotations

import random

import pytest

from radixrt.cache.tree_walk import continuation
from radixrt.core import FinishKind, Req, SamplingParams
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.core.forward_batch import MAX_ROWS_PER_REQUEST, ForwardMode
from radixrt.scheduler.builder import build_scheduler
from radixrt.scheduler.speculative.step_cost import PRIOR_K, StepCost


def _build(path, k: int, page_size: int = 1, max_total_tokens: int = 4096, model=None, **sched):
    scheduler, _ = build_scheduler(
        ModelConfig(model_path=str(path), context_length=512, **(model or {})),
        CacheConfig(max_total_tokens=max_total_tokens, page_size=page_size),
        SchedulerConfig(speculative_num_draft_tokens=k, **sched),
    )
    return scheduler


def _req(rid: str, ids: list[int], n: int = 24, **params) -> Req:
    sp = SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True, **params)
    return Req(rid, list(ids), sp)


def _check(s) -> None:
    held = sum(s.kv.slots_held(r) for r in s.running)
    s.kv.check_whole(held)
    s.kv.cache.check_integrity()
    assert all(not r.draft_ids for r in s.running)  # no draft outlives its step


def _run(s, reqs: list[Req]) -> dict[str, list[int]]:
    """Step until idle; the pool is checked after every step."""
    for r in reqs:
        s.add_request(r)
    while not s.is_idle:
        s.step()
        _check(s)
    s.check_pool_whole()
    assert s.kv.cache.protected_size == 0  # nothing locked once idle
    return {r.rid: r.output_ids for r in reqs}


def _prompt(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 49000) for _ in range(n)]


def _repetitive(seed: int) -> list[int]:
    return _prompt(seed, 12) * 4


@pytest.fixture(scope="module")
def plain(tiny_llama_path):
    return _build(tiny_llama_path, 0)


@pytest.fixture(scope="module")
def spec(tiny_llama_path):
    s = _build(tiny_llama_path, 4)
    # The prior row cost, not this machine's measured one: these tests need drafts made
    # (test_speculative_cost.py tests the measured cost).
    s.speculation.depths.cost = StepCost(fixed_k=PRIOR_K["cpu"])
    return s


def _fresh(*scheds) -> None:
    for s in scheds:
        s.kv.cache.reset()


def test_off_drafts_nothing(plain) -> None:
    _fresh(plain)
    r = _req("a", _repetitive(1))
    _run(plain, [r])
    assert r.spec_drafted == 0 and plain.stats.spec_drafted_tokens == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_greedy_identical_on_repetitive_prompts(plain, spec, seed: int) -> None:
    _fresh(plain, spec)
    ref = _run(plain, [_req("a", _repetitive(seed), 40)])["a"]
    r = _req("a", _repetitive(seed), 40)
    assert _run(spec, [r])["a"] == ref
    assert r.spec_drafted > 0  # the prompt repeats: its own tokens give drafts


def test_repeated_request_drafts_from_the_tree(plain, spec) -> None:
    """The same prompt again: its first answer is a cached path, drafted and accepted."""
    _fresh(plain, spec)
    ids = _prompt(4, 30)
    ref_req = _req("a", ids, 30)
    ref = _run(plain, [ref_req])["a"]
    assert ref_req.sampling_steps == 30  # one step per token without speculation
    first = _req("a", ids, 30)
    assert _run(spec, [first])["a"] == ref
    again = _req("b", ids, 30)
    passes = spec.stats.forward_passes
    assert _run(spec, [again])["b"] == ref
    assert again.spec_accepted >= 20  # all but a few tokens came from the tree
    assert spec.stats.forward_passes - passes < 15  # 30 tokens in far fewer steps
    assert again.sampling_steps == spec.stats.forward_passes - passes  # alone: every pass


def test_tree_drafts_stay_in_their_namespace(spec) -> None:
    _fresh(spec)
    ids = _prompt(5, 30)
    _run(spec, [Req("a", ids, SamplingParams(max_new_tokens=20, temperature=0,
                                             ignore_eos=True), extra_key="tenant-a")])  # fmt: skip
    other = Req("b", ids, SamplingParams(max_new_tokens=20, temperature=0, ignore_eos=True),
                extra_key="tenant-b")  # fmt: skip
    spec.add_request(other)
    spec.step()  # prefill: the first token
    assert continuation(spec.kv.cache, other.fill_ids, "tenant-b", 4) == []
    assert continuation(spec.kv.cache, other.fill_ids, "tenant-a", 4) != []
    _run(spec, [])


@pytest.mark.parametrize("max_new", [1, 2, 3, 5, 7, 12])
def test_max_new_tokens_cut(plain, spec, max_new: int) -> None:
    _fresh(plain, spec)
    ids = _prompt(6, 20)
    full = _run(plain, [_req("a", ids, 20)])["a"]
    _run(spec, [_req("warm", ids, 20)])  # the answer is in the tree: drafts are accepted
    r = _req("b", ids, max_new)
    assert _run(spec, [r])["b"] == full[:max_new]
    assert r.finish_reason.kind == FinishKind.LENGTH


@pytest.mark.parametrize("at", [2, 5, 9])
def test_stop_token_cuts_inside_an_accepted_draft(plain, spec, at: int) -> None:
    _fresh(plain, spec)
    ids = _prompt(7, 20)
    full = _run(plain, [_req("a", ids, 20)])["a"]
    stop = full[at]
    cut = full[: full.index(stop) + 1]
    _run(spec, [_req("warm", ids, 20)])
    r = _req("b", ids, 20, stop_token_ids=[stop])
    assert _run(spec, [r])["b"] == cut
    assert r.finish_reason.kind == FinishKind.STOP and r.spec_accepted > 0


def test_mixed_batch(plain, spec) -> None:
    """Speculating requests (greedy, seeded sampling) next to ones that are not."""
    _fresh(plain, spec)

    def batch() -> list[Req]:
        return [
            _req("g1", _repetitive(8), 30),
            _req("g2", _repetitive(9), 30),
            Req(
                "s",
                _repetitive(10),
                SamplingParams(max_new_tokens=30, temperature=0.8, seed=3, ignore_eos=True),
            ),  # fmt: skip
            _req("lp", _repetitive(11), 30, return_logprob=True),
            _req("pen", _repetitive(12), 30, repetition_penalty=1.3),
        ]

    ref = _run(plain, batch())
    reqs = batch()
    assert _run(spec, reqs) == ref
    drafted = {r.rid: r.spec_drafted for r in reqs}
    assert drafted["g1"] > 0 and drafted["g2"] > 0  # "s" may draft now: seeded, the same
    assert drafted["lp"] > 0  # "pen" too when its output repeats (test_speculative_params)


def test_drafts_stay_within_a_decode_pass(tiny_llama_path, plain) -> None:
    """With a draft limit past what a pass decodes as rows of one request, a step's rows per
    request stay within MAX_ROWS_PER_REQUEST: a verifying step without prefills is a decode
    pass, and the outputs are as without drafts."""
    _fresh(plain)
    s = _build(tiny_llama_path, 40)
    s.speculation.depths.cost = StepCost(fixed_k=1e6)  # rows free: each draft as long as allowed
    passes: list[tuple[ForwardMode, int]] = []
    backend = s.runner.attn_backend
    init = backend.init_forward_metadata

    def record(fb) -> None:
        passes.append((fb.mode, max(fb.extend_seq_lens_cpu)))
        init(fb)

    backend.init_forward_metadata = record
    prompts = [_repetitive(31), _repetitive(32)]
    ref = _run(plain, [_req(f"r{i}", ids, 60) for i, ids in enumerate(prompts)])
    reqs = [_req(f"r{i}", ids, 60) for i, ids in enumerate(prompts)]
    try:
        assert _run(s, reqs) == ref
    finally:
        backend.init_forward_metadata = init
    assert max(r.spec_drafted for r in reqs) >= MAX_ROWS_PER_REQUEST  # it drafted all along
    after_prompts = passes[1:]  # the first pass computes both prompts
    assert after_prompts and all(mode is ForwardMode.DECODE for mode, _ in after_prompts)
    assert s.stats.spec_drafted_tokens > 0


@pytest.mark.parametrize("page_size", [4, 16])
def test_paged(tiny_llama_path, plain, page_size: int) -> None:
    _fresh(plain)
    s = _build(tiny_llama_path, 5, page_size=page_size)
    prompts = [_repetitive(13), _prompt(14, 23), _repetitive(15)]
    ref = _run(plain, [_req(f"r{i}", ids, 33) for i, ids in enumerate(prompts)])
    assert _run(s, [_req(f"r{i}", ids, 33) for i, ids in enumerate(prompts)]) == ref
    again = [_req(f"r{i}", ids, 33) for i, ids in enumerate(prompts)]
    assert _run(s, again) == ref
    assert sum(r.spec_accepted for r in again) > 0


def test_torch_ops_and_torch_native_attention(tiny_llama_path) -> None:
    """The same on torch's ops (the extend path of torch_native attention) as on the kernels."""
    model = {"attention_backend": "torch_native", "cpu_kernels": "off"}
    plain, s = (_build(tiny_llama_path, k, model=model) for k in (0, 4))
    prompts = [_repetitive(23), _prompt(24, 17)]
    ref = _run(plain, [_req(f"r{i}", ids, 30) for i, ids in enumerate(prompts)])
    reqs = [_req(f"r{i}", ids, 30) for i, ids in enumerate(prompts)]
    assert _run(s, reqs) == ref and reqs[0].spec_accepted > 0
    assert _run(s, [_req(f"r{i}", ids, 30) for i, ids in enumerate(prompts)]) == ref


def test_small_pool_and_context_end(tiny_llama_path, plain) -> None:
    """Drafts only take spare slots (retraction as without them), and none runs past the
    context: a request reaching it ends there as it would one token at a time."""
    _fresh(plain)
    long = _prompt(16, 490)
    ref = _run(plain, [_req("c", long, 40)])
    assert len(ref["c"]) == 22  # 490 + 22 = the 512-token context
    s = _build(tiny_llama_path, 4)
    _run(s, [_req("warm", long, 40)])
    assert _run(s, [_req("c", long, 40)]) == ref
    small = _build(tiny_llama_path, 4, max_total_tokens=200, decode_reserve_tokens=0)
    prompts = [_repetitive(i) for i in range(17, 21)]
    _fresh(plain)
    ref = _run(plain, [_req(f"r{i}", ids, 30) for i, ids in enumerate(prompts)])
    assert _run(small, [_req(f"r{i}", ids, 30) for i, ids in enumerate(prompts)]) == ref


def abort_mid_speculation(spec, ids: list[int], other: list[int], n: int, steps: int) -> None:
    """`ids` served once (its answer is then drafted from the tree), then again beside
    `other`; aborted mid-draft after `steps` steps: the pool whole at once, `other` finishes."""
    _run(spec, [_req("warm", ids, n)])
    a, b = _req("a", ids, n), _req("b", other, n)
    spec.add_request(a)
    spec.add_request(b)
    for _ in range(steps):
        spec.step()
        _check(spec)
    assert a.spec_accepted > 0 and not a.is_finished
    assert spec.abort("a") is a
    _check(spec)
    _run(spec, [])
    assert b.finish_reason.kind == FinishKind.LENGTH


def test_abort_mid_speculation(spec) -> None:
    _fresh(spec)
    abort_mid_speculation(spec, _prompt(21, 20), _repetitive(22), 30, 3)
