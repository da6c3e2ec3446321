"""The gate_up projection and SiLU in one pass (`ck.linear_silu`: csrc/cpu/gemm_amx.c on AMX
tiles, gemm_bf16dot.c on VDPBF16PS) and the MLP wrapper that takes it (`CpuSiluMLP`), on
every ISA variant this CPU runs.

On amx and avx512bf16 the fused pass accumulates every output in the same order as `linear`
and takes the same SiLU as `silu_mul`, so it must equal the two calls bit for bit; every other
variant (and an odd width) answers None and the MLP keeps its two calls. Against float32
torch the bfloat16 rounding of x and W bounds the error: |err| <= 5e-2 on outputs of magnitude
~1 here (measured up to 0.026)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from radixrt.model.cpu import build as cpu_build
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import weight_pack as wp
from radixrt.model.cpu.layers import CpuSiluMLP, PackedLinear, use_cpu_kernels
from radixrt.model.layers.activation import GatedActivation

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")


@pytest.fixture(autouse=True, params=cpu_build.supported_isas())
def isa(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("RADIXRT_CPU_ISA", request.param)
    assert ck.isa() == request.param
    return request.param


# Rows not a multiple of 16 (one A tile, two, a chunk and a tail; 13 and 16: a decode call
# of two VDPBF16PS micro-tiles), K tails, SmolLM2's shape.
@pytest.mark.parametrize("m", [1, 5, 13, 16, 17, 33, 130])
@pytest.mark.parametrize(("n", "k"), [(128, 40), (192, 600), (3072, 576)])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_silu_is_the_two_calls(isa: str, m: int, n: int, k: int, bias: bool) -> None:
    torch.manual_seed(m * 7 + n + k)
    x, w = torch.randn(m, k), torch.randn(n, k) * k**-0.5
    b = torch.randn(n) if bias else None
    packed = wp.pack_weight_bf16(w)
    got = ck.linear_silu(x, packed, n, b)
    if isa not in ck.BF16_DOT_ISAS:
        assert got is None
        return
    assert got is not None
    assert torch.equal(got, ck.silu_mul(ck.linear(x, packed, n, b)))
    gate, up = torch.nn.functional.linear(x, w, b).chunk(2, dim=-1)
    assert (got - torch.nn.functional.silu(gate) * up).abs().max().item() <= 5e-2


def test_linear_silu_declines_a_width_off_the_panels(isa: str) -> None:
    x, w = torch.randn(20, 64), torch.randn(96, 64)  # n/2 = 48: gate and up share a panel
    assert ck.linear_silu(x, wp.pack_weight_bf16(w), 96) is None


class _MLP(nn.Module):
    cpu_gated_silu = True  # forward is down(act(gate_up(x))), as GatedMLP's

    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden, 2 * inter)
        self.act_fn = GatedActivation("silu")
        self.down_proj = nn.Linear(inter, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class _Block(nn.Module):
    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.mlp = mlp


@pytest.mark.parametrize("rows", [3, 70])  # a decode-sized call and a prefill-sized one
def test_mlp_runs_one_pass_on_amx_and_two_elsewhere(isa: str, rows: int) -> None:
    torch.manual_seed(rows)
    block = _Block(_MLP(96, 128))
    x = torch.randn(rows, 96)  # (tokens, hidden), as the decoder layers call it
    want = block.mlp(x)
    use_cpu_kernels(block, weights="bfloat16")
    wrapped = type(block.mlp) is CpuSiluMLP
    assert wrapped == (isa in ck.BF16_DOT_ISAS)
    assert type(block.mlp.gate_up_proj) is PackedLinear  # the fused decode layer reads it
    got = block.mlp(x)
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= 5e-2
    if wrapped:  # the wrapper's one pass against the same modules' two calls
        gate_up, down = block.mlp.gate_up_proj, block.mlp.down_proj
        two = down(block.mlp.act_fn(gate_up(x)))
        assert torch.equal(got, two)


def test_other_mlps_are_left_alone(isa: str) -> None:
    mlp = _MLP(96, 128)
    mlp.cpu_gated_silu = False  # a forward that is not down(act(gate_up(x)))
    block = _Block(mlp)
    use_cpu_kernels(block, weights="bfloat16")
    assert type(block.mlp) is _MLP
    block = _Block(_MLP(96, 128))
    use_cpu_kernels(block, weights="float32")  # float32 panels: no fused pass
    assert type(block.mlp) is _MLP
