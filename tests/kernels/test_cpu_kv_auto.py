"""`--kv-cache-dtype auto` on the CPU's kernels: a bfloat16 pool with bfloat16 linear weights
and no sliding window or soft cap (model/cpu/runtime.py auto_kv_dtype), float32 elsewhere and
under the tests' pin; the KV sizing follows the chosen width; the start-up line names each
attention pass's path and KV dtype."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from pool_checks import assert_pool_whole
from tiny_models import make_tiny

from radixrt import Engine
from radixrt.model.cpu import build as cpu_build
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu.guard import OPS, KernelPlan
from radixrt.model.cpu.runtime import AUTO_DTYPE_ENV, auto_kv_dtype

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")


@pytest.fixture(scope="module")
def tiny_d64(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    """A tiny Llama of head dim 64: the AMX extend kernel's shape."""
    return make_tiny(tmp_path_factory.mktemp("tiny_kv_auto"), smollm2_path, "llama",
                     hidden_size=128, num_attention_heads=2, num_key_value_heads=1)  # fmt: skip


def test_auto_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """bfloat16 only with bfloat16 weights and no window or soft cap; the pin keeps float32."""
    monkeypatch.delenv(AUTO_DTYPE_ENV)
    assert auto_kv_dtype(True, False) == torch.bfloat16
    assert auto_kv_dtype(True, True) == torch.float32  # a sliding window or a soft cap
    assert auto_kv_dtype(False, False) == torch.float32  # float32 weights
    monkeypatch.setenv(AUTO_DTYPE_ENV, "float32")
    assert auto_kv_dtype(True, False) == torch.float32


@pytest.mark.parametrize("head_dim_model", ["tiny_d64", "tiny_llama_path"])
def test_auto_pool_and_sizing_follow_the_width(
    head_dim_model: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unpinned with bfloat16 weights: a bfloat16 pool, twice the slots of the float32 pool in
    the same memory, extends on AMX tiles where the kernel takes the head dim (64 on the amx
    variant) and on the float32 kernel otherwise (head dim 16, other variants); the pin gives
    float32 back, and so do float32 weights."""
    path: Path = request.getfixturevalue(head_dim_model)
    budget = {"mem_fraction_static": 0.004, "cpu_kernels": "on", "dtype": "bfloat16"}
    with Engine(str(path), **budget) as e:  # pinned (the test suite's setting)
        pinned = e.scheduler.runner
        assert pinned.kv_dtype == torch.float32 and pinned.cpu_kernels.kv_dtype == "float32"
        slots32 = pinned.max_total_tokens
    monkeypatch.delenv(AUTO_DTYPE_ENV)
    with Engine(str(path), **budget) as e:
        r = e.scheduler.runner
        assert r.bf16_weights and r.kv_dtype == torch.bfloat16
        assert r.token_to_kv_pool.dtype == torch.bfloat16
        head_dim = r.arch.head_dim
        assert r.cpu_kernels.extend_bf16 == ck.bf16_extend_takes(torch.bfloat16, head_dim)
        assert r.cpu_kernels.decode_bf16 == r.cpu_kernels.extend_bf16  # one arithmetic
        # the budget less the (bfloat16, smaller) weights, at half the bytes a slot
        assert r.max_total_tokens >= 2 * slots32 - r.token_to_kv_pool.page_size
        out = e.generate(input_ids=[5, 6, 7, 8] * 10,
                         sampling_params={"max_new_tokens": 4, "temperature": 0})  # fmt: skip
        assert len(out["output_ids"]) == 4  # type: ignore[index]
        assert_pool_whole(e)
    with Engine(str(path), max_total_tokens=512, cpu_kernels="on", dtype="bfloat16",
                kv_cache_dtype="float32") as e:  # fmt: skip
        assert e.scheduler.runner.kv_dtype == torch.float32  # an explicit choice stands
    with Engine(str(path), max_total_tokens=512, cpu_kernels="on", dtype="float32") as e:
        assert e.scheduler.runner.kv_dtype == torch.float32  # float32 weights


def test_summary_names_attention_paths() -> None:
    plan = KernelPlan("amx", frozenset(OPS), kv_dtype="bfloat16", extend_bf16=True,
                      decode_bf16=True)  # fmt: skip
    line = plan.summary()
    assert (
        "attention: decode on VDPBF16PS (bfloat16 QK^T and PV, float32 softmax) over bfloat16 KV"
        in line
    )
    f32 = replace(plan, decode_bf16=False).summary()
    assert "attention: decode on the kernel (float32 arithmetic) over bfloat16 KV" in f32
    assert "extend on AMX tiles (bfloat16 QK^T and PV, float32 softmax) over bfloat16 KV" in line
    dot = replace(plan, isa="avx512bf16").summary()
    assert "extend on VDPBF16PS (bfloat16 QK^T and PV, float32 softmax) over bfloat16 KV" in dot
    torch_extend = KernelPlan("avx2", frozenset(OPS) - {"extend_attention"}, kv_dtype="fp8_e4m3")
    assert "extend on torch over fp8_e4m3 KV" in torch_extend.summary()


@pytest.mark.parametrize(("isa", "extend"), [
    ("amx", "extend on AMX tiles (bfloat16 QK^T and PV, float32 softmax) over bfloat16 KV"),
    ("avx512bf16", "extend on VDPBF16PS (bfloat16 QK^T and PV, float32 softmax) over bfloat16 KV"),
    ("avx512", "extend on the float32 kernel over bfloat16 KV"),
])  # fmt: skip
def test_startup_line_for_a_forced_variant(
    tiny_d64: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    isa: str, extend: str,
) -> None:  # fmt: skip
    if isa not in cpu_build.supported_isas():
        pytest.skip(f"this CPU cannot run the {isa} variant")
    monkeypatch.setenv("RADIXRT_CPU_ISA", isa)
    with caplog.at_level(logging.INFO, logger="radixrt"):
        with Engine(str(tiny_d64), max_total_tokens=512, cpu_kernels="on",
                    kv_cache_dtype="bfloat16"):  # fmt: skip
            pass
    line = next(r.getMessage() for r in caplog.records if "modules swapped" in r.getMessage())
    assert f"CPU kernels ({isa}," in line
    on = (
        "the kernel (float32 arithmetic)"
        if isa == "avx512"
        else "VDPBF16PS (bfloat16 QK^T and PV, float32 softmax)"
    )
    assert f"attention: decode on {on} over bfloat16 KV, " + extend in line
    assert "KV bfloat16;" in line
