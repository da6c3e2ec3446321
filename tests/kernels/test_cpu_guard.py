"""The CPU kernel guard (radixrt/model/cpu/guard.py): `--cpu-kernels auto` times each kernel against
torch on the model's shapes once per machine, keeps the faster per op, and the model runs the
plan it made (a linear layer may run the kernel at decode sizes and torch at prefill sizes)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from conftest import assert_pool_whole

from radixrt import Engine
from radixrt.core.config import ModelConfig
from radixrt.model.cpu import guard
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu.fused_layer import FUSED_EXTEND_ROWS
from radixrt.model.cpu.layers import PackedLinear
from radixrt.model.cpu.timing import Shapes
from radixrt.model.layers.rotary import QKVRotary

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")

PROMPTS = ["The capital of France is", "1, 2, 3, 4,"]
PARAMS = {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True, "return_logprob": True}
LONG = [5 + (i * 37) % 200 for i in range(FUSED_EXTEND_ROWS + 20)]  # one extend past the bound


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RADIXRT_CACHE", str(tmp_path))
    return tmp_path


def _shapes(path: Path) -> Shapes:
    with Engine(str(path), max_total_tokens=512, cpu_kernels="off") as e:
        return Shapes.of(e.scheduler.runner.model)


def test_shapes_of_a_model(tiny_llama_path: Path) -> None:
    s = _shapes(tiny_llama_path)
    assert any(head for *_, head in s.linears) and any(not head for *_, head in s.linears)
    assert s.norms and s.mlps and s.heads
    for k, n, _, _ in s.linears:
        assert tuple(s.weights[(k, n)].shape) == (n, k)  # the model's own weights


def test_auto_measures_once_then_reads_the_plan(
    tiny_llama_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guard, "BUSY", float("inf"))  # kept however busy the machine is
    shapes = _shapes(tiny_llama_path)
    plan = guard.plan_for("auto", shapes)
    assert plan.isa == ck.isa() and plan.kernels <= frozenset(guard.OPS)
    assert set(plan.timings) == set(guard.OPS) if ck.has_extend_attention() else True
    for op, (t_kernel, t_torch) in plan.timings.items():  # the rule, op by op
        assert (op in plan.kernels) == (t_kernel <= t_torch * guard.TIE)
    path = guard.plan_path(plan.isa, shapes)
    assert path.parent == cache / "kernels" / "plans" and path.is_file()

    def no_timing(*args: object) -> None:
        raise AssertionError("a kept plan is not measured again")

    monkeypatch.setattr(guard, "time_ops", no_timing)
    assert guard.plan_for("auto", shapes) == plan
    path.write_text("{not json")  # a damaged plan is measured again
    with pytest.raises(AssertionError, match="not measured again"):
        guard.plan_for("auto", shapes)


class _Others:
    """A stand-in for OtherLoad: other processes took `share` of the cores."""

    share = 0.0

    def fraction(self) -> float:
        return self.share


@pytest.mark.parametrize(("share", "kept"), [(0.0, True), (0.05, True), (0.5, False)])
def test_a_plan_timed_on_a_busy_machine_is_not_kept(
    tiny_llama_path: Path,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    share: float,
    kept: bool,
) -> None:
    """Others above BUSY of the cores during the timing: the plan serves this run (it is the
    measured one) but is not written, so the next start times again."""
    shapes = _shapes(tiny_llama_path)
    monkeypatch.setattr(guard, "time_ops", _fake_timings(set()))
    monkeypatch.setattr(_Others, "share", share)
    monkeypatch.setattr(guard, "OtherLoad", _Others)
    with caplog.at_level(logging.WARNING, logger="radixrt"):
        plan = guard.plan_for("auto", shapes)
    assert plan.kernels == frozenset(plan.timings)  # every kernel won its (fake) race
    assert guard.plan_path(plan.isa, shapes).is_file() == kept
    assert ("is not kept" in caplog.text) == (not kept)


def test_on_off_and_bad_modes(tiny_llama_path: Path) -> None:
    shapes = _shapes(tiny_llama_path)
    assert guard.plan_for("off", shapes) == guard.KernelPlan()
    assert not guard.KernelPlan().any and "off" in guard.KernelPlan().summary()
    on = guard.plan_for("on", shapes)
    assert on.fuses_decode_layers and on.uses("linear_prefill")
    with pytest.raises(ValueError, match="cpu_kernels must be one of"):
        guard.plan_for("fast", shapes)
    with pytest.raises(ValueError, match="cpu_kernels must be one of"):
        ModelConfig(cpu_kernels="fast")


def _fake_timings(slower: set[str]):
    """time_ops as if torch were twice as fast for the ops in `slower`, and half elsewhere."""

    def fake(shapes: Shapes, ops: frozenset[str], decode_rows: int) -> dict:
        return {op: (2.0, 1.0) if op in slower else (1.0, 2.0) for op in ops}

    return fake


def _generate(path: Path, mode: str) -> tuple[list[dict], list[str], guard.KernelPlan]:
    with Engine(str(path), max_total_tokens=2048, cpu_kernels=mode) as e:
        runner = e.scheduler.runner
        outs = e.generate(PROMPTS, PARAMS)
        outs.append(e.generate(PROMPTS[0], PARAMS))  # a decode batch of one row
        fused = [m for m in runner.model.model.layers if type(m).__name__ == "FusedDecodeLayer"]
        bounded = not runner.cpu_kernels.uses("linear_prefill")
        ext = runner.cpu_kernels.uses("extend_attention")  # extends wholly on the kernels
        if fused:  # short prompts' extends run as one call, whatever the plan for prefill
            assert all(m.extend_calls > 0 for m in fused) == ext
            want = FUSED_EXTEND_ROWS if bounded else 1 << 62
            assert all(m.fuse_extend_rows == want for m in fused)
        calls = fused[0].extend_calls if fused else 0
        outs.append(e.generate(input_ids=LONG, sampling_params=PARAMS))
        if fused:  # past the bound, prefill-sized linears run where the plan puts them
            ran_fused = fused[0].extend_calls > calls
            assert ran_fused == (not bounded and ext)
        layers = [type(m).__name__ for m in runner.model.model.layers]
        linears = [m for m in runner.model.modules() if isinstance(m, PackedLinear)]
        if runner.cpu_kernels.uses("linear_decode"):
            assert linears and all(m.small for m in linears)
            assert all(m.large == runner.cpu_kernels.uses("linear_prefill") for m in linears)
            assert all((m.weight is None) == (m.small and m.large) for m in linears)
        rotaries = [m for m in runner.model.modules() if type(m) is QKVRotary]
        assert bool(rotaries) != runner.cpu_kernels.uses("rotary")
        assert_pool_whole(e)
        return outs, layers, runner.cpu_kernels


@pytest.mark.parametrize(
    "slower",
    [{"linear_prefill", "extend_attention"}, {"rotary"}, {"decode_attention"}, set()],
    ids=["prefill-on-torch", "rotary-on-torch", "decode-attention-on-torch", "all-kernels"],
)
def test_a_partial_plan_runs_and_matches_torch(
    tiny_llama_path: Path,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    slower: set[str],
) -> None:
    monkeypatch.setattr(guard, "time_ops", _fake_timings(slower))
    monkeypatch.setattr(guard, "BUSY", float("inf"))  # kept however busy the machine is
    with caplog.at_level(logging.INFO, logger="radixrt"):
        outs, layers, plan = _generate(tiny_llama_path, "auto")
    assert plan.kernels == frozenset(guard.OPS) - slower - (
        set() if ck.has_extend_attention() else {"extend_attention"}
    )
    line = next(r.getMessage() for r in caplog.records if "CPU kernels (" in r.getMessage())
    assert f"({plan.isa}," in line and (("torch for" in line) == bool(slower))
    fused = not slower & guard.FUSED_DECODE_OPS
    assert all((name == "FusedDecodeLayer") == fused for name in layers)
    kept = json.loads(next((cache / "kernels" / "plans").glob("*.json")).read_text())
    assert set(kept["kernels"]) == plan.kernels
    ref, _, _ = _generate(tiny_llama_path, "off")
    for a, b in zip(outs, ref):
        assert a["output_ids"] == b["output_ids"]
        la = [x[0] for x in a["meta_info"]["output_token_logprobs"]]
        lb = [x[0] for x in b["meta_info"]["output_token_logprobs"]]
        assert la == pytest.approx(lb, abs=1e-4)


def test_attention_is_timed_over_the_kv_dtype(tiny_llama_path: Path, cache: Path) -> None:
    """A bfloat16 or fp8 pool is its own plan (attention timed over its K/V on both sides)."""
    import dataclasses

    import torch

    from radixrt.model.cpu.timing import time_ops

    shapes = _shapes(tiny_llama_path)
    paths = {guard.plan_path("amx", shapes)}
    for kv in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        narrow = dataclasses.replace(shapes, kv_dtype=kv)
        paths.add(guard.plan_path("amx", narrow))
        ops = frozenset(
            {"decode_attention"} | ({"extend_attention"} if ck.has_extend_attention() else set())
        )
        timings = time_ops(narrow, ops, guard.DECODE_ROWS)
        assert set(timings) == ops and all(t > 0 for pair in timings.values() for t in pair)
    assert len(paths) == 4
