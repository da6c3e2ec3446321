"""Speculative decoding with a draft model (tiny random Llamas of one vocabulary): greedy
tokens identical to no speculation with the target as its own draft (nearly every draft
accepted: the draft K/V is right) and with an unrelated draft, batched with shared prefixes;
the sampled distribution unchanged; aborts mid-draft; a draft with sliding-window layers; the
load-time refusals."""

from __future__ import annotations

import pytest
from test_speculative import _check, _prompt, _req, _run
from test_speculative_sampling import VOCAB, _chi2_z, _draws, small_vocab_path  # noqa: F401
from tiny_models import make_tiny

from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.scheduler.builder import build_scheduler
from radixrt.scheduler.speculative.draft_model import DraftModelDrafter
from radixrt.scheduler.speculative.step_cost import StepCost
from radixrt.serve.http.args import parse_args


def _build(path, k: int = 0, draft=None, context: int = 512, kernels: bool = False, **sched):
    """On torch's ops (unless `kernels`), so the target as its own draft computes the same
    logits."""
    ops = {} if kernels else {"attention_backend": "torch_native", "cpu_kernels": "off"}
    scheduler, _ = build_scheduler(
        ModelConfig(model_path=str(path), context_length=context, **ops),
        CacheConfig(max_total_tokens=4096),
        SchedulerConfig(speculative_num_draft_tokens=k,
                        speculative_draft_model=None if draft is None else str(draft), **sched),
    )  # fmt: skip
    return scheduler


@pytest.fixture(scope="module")
def other_llama_path(tmp_path_factory, smollm2_path):
    """Another tiny Llama of the same vocabulary: different shapes and weights."""
    return make_tiny(tmp_path_factory.mktemp("tiny_llama_draft"), smollm2_path, "llama",
                     hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1)  # fmt: skip


@pytest.fixture(scope="module")
def plain(tiny_llama_path):
    return _build(tiny_llama_path)


def _batch() -> list:
    """Several requests, three sharing a prefix (radix hits: admitted once the first one's
    prompt is cached, their drafts read its draft K/V), one longer output."""
    shared = _prompt(7, 40)
    return [
        _req("r0", shared + _prompt(1, 5), n=16),
        _req("r1", shared + _prompt(2, 9), n=16),
        _req("r2", shared + _prompt(3, 3), n=30),
        _req("r3", _prompt(4, 17), n=16),
        _req("r4", _prompt(5, 12) * 3, n=16),
    ]


@pytest.fixture(scope="module")
def spec(tiny_llama_path):
    """The target as its own draft."""
    return _build(tiny_llama_path, 4, draft=tiny_llama_path)


@pytest.fixture(scope="module")
def reference(plain) -> dict[str, list[int]]:
    plain.kv.cache.reset()
    return _run(plain, _batch())


def test_self_draft_identical_and_accepted(reference, spec) -> None:
    assert isinstance(spec.speculation.drafter, DraftModelDrafter)
    assert _run(spec, _batch()) == reference
    s = spec.stats
    # The draft computes what the target does: all but float-rounding ties are accepted,
    # which holds only while the draft K/V of every position (cached prefixes too) is right.
    assert s.spec_accepted_tokens >= 0.95 * s.spec_drafted_tokens > 0, (
        s.spec_accepted_tokens, s.spec_drafted_tokens)  # fmt: skip
    assert s.spec_emitted_tokens >= 3 * s.spec_verify_steps
    # Again: every prompt is a cached prefix now, whose slots hold its draft K/V, so the
    # draft model computes only the same drafts as before, not the prompts again.
    draft = spec.speculation.drafter.runner
    first, draft.num_computed = draft.num_computed, 0
    assert _run(spec, _batch()) == reference
    new_prompt = sum(len(r.input_ids) for r in _batch()) - 2 * 40  # two read the shared 40
    assert draft.num_computed <= first - new_prompt + 10, (first, draft.num_computed)


def test_unrelated_draft_identical(reference, tiny_llama_path, other_llama_path) -> None:
    spec = _build(tiny_llama_path, 3, draft=other_llama_path)
    assert _run(spec, _batch()) == reference
    s = spec.stats
    assert s.spec_drafted_tokens > 0 and s.spec_accepted_tokens < 0.5 * s.spec_drafted_tokens


def test_self_draft_on_cpu_kernels(tiny_llama_path) -> None:
    """With the target on radixrt's CPU kernels the draft model runs on them too."""
    plain = _build(tiny_llama_path, kernels=True)
    spec = _build(tiny_llama_path, 4, draft=tiny_llama_path, kernels=True)
    if plain.runner.attn_backend_name != "cpu":
        pytest.skip("radixrt's CPU kernels are not available here")
    assert type(spec.speculation.drafter.runner.attn_backend).__name__ == "CpuAttnBackend"
    reqs = _batch()
    assert _run(spec, reqs) == _run(plain, _batch())
    s = spec.stats
    assert s.spec_accepted_tokens >= 0.9 * s.spec_drafted_tokens > 0


def test_n_greater_than_one_identical(plain, spec) -> None:
    prompt = _prompt(11, 20)
    ref = _run(plain, [_req(f"n{i}", prompt) for i in range(3)])
    reqs = [_req(f"n{i}", prompt) for i in range(3)]
    assert _run(spec, reqs) == ref
    assert all(r.spec_accepted > 0 for r in reqs)


def test_abort_mid_draft(plain, spec) -> None:
    """Aborted after steps that verified drafts, with another request drafting on: the pool
    whole after every step, nothing locked at the end, the other's output unchanged."""
    ids = _prompt(21, 30)
    a, b = _req("a", ids, 40), _req("b", _prompt(22, 30), 16)
    for r in (a, b):
        spec.add_request(r)
    for _ in range(4):
        spec.step()
        _check(spec)
    assert a.spec_accepted > 0 and not a.is_finished and a.draft_kv_len > len(ids)
    assert spec.abort("a") is a
    assert a.draft_kv_len == 0 and a.req_pool_idx is None
    _check(spec)
    _run(spec, [])
    assert _run(plain, [_req("b", _prompt(22, 30), 16)])["b"] == b.output_ids


@pytest.fixture(scope="module")
def small_vocab_pair(small_vocab_path):  # noqa: F811  (the fixture imported above)
    plain = _build(small_vocab_path, 0, context=128, max_running_requests=512)
    spec = _build(small_vocab_path, 4, draft=small_vocab_path, context=128,
                  max_running_requests=512)  # fmt: skip
    spec.speculation.depths.cost = StepCost(fixed_k=1e6)  # rows free: 600 at once draft
    return plain, spec


def test_sampled_distribution_unchanged(small_vocab_pair) -> None:
    plain, spec = small_vocab_pair
    ref = _draws(plain, 600, temperature=1.0)
    got = _draws(spec, 600, temperature=1.0)
    assert spec.stats.spec_accepted_tokens > 120  # the draft's argmax is often drawn
    assert _chi2_z(ref, got) < 4.0


def test_refusals(tiny_llama_path, tmp_path, smollm2_path) -> None:
    with pytest.raises(ValueError, match="speculative_num_draft_tokens"):
        SchedulerConfig(speculative_draft_model=str(tiny_llama_path))
    flags = ["--speculative-draft-model", "/d", "--speculative-num-draft-tokens", "3"]
    assert parse_args(flags).scheduler.speculative_draft_model == "/d"
    other = make_tiny(tmp_path / "v16", smollm2_path, "llama", vocab_size=VOCAB)
    with pytest.raises(ValueError, match="vocabulary"):
        _build(tiny_llama_path, 4, draft=other)


def test_a_draft_with_sliding_window_layers(reference, tiny_llama_path, tmp_path,
                                            smollm2_path) -> None:  # fmt: skip
    """A draft whose every layer slides (a 16-key window, outputs past it) drafts for a
    target without windows: its window read by position from its own buffer."""
    windowed = make_tiny(tmp_path / "win", smollm2_path, "qwen2", sliding_window=16,
                         use_sliding_window=True, max_window_layers=0)  # fmt: skip
    spec = _build(tiny_llama_path, 3, draft=windowed)
    assert _run(spec, _batch()) == reference
    assert spec.stats.spec_drafted_tokens > 0


def test_refusals_of_setups(plain) -> None:
    """Tensor parallelism and CUDA graphs are refused before the draft's weights load."""
    from dataclasses import replace
    from types import SimpleNamespace

    import torch

    from radixrt.executor.draft_runner import _check_pair

    arch, config = plain.runner.arch, plain.runner.model_config
    cpu, cuda = torch.device("cpu"), torch.device("cuda")

    def target(device, **model):
        return SimpleNamespace(arch=arch, device=device, model_config=replace(config, **model))

    _check_pair(arch, target(cpu))  # type: ignore[arg-type]
    _check_pair(arch, target(cuda, disable_cuda_graph=True))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="--tp 1"):
        _check_pair(arch, target(cpu, tp_size=2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="--disable-cuda-graph"):
        _check_pair(arch, target(cuda))  # type: ignore[arg-type]


def test_the_draft_models_kv_and_weights_come_out_of_the_kv_budget(
    tiny_llama_path, other_llama_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a memory budget (no --max-total-tokens), a draft model's K/V per slot and its
    weights are counted: fewer target slots, and the two buffers together fit the budget."""
    import radixrt.executor.kv_memory as kv_memory

    budget = 128 * 2**20  # weights and KV
    monkeypatch.setattr(kv_memory, "kv_budget_bytes", lambda device, cache, weights: budget
                        - weights)  # fmt: skip

    def build(draft):
        scheduler, _ = build_scheduler(
            ModelConfig(model_path=str(tiny_llama_path), context_length=512,
                        attention_backend="torch_native", cpu_kernels="off"),
            CacheConfig(),
            SchedulerConfig(speculative_num_draft_tokens=2 if draft else 0,
                            speculative_draft_model=str(draft) if draft else None),
        )  # fmt: skip
        return scheduler

    alone = build(None).runner
    with_draft = build(tiny_llama_path)
    runner = with_draft.runner
    assert runner.kv_beside.values_per_slot > 0 and runner.kv_beside.weight_bytes > 0
    # the same model as its own draft: each slot carries twice the K/V
    slots = runner.max_total_tokens
    assert slots < alone.max_total_tokens * 0.6, (slots, alone.max_total_tokens)
    pool = runner.token_to_kv_pool.size_bytes
    draft_kv = with_draft.speculation.drafter.runner.kv.size_bytes  # type: ignore[attr-defined]
    assert pool + draft_kv + runner.kv_beside.weight_bytes <= budget + 2 * 2**20
