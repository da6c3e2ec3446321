"""Extend batches on the fused layer (one C call per layer: csrc/cpu/layer_f32.c's
rt_extend_layer_f32) give the tokens and logprobs of the per-module path: mixed batches of
running decodes, a new prompt over a cached prefix and a long prompt in chunks, in float32 and
bfloat16 weights, float32 and bfloat16 KV, page sizes 1 and 16. The scheduler is stepped
directly so that both paths see the same batches."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from radixrt.core import Req, SamplingParams
from radixrt.core.config import CacheConfig, ModelConfig, SchedulerConfig
from radixrt.core.forward_batch import ForwardMode
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import w8a8
from radixrt.scheduler.builder import build_scheduler

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")

_rng = random.Random(11)
PREFIX = [_rng.randrange(3, 49000) for _ in range(40)]
SHORT = [[_rng.randrange(3, 49000) for _ in range(n)] for n in (6, 11, 17)]
LONG = [_rng.randrange(3, 49000) for _ in range(100)]  # 4 chunks of 32 and a tail
QUESTIONS = [[_rng.randrange(3, 49000) for _ in range(n)] for n in (9, 21)]


@pytest.fixture(scope="module")
def tiny_d32_path(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    """The tiny Llama with head dim 32 (the AMX extend kernel's smallest)."""
    from tiny_models import make_tiny

    return make_tiny(tmp_path_factory.mktemp("tiny_d32"), smollm2_path, "llama", hidden_size=128)


def _req(rid: str, ids: list[int], n: int) -> Req:
    params = SamplingParams(max_new_tokens=n, temperature=0, ignore_eos=True, return_logprob=True)
    return Req(rid, list(ids), params)


def _workload(s, fused: bool) -> tuple[dict[str, tuple[list[int], list[float]]], int, int]:
    """Warm the prefix, then decodes running while a cached-prefix prompt and a chunked long
    prompt arrive. Returns per request (tokens, logprobs), and how many extend passes with
    decode rows ran and how many ran fused."""
    layers = s.runner.model.model.layers
    for layer in layers:
        layer.fuse_extend = fused
    s.kv.cache.reset()
    calls = {"mixed": 0}
    inner = s.runner.forward_batch

    def counted(fb):
        pairs = zip(fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu)
        if fb.mode is ForwardMode.EXTEND and any(e == 1 and p > 0 for p, e in pairs):
            calls["mixed"] += 1
        return inner(fb)

    s.runner.forward_batch = counted
    before = sum(layer.extend_calls for layer in layers)
    reqs = [_req("warm", PREFIX + QUESTIONS[0], 2)]
    reqs += [_req(f"d{i}", ids, 24) for i, ids in enumerate(SHORT)]
    arrivals = {4: [_req("hit", PREFIX + QUESTIONS[1], 8), _req("long", LONG, 8)]}
    for r in reqs:
        s.add_request(r)
    step = 0
    while not s.is_idle or arrivals:
        for r in arrivals.pop(step, []):
            s.add_request(r)
            reqs.append(r)
        s.step()
        step += 1
    del s.runner.forward_batch
    s.check_pool_whole()
    assert next(r for r in reqs if r.rid == "hit").cached_tokens >= 32  # whole pages of PREFIX
    fused_calls = (sum(layer.extend_calls for layer in layers) - before) // len(layers)
    return {r.rid: (r.output_ids, r.output_logprobs) for r in reqs}, calls["mixed"], fused_calls


def _assert_same(fused: dict, modules: dict) -> None:
    """The same requests, the same tokens, logprobs within 1e-4."""
    assert fused.keys() == modules.keys()
    for rid, (ids, logprobs) in fused.items():
        assert ids == modules[rid][0], rid
        assert logprobs == pytest.approx(modules[rid][1], abs=1e-4), rid


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("kv", ["float32", "bfloat16"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_extend_equals_modules(
    tiny_d32_path: Path, dtype: str, kv: str, page_size: int
) -> None:
    s, _ = build_scheduler(
        ModelConfig(model_path=str(tiny_d32_path), context_length=512, dtype=dtype,
                    cpu_kernels="on"),
        CacheConfig(max_total_tokens=2048, page_size=page_size, kv_cache_dtype=kv),
        SchedulerConfig(chunked_prefill_size=32),
    )  # fmt: skip
    try:
        layers = s.runner.model.model.layers
        assert all(type(m).__name__ == "FusedDecodeLayer" for m in layers)
        if dtype == "bfloat16":
            assert layers[0].bf16_weights == 1
        fused, mixed, fused_calls = _workload(s, fused=True)
        assert mixed >= 4 and fused_calls >= mixed  # the mixed passes ran fused
        modules, mixed_again, none = _workload(s, fused=False)
        assert mixed_again == mixed and none == 0
    finally:
        s.close()
    _assert_same(fused, modules)


@pytest.mark.skipif(w8a8.best_path() is None, reason="no W8A8 path (AMX-INT8 or VNNI) here")
@pytest.mark.parametrize("quantization", ["int8", "w8a8"])
def test_fused_layers_take_w8a8_where_the_modules_do(
    tiny_d32_path: Path, quantization: str
) -> None:
    """int8 layers planned W8A8 ("on": at every size): the fused decode and extend calls run
    the int8 x int8 kernel where each linear would (layer_f32.c's a8 table), so decode steps
    and mixed passes give the per-module path's tokens and logprobs."""
    s, _ = build_scheduler(
        ModelConfig(model_path=str(tiny_d32_path), context_length=512,
                    quantization=quantization, cpu_kernels="on"),
        CacheConfig(max_total_tokens=2048, kv_cache_dtype="float32"),
        SchedulerConfig(chunked_prefill_size=32),
    )  # fmt: skip
    try:
        layers = s.runner.model.model.layers
        assert all(type(m).__name__ == "FusedDecodeLayer" for m in layers)
        assert all(m.a8 is not None and m.fuse_extend for m in layers)
        fused, mixed, fused_calls = _workload(s, fused=True)
        assert mixed >= 4 and fused_calls >= mixed
        wrapped = list(layers)
        for i, m in enumerate(wrapped):  # the decoder layers' own modules, decode steps too
            layers[i] = m.layer
            m.layer.fuse_extend, m.layer.extend_calls = False, 0
        try:
            modules, mixed_again, _ = _workload(s, fused=False)
        finally:
            for i, m in enumerate(wrapped):
                layers[i] = m
        assert mixed_again == mixed
    finally:
        s.close()
    _assert_same(fused, modules)
