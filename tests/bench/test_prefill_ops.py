"""benchmarks/micro/prefill_ops.py: the kernels' timing wrappers and the report's arithmetic
(the benchmark itself loads the default model and is run by hand)."""

from __future__ import annotations

import collections

import torch

from benchmarks.micro import prefill_ops
from radixrt.model.cpu import kernels as ck


def test_instrument_times_each_call_by_shape_and_undoes() -> None:
    calls = []
    original = ck.linear_silu
    try:
        ck.linear_silu = lambda x, packed, n, bias=None: calls.append(n) or x  # type: ignore[assignment]
        fake = ck.linear_silu
        times: dict[str, float] = collections.defaultdict(float)
        undo = prefill_ops.instrument(times)
        x = torch.zeros(4, 8)
        assert ck.linear_silu(x, None, 64) is x
        ck.linear_silu(x, None, 64)
        assert calls == [64, 64]
        assert list(times) == ["linear+silu 8->64->32"] and times["linear+silu 8->64->32"] >= 0
        undo()
        assert ck.linear_silu is fake
    finally:
        ck.linear_silu = original  # type: ignore[assignment]


def test_report_fraction_is_the_engine_benchmarks() -> None:
    # 1000 tokens in 0.5 s = 2000 tok/s; probe 1000 GFLOP/s over 2 x 1e8 params = 5000 tok/s
    text = prefill_ops.report(1000, 0.5, 1000.0, 10**8, {"linear 8->64": 0.3}, "bfloat16")
    assert "fraction 0.40" in text
    assert "| linear 8->64 | 300.0 | 60.0% |" in text
    assert "| the rest (Python, embedding, sampling) | 200.0 | 40.0% |" in text


def test_fused_layers_are_timed_as_one_row_and_undone() -> None:
    class Layer(torch.nn.Module):
        fuse_extend = True

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    class Plain(torch.nn.Module):  # not fused: left alone
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    layers = [Layer(), Plain()]
    times: dict[str, float] = collections.defaultdict(float)
    undo = prefill_ops.time_fused_layers(layers, times)
    assert layers[0](torch.zeros(2)).tolist() == [1.0, 1.0]
    layers[1](torch.zeros(2))
    assert list(times) == [prefill_ops.FUSED_ROW]
    undo()
    assert "forward" not in vars(layers[0])
