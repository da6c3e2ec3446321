"""float32 CPU versions of the model's layers, running radixrt's C kernels (csrc/cpu).

`use_cpu_kernels(model, plan)` swaps, after the weights are loaded, every nn.Linear, RMSNorm,
GatedActivation("silu") and QKVRotary whose op the plan (guard.py) runs on the kernels for the
module below that computes the same thing with them; everything else (embedding,
tensor-parallel layers, attention) stays. The swap is all or nothing per module type, so the
forward code has no per-call switches, except PackedLinear's one choice by row count where
the plan keeps the kernel for decode sizes and torch for prefill sizes (or the reverse).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixrt.cpu import kernels as ck
from radixrt.cpu.guard import DECODE_ROWS, OPS, KernelPlan
from radixrt.layers.activation import GatedActivation
from radixrt.layers.norm import RMSNorm
from radixrt.layers.rotary import QKVRotary


class PackedLinear(nn.Module):
    """y = x W^T + b with W (out, in) stored packed for the C GEMM: float32 panels
    (pack_weight), or with `int8` weight-only int8 panels and one scale per output column
    (pack_weight_int8; always the kernel, whatever the sizes).

    `small` / `large`: whether calls of at most / more than DECODE_ROWS rows run the kernel;
    the other size runs F.linear on the original float weight, which is kept only then (else
    the packed copy is the only one: loading is over when this is made)."""

    def __init__(
        self, linear: nn.Linear, small: bool = True, large: bool = True, int8: bool = False
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.small, self.large = (True, True) if int8 else (small, large)
        scale = None
        if int8:
            packed, scale = ck.pack_weight_int8(linear.weight)
        else:
            packed = ck.pack_weight(linear.weight)
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scale", scale, persistent=False)
        bias = None if linear.bias is None else linear.bias.detach().float().contiguous()
        self.register_buffer("bias", bias, persistent=False)
        weight = None if self.small and self.large else linear.weight.detach()
        self.register_buffer("weight", weight, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if self.weight is not None and (x2.shape[0] <= DECODE_ROWS) != self.small:
            return F.linear(x, self.weight, self.bias)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        y = ck.linear(x2, self.packed, self.out_features, self.bias, self.scale)
        return y.view(*lead, self.out_features)


class CpuRMSNorm(nn.Module):
    """RMSNorm with the fused residual add; with a residual, x and residual are updated in
    place (the decoder layers own both and use neither afterwards)."""

    def __init__(self, norm: RMSNorm) -> None:
        super().__init__()
        self.weight = norm.weight
        self.variance_epsilon = norm.variance_epsilon

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            out = x.contiguous().clone()  # x may also be the caller's residual: not in place
            ck.rmsnorm_(out, self.weight, self.variance_epsilon)
            return out
        x, residual = x.contiguous(), residual.contiguous()
        ck.rmsnorm_(x, self.weight, self.variance_epsilon, residual)
        return x, residual


class CpuSiluMul(nn.Module):
    """silu(gate) * up in one pass over gate_up (T, 2I)."""

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        return ck.silu_mul(gate_up.contiguous())


class CpuQKVRotary(nn.Module):
    """QKVRotary rotating q and k in place inside the fresh qkv projection output."""

    def __init__(self, rotary: QKVRotary) -> None:
        super().__init__()
        self.head_dim, self.sizes = rotary.head_dim, rotary.sizes

    def forward(
        self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = qkv.split(self.sizes, dim=-1)
        ck.rotary_(q, k, cos, sin, self.head_dim)
        return q, k, v


def _swap(module: nn.Module, plan: KernelPlan, int8: bool) -> nn.Module | None:
    kind = type(module)
    if kind is nn.Linear and int8:
        return PackedLinear(module, int8=True)  # type: ignore[arg-type]
    if kind is nn.Linear:
        small, large = plan.uses("linear_decode"), plan.uses("linear_prefill")
        return PackedLinear(module, small, large) if small or large else None  # type: ignore[arg-type]
    if kind is RMSNorm and plan.uses("rmsnorm"):
        return CpuRMSNorm(module)  # type: ignore[arg-type]
    if kind is GatedActivation and module.name == "silu" and plan.uses("silu_mul"):  # type: ignore[attr-defined]
        return CpuSiluMul()
    if kind is QKVRotary and module.rotary_dim == module.head_dim and plan.uses("rotary"):  # type: ignore[attr-defined]
        return CpuQKVRotary(module)  # type: ignore[arg-type]
    return None


def use_cpu_kernels(model: nn.Module, plan: KernelPlan | None = None, int8: bool = False) -> int:
    """Swap the model's layers for their kernel versions in place as `plan` says (None: every
    kernel); with `int8` every nn.Linear becomes weight-only int8 (quantized here, from the
    loaded float weights). Returns how many were swapped. The model must be float32 on the CPU
    with its weights loaded."""
    plan = plan or KernelPlan(ck.isa(), frozenset(OPS))
    swaps = []
    for parent in model.modules():
        for name, child in parent.named_children():
            new = _swap(child, plan, int8)
            if new is not None:
                swaps.append((parent, name, new))
    for parent, name, new in swaps:
        setattr(parent, name, new)
    return len(swaps)
