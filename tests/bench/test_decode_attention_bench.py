"""The decode attention benchmark's cases run and time both sides (no timing is asserted)."""

from __future__ import annotations

import pytest
import torch

from radixrt.model.cpu import kernels as ck


@pytest.mark.skipif(not ck.available(), reason="no C compiler for the CPU kernels")
@pytest.mark.parametrize("shared", [0, 70])
@pytest.mark.parametrize("kv", ["float32", "bfloat16"])
def test_case_times_kernel_and_torch(shared: int, kv: str) -> None:
    from benchmarks.micro import decode_attention as bench

    got = bench._case(3, 80, shared, kv)
    both = kv == "bfloat16" and ck.bf16_extend_takes(torch.bfloat16, 64)
    assert set(got) == {"kernel", "torch"} | ({"kernel_f32"} if both else set())
    assert all(t > 0 for t in got.values())
