"""int8 x int8 linear layers (radixrt/model/cpu/w8a8.py, csrc/cpu/gemm_q8a8.c) on every path
this CPU has (AMX-INT8 tiles, AVX-512 VNNI), each forced, with one activation plane (w8a8) or
two (int8): the kernel equals its torch definition (rows quantized per row, exact int32
sums), stays within 3% / 2% (relative Frobenius error) of float32, the guard times it against
weight-only int8, and a tiny model's prompt logprobs stay close to float32's on either path
or none (weight-only)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cpu_variants import variants

from radixrt import Engine
from radixrt.core.config import ModelConfig
from radixrt.model.cpu import build as cpu_build
from radixrt.model.cpu import guard, w8a8
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import weight_pack as wp
from radixrt.model.cpu.layers import PackedLinear
from radixrt.model.cpu.timing import Shapes

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")

CPU_FLAGS = frozenset(cpu_build.cpu_flags().split())
# The paths each library variant runs on this CPU.
EXPECTED = {
    "amx": ("amx", "vnni"),
    "avx512": ("vnni",) if "avx512_vnni" in CPU_FLAGS else (),
    "avx512bf16": ("vnni",) if "avx512_vnni" in CPU_FLAGS else (),
    "avx2": (),
    "portable": (),
}
VARIANT_PATHS = [
    (isa, path) for isa in variants() for path in EXPECTED[isa]
]  # fmt: skip


@pytest.fixture(autouse=True)
def _auto_isa(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADIXRT_CPU_ISA", raising=False)
    monkeypatch.delenv(w8a8.PATH_ENV, raising=False)


@pytest.mark.parametrize("isa", cpu_build.supported_isas())  # every variant: its paths
def test_each_variant_reports_its_paths(isa: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RADIXRT_CPU_ISA", isa)
    assert w8a8.paths() == EXPECTED[isa]
    assert w8a8.best_path() == (EXPECTED[isa][0] if EXPECTED[isa] else None)
    if not EXPECTED[isa]:  # no W8A8 here: asking for a path is refused with a message
        q8, scale = wp.pack_weight_int8(torch.randn(40, 64))
        with pytest.raises(ValueError, match="does not run here"):
            w8a8.linear(torch.randn(3, 64), w8a8.pack(q8, 40, 64), scale, 40, path="amx")


@pytest.mark.parametrize(("isa", "path"), VARIANT_PATHS)
@pytest.mark.parametrize("planes", [1, 2])
@pytest.mark.parametrize("m", [1, 5, 17, 200])
@pytest.mark.parametrize(("n", "k"), [(70, 33), (576, 1536), (40, 600)])
def test_w8a8_matches_its_definition_and_float32(
    isa: str, path: str, planes: int, m: int, n: int, k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RADIXRT_CPU_ISA", isa)
    torch.manual_seed(m * 1000 + n + k)
    w, b = torch.randn(n, k) * 0.05, torch.randn(n)
    w[3] = 0.0  # an all-zero weight column
    x = torch.randn(m, k + 7)[:, 3 : 3 + k]  # rows k + 7 apart
    special = (m // 2, 1) if m >= 5 else ()
    if special:
        x[m // 2] = 0.0  # an all-zero row: its output is the bias
        x[1, 0] = 40.0  # an outlier: its row's scale alone grows
    q8, scale = wp.pack_weight_int8(w)
    got = w8a8.linear(x, w8a8.pack(q8, n, k), scale, n, b, path, planes)
    want, exact = w8a8.linear_ref(x, w, b, planes)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if special:
        torch.testing.assert_close(got[m // 2], b)
    rows = [i for i in range(m) if i not in special]
    err = (got[rows] - exact[rows]).norm() / (exact[rows] - b).norm()
    assert err < (0.03 if planes == 1 else 0.02), err  # the weights' rounding: about 0.007


def test_bad_settings_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="quantization w8a8 runs on radixrt's CPU kernels"):
        ModelConfig(quantization="w8a8", cpu_kernels="off")
    monkeypatch.setenv(w8a8.PATH_ENV, "sse")
    with pytest.raises(ValueError, match="must be auto, none, amx or vnni"):
        w8a8.best_path()
    monkeypatch.setenv(w8a8.PATH_ENV, "none")
    assert w8a8.best_path() is None
    with pytest.raises(ValueError, match="not int8 panels"):
        w8a8.pack(torch.zeros(2, 64, 32), 40, 64)


@pytest.mark.skipif(not VARIANT_PATHS, reason="no W8A8 path on this CPU")
def test_the_guard_times_w8a8_against_weight_only(
    tiny_llama_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RADIXRT_CACHE", str(tmp_path))
    monkeypatch.setattr(guard, "BUSY", float("inf"))  # kept however busy the machine is
    with Engine(str(tiny_llama_path), max_total_tokens=512, cpu_kernels="off") as e:
        shapes = Shapes.of(e.scheduler.runner.model)
    best = w8a8.best_path()
    assert best is not None
    plan = guard.plan_for("auto", shapes, fixed=guard.LINEAR_OPS, w8a8=best, a8_planes=2)
    assert plan.w8a8 == best and plan.a8_planes == 2 and guard.LINEAR_OPS <= plan.kernels
    for op in ("w8a8_decode", "w8a8_prefill"):
        t_a8, t_wo = plan.timings[op]
        assert (op in plan.kernels) == (t_a8 < t_wo)
    assert "int8 linear layers: decode " in plan.summary()
    kept = guard.plan_for("auto", shapes, fixed=guard.LINEAR_OPS, w8a8=best, a8_planes=2)
    assert kept == plan and kept.a8_planes == 2
    one = guard.plan_path(plan.isa, shapes, guard.LINEAR_OPS, best, 1)
    assert one != guard.plan_path(plan.isa, shapes, guard.LINEAR_OPS, best, 2)
    on = guard.plan_for("on", shapes, fixed=guard.LINEAR_OPS, w8a8=best)
    assert {"w8a8_decode", "w8a8_prefill"} <= on.kernels
    assert f"prefill int8 x int8 on {best.upper()}" in on.summary()


PROMPT = "The history of the city begins with a small settlement by the river, " * 3
PARAMS = {"max_new_tokens": 4, "temperature": 0.0, "ignore_eos": True, "return_logprob": True}


def _prompt_logprobs(out: dict) -> torch.Tensor:
    return torch.tensor([x[0] for x in out["meta_info"]["input_token_logprobs"][1:]])


@pytest.mark.parametrize(
    ("quantization", "path"),
    [("int8", p) for p in (*w8a8.PATHS, "none")] + [("w8a8", p) for p in w8a8.PATHS],
)
def test_tiny_model_stays_close_to_float32(
    quantization: str, path: str, tiny_llama_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path != "none" and path not in w8a8.paths():
        pytest.skip(f"no {path} W8A8 path on this CPU")
    params = {**PARAMS, "logprob_start_len": 0}
    with Engine(str(tiny_llama_path), max_total_tokens=1024, cpu_kernels="on") as e:
        ref = e.generate(PROMPT, params)
    monkeypatch.setenv(w8a8.PATH_ENV, path)
    with Engine(
        str(tiny_llama_path), max_total_tokens=1024, quantization=quantization, cpu_kernels="on"
    ) as e:
        linears = [m for m in e.scheduler.runner.model.modules() if isinstance(m, PackedLinear)]
        assert linears and all(m.w8a8 == ("" if path == "none" else path) for m in linears)
        assert all(m.a8_planes == (2 if quantization == "int8" else 1) for m in linears)
        out = e.generate(PROMPT, params)
    assert len(out["output_ids"]) == 4
    lp, lr = _prompt_logprobs(out), _prompt_logprobs(ref)
    assert len(lp) == len(lr) > 16  # a prefill-sized call
    assert (lp - lr).abs().max() < (0.15 if quantization == "w8a8" else 0.1), (lp - lr).abs().max()


def test_every_amx_kernel_loads_the_one_tile_configuration() -> None:
    """The AMX tile configuration is written once (amx_tiles.h): every kernel on tiles includes
    it and none loads a configuration of its own."""
    src = cpu_build.CPU_SRC_DIR
    loaders = sorted(p.name for p in src.iterdir() if "_tile_loadconfig" in p.read_text())
    assert loaders == ["amx_tiles.h"]
    for name in ("gemm_amx.c", "gemm_q8a8.c", "extend_attention_amx.c"):
        text = (src / name).read_text()
        assert '#include "amx_tiles.h"' in text and "rt_configure_tiles()" in text, name
