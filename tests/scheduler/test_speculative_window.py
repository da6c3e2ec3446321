"""Speculative decoding on models with sliding-window layers (tiny random Gemma 3: two window
layers and a full one; Mistral: every layer slides), their window K/V in a tight pool of its
own and in the one pool: greedy tokens identical with and without drafts and equal to
transformers' past the window (chains, trees, predicted outputs, a repeat drafted from the
tree, torch_native attention, the target as its own draft model), both pools whole after every
step, aborts mid-speculation."""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_reference import hf_greedy_nocache, load_hf
from test_speculative import _prompt, _repetitive, _run, abort_mid_speculation
from test_speculative import _req as make_req
from tiny_families import WINDOW, make_family

from radixrt.core import Req
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.scheduler.builder import build_scheduler
from radixrt.scheduler.speculative.step_cost import PRIOR_K, StepCost

NEW = 40  # generated tokens: every request runs past the 16-key window
FRACTION = 0.05  # window slots per slot: the floor, a window and 150 slots of slack


def _build(path: Path, k: int, fraction: float = FRACTION, model=None, **sched):
    scheduler, _ = build_scheduler(
        ModelConfig(model_path=str(path), context_length=512, **(model or {})),
        CacheConfig(max_total_tokens=1200, window_kv_fraction=fraction),
        SchedulerConfig(speculative_num_draft_tokens=k, chunked_prefill_size=24, **sched),
    )
    if k:  # the prior row cost, not this machine's measured one: drafts are made
        scheduler.speculation.depths.cost = StepCost(fixed_k=PRIOR_K["cpu"])
    return scheduler


def _req(rid: str, ids: list[int], n: int = NEW, **params) -> Req:
    return make_req(rid, ids, n, **params)


@pytest.fixture(scope="module", params=["gemma3", "mistral"])
def family(request, tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path):
    """(folder, transformers' greedy tokens for _repetitive(1) and _repetitive(2))."""
    path = make_family(tmp_path_factory.mktemp(request.param), request.param, smollm2_path)
    hf = load_hf(path)
    return path, [hf_greedy_nocache(hf, _repetitive(i), NEW)[0] for i in (1, 2)]


@pytest.fixture(scope="module")
def plain(family):
    return _build(family[0], 0)


@pytest.fixture(scope="module")
def spec(family):
    return _build(family[0], 4)


def test_greedy_equals_transformers_with_drafts_accepted(family, plain, spec) -> None:
    path, want = family
    window = spec.kv.window
    assert window.window == WINDOW and window.capacity < 200  # a window pool, and a tight one
    for s in (plain, spec):
        s.kv.cache.reset()
    prompts = [_repetitive(1), _repetitive(2)]
    ref = _run(plain, [_req(f"r{i}", p) for i, p in enumerate(prompts)])
    assert list(ref.values()) == want
    reqs = [_req(f"r{i}", p) for i, p in enumerate(prompts)]
    assert _run(spec, reqs) == ref
    assert sum(r.spec_accepted for r in reqs) > 0
    # The same again: drafts from the tree (what the first round left there), and prefixes
    # whose window K/V the tight pool evicted matched only as far as their windows live.
    extra = [_req(f"x{i}", _prompt(40 + i, 60)) for i in range(6)]
    again = [_req(f"r{i}", p) for i, p in enumerate(prompts)]
    out = _run(spec, extra + again)
    assert [out[r.rid] for r in again] == want
    assert sum(r.spec_accepted for r in again) > sum(r.spec_accepted for r in reqs)


@pytest.mark.parametrize("fraction", [FRACTION, 1.0])
def test_trees_in_either_pool(family, plain, fraction: float) -> None:
    """Draft trees: every node a decode row over the prefix and its own path, its window the
    keys behind its depth; the same with the window layers' K/V in the one pool."""
    s = _build(family[0], 5, fraction, speculative_tree_branches=3)
    assert bool(s.kv.window.window) == (fraction < 1)
    plain.kv.cache.reset()
    prompts = [_repetitive(3), _prompt(4, 30) + _repetitive(3)[:30], _repetitive(5)]
    ref = _run(plain, [_req(f"r{i}", p) for i, p in enumerate(prompts)])
    reqs = [_req(f"r{i}", p) for i, p in enumerate(prompts)]
    assert _run(s, reqs) == ref
    assert sum(r.spec_accepted for r in reqs) > 0
    assert _run(s, [_req(f"r{i}", p) for i, p in enumerate(prompts)]) == ref


def test_predicted_outputs(family, plain) -> None:
    """A prediction drafts with speculation off: right, the answer's tokens are accepted;
    wrong, rejected; the answer the same either way."""
    s = _build(family[0], 0)
    s.speculation.depths.cost = StepCost(fixed_k=PRIOR_K["cpu"])
    plain.kv.cache.reset()
    ids = _prompt(6, 40)
    ref = _run(plain, [_req("p", ids)])["p"]
    right, wrong = _req("r", ids, prediction_ids=ref), _req("w", ids, prediction_ids=ref[::-1])
    assert _run(s, [right, wrong]) == {"r": ref, "w": ref}
    assert right.prediction_accepted > NEW // 2
    assert wrong.prediction_drafted > wrong.prediction_accepted


def test_torch_native_attention(family) -> None:
    model = {"attention_backend": "torch_native", "cpu_kernels": "off"}
    plain, s = (_build(family[0], k, model=model) for k in (0, 4))
    prompts = [_repetitive(7), _prompt(8, 20)]
    ref = _run(plain, [_req(f"r{i}", p) for i, p in enumerate(prompts)])
    assert _run(s, [_req(f"r{i}", p) for i, p in enumerate(prompts)]) == ref
    again = [_req(f"r{i}", p) for i, p in enumerate(prompts)]  # drafted from the tree
    assert _run(s, again) == ref and sum(r.spec_accepted for r in again) > 0


def test_abort_mid_speculation(spec) -> None:
    """An aborted request's drafts, own window K/V and holds go; the other finishes."""
    spec.kv.cache.reset()
    abort_mid_speculation(spec, _repetitive(9), _repetitive(10), NEW, 4)
    spec.kv.window.check(idle=True)  # every live window slot the tree's, no request's hold


def test_the_target_as_its_own_draft_model(family) -> None:
    """Window layers in the draft too, its K/V in a buffer with a row per target slot (no
    window pool of its own): on torch's ops it computes what the target does, so nearly every
    draft is accepted, which holds only while its window reads the right keys."""
    path, want = family
    ops = {"attention_backend": "torch_native", "cpu_kernels": "off"}
    s = _build(path, 4, model=ops, speculative_draft_model=str(path))
    assert s.kv.window.window == WINDOW
    out = _run(s, [_req(f"r{i}", _repetitive(i + 1)) for i in range(2)])
    assert list(out.values()) == want
    st = s.stats
    assert st.spec_accepted_tokens >= 0.9 * st.spec_drafted_tokens > 0
