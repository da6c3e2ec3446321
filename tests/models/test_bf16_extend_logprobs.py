"""A tiny random Llama (head dim 64, GQA 2:1) with a bfloat16 KV pool on each variant with an
extend kernel of bfloat16 products this CPU runs (AMX tiles on amx, VDPBF16PS on avx512bf16):
its prefill attention runs that kernel (queries and probabilities in bfloat16), and its
prompt logprobs stay within TOL of the same model over a float32 pool, through a cached
prefix (the second prompt extends the first's radix-tree entry)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from tiny_models import make_tiny

from radixrt import Engine
from radixrt.model.cpu import build as cpu_build
from radixrt.model.cpu import kernels as ck

# Measured against the float32 pool (logprobs about -11 nats on this random model): at most
# 0.024 nats, mean 0.005; the bfloat16 pool through the float32 kernel alone: at most 0.016.
TOL, TOL_MEAN = 0.05, 0.01

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")


def _ids(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 49000) for _ in range(n)]


A = _ids(1, 150)
B = A[:100] + _ids(2, 60)  # 100 tokens from the cache, 60 new


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    return make_tiny(tmp_path_factory.mktemp("tiny_d64"), smollm2_path, "llama",
                     hidden_size=128, num_attention_heads=2, num_key_value_heads=1,
                     head_dim=64)  # fmt: skip


def _logprobs(model: Path, kv_dtype: str) -> list[list[float]]:
    params = {"max_new_tokens": 1, "return_logprob": True, "logprob_start_len": 0}
    out = []
    with Engine(str(model), max_total_tokens=1024, context_length=256, kv_cache_dtype=kv_dtype,
                attention_backend="cpu", cpu_kernels="on") as engine:  # fmt: skip
        for ids in (A, B):
            meta = engine.generate(input_ids=ids, sampling_params=params)["meta_info"]
            out.append([lp for lp, _, _ in meta["input_token_logprobs"]][1:])
    return out


@pytest.mark.parametrize("isa", ck.BF16_EXTEND_ISAS)
def test_bf16_prefill_logprobs_match_float32_kv(
    model: Path, monkeypatch: pytest.MonkeyPatch, isa: str
) -> None:
    if isa not in cpu_build.supported_isas():
        pytest.skip(f"this CPU cannot run the {isa} variant")
    monkeypatch.setenv("RADIXRT_CPU_ISA", isa)
    taken: list[bool] = []
    takes = ck.bf16_extend_takes

    def spy(kv_dtype: torch.dtype, d: int, window: int = 0) -> bool:
        taken.append(takes(kv_dtype, d, window))
        return taken[-1]

    monkeypatch.setattr(ck, "bf16_extend_takes", spy)
    ref = _logprobs(model, "float32")
    assert taken and not any(taken)  # the float32 pool: the float32 kernel
    taken.clear()
    got = _logprobs(model, "bfloat16")
    assert taken and all(taken)  # every extend on the bfloat16 kernel
    for g, r in zip(got, ref):
        assert len(g) == len(r)
        err = [abs(a - b) for a, b in zip(g, r)]
        assert max(err) <= TOL and sum(err) / len(err) <= TOL_MEAN, (max(err), sum(err) / len(err))
