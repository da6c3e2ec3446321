"""float32 CPU versions of the model's layers, running radixrt's C kernels (csrc/cpu); linear
layers may hold their weights as float32, bfloat16 or int8.

`use_cpu_kernels(model, plan)` swaps, after the weights are loaded, every nn.Linear, RMSNorm,
GatedActivation("silu") and QKVRotary whose op the plan (guard.py) runs on the kernels for the
module below that computes the same thing with them (and then, on AMX with bfloat16 weights,
wraps each gated SiLU MLP to run its gate_up projection and activation in one pass);
everything else (embedding, tensor-parallel layers, attention) stays. The swap is all or
nothing per module type, so the forward code has no per-call switches, except the one choice
by row count (PackedLinear's, and CpuSiluMLP's following it) where the plan keeps the kernel
for decode sizes and torch for prefill sizes (or the reverse).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import w8a8 as w8a8_kernel
from radixrt.model.cpu import weight_pack as wp
from radixrt.model.cpu.guard import DECODE_ROWS, OPS, KernelPlan
from radixrt.model.layers.activation import GatedActivation
from radixrt.model.layers.norm import RMSNorm
from radixrt.model.layers.rotary import QKVRotary

# The packed weight types of PackedLinear (`weights`).
WEIGHT_TYPES = ("float32", "bfloat16", "int8")


class PackedLinear(nn.Module):
    """y = x W^T + b with W (out, in) stored packed for the C GEMM, in float32 activations.
    `weights` is the packed panels' type: "float32" (pack_weight), "bfloat16"
    (pack_weight_bf16: half the bytes, widened in registers) or "int8" (pack_weight_int8:
    weight-only int8 with one scale per output column; always the kernel, whatever the sizes).
    With int8 weights, `w8a8` names the W8A8 path (w8a8.py) that calls of the sizes in
    `a8_sizes` ("decode", "prefill") take instead of the weight-only kernel: x quantized per
    row (`a8_planes` 2: and its rounding residual), int8 x int8 on AMX-INT8 tiles or VNNI;
    the weight-only panels stay (for the other size; the fused layers read both).

    `small` / `large`: whether calls of at most / more than DECODE_ROWS rows run the kernel;
    the other size runs torch on an (out, in) copy of the weight (`wp.torch_weight`), kept only
    then (else the packed copy is the only one: loading is over when this is made); with
    neither size on the kernel no panels are kept at all."""

    def __init__(
        self,
        linear: nn.Linear,
        small: bool = True,
        large: bool = True,
        weights: str = "float32",
        w8a8: str = "",
        a8_sizes: frozenset[str] = frozenset(),
        a8_planes: int = 1,
    ) -> None:
        super().__init__()
        if weights not in WEIGHT_TYPES:
            raise ValueError(f"weights must be one of {WEIGHT_TYPES}, got {weights!r}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weights = weights
        self.small, self.large = (True, True) if weights == "int8" else (small, large)
        packed = scale = None
        if weights == "int8":
            packed, scale = wp.pack_weight_int8(linear.weight)
        elif weights == "bfloat16" and (self.small or self.large):
            packed = wp.pack_weight_bf16(linear.weight)
        elif weights == "float32":
            packed = wp.pack_weight(linear.weight)
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scale", scale, persistent=False)
        bias = None if linear.bias is None else linear.bias.detach().float().contiguous()
        self.register_buffer("bias", bias, persistent=False)
        weight = None
        if not (self.small and self.large):
            weight = wp.torch_weight(linear.weight.detach(), weights)
        self.register_buffer("weight", weight, persistent=False)
        self.w8a8 = w8a8 if weights == "int8" and a8_sizes else ""
        self.a8_small, self.a8_large = "decode" in a8_sizes, "prefill" in a8_sizes
        self.a8_planes = a8_planes
        a8 = (
            None if not self.w8a8 else w8a8_kernel.pack(packed, self.out_features, self.in_features)
        )
        self.register_buffer("a8_packed", a8, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if not (self.small if x2.shape[0] <= DECODE_ROWS else self.large):
            return self._torch(x)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        if self.w8a8 and (self.a8_small if x2.shape[0] <= DECODE_ROWS else self.a8_large):
            a8 = w8a8_kernel.linear(
                x2,
                self.a8_packed,
                self.scale,
                self.out_features,
                self.bias,
                self.w8a8,
                self.a8_planes,
            )
            return a8.view(*lead, self.out_features)
        y = ck.linear(x2, self.packed, self.out_features, self.bias, self.scale)
        return y.view(*lead, self.out_features)

    def _torch(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        assert w is not None
        if w.dtype == torch.float32:
            return F.linear(x, w, self.bias)
        y = F.linear(x.to(w.dtype), w).float()
        return y if self.bias is None else y.add_(self.bias)


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


class CpuSiluMLP(nn.Module):
    """A gated SiLU MLP (down(silu(gate) * up), gate and up one bfloat16 PackedLinear) whose
    first two steps run as one AMX pass (`ck.linear_silu`) wherever the gate_up projection
    runs the kernel for that row count: the (T, 2I) product is never written. Holds the
    wrapped MLP's own modules under their names (the fused decode layer reads them)."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.gate_up_proj, self.act_fn, self.down_proj = mlp.gate_up_proj, mlp.act_fn, mlp.down_proj

    @staticmethod
    def fits(mlp: nn.Module) -> bool:
        """Whether `mlp` declares that contract and holds the modules it needs, on a variant
        with the one-pass kernel (AMX tiles or VDPBF16PS)."""
        gate_up = getattr(mlp, "gate_up_proj", None)
        return (
            getattr(mlp, "cpu_gated_silu", False)
            and type(gate_up) is PackedLinear
            and gate_up.weights == "bfloat16"
            and gate_up.packed is not None
            and gate_up.out_features % 64 == 0
            and type(getattr(mlp, "act_fn", None)) is CpuSiluMul
            and ck.bf16_dot()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj
        x2 = x.reshape(-1, gate_up.in_features)
        h = None
        if gate_up.small if x2.shape[0] <= DECODE_ROWS else gate_up.large:
            h = ck.linear_silu(x2.contiguous(), gate_up.packed, gate_up.out_features, gate_up.bias)
        if h is None:
            h = self.act_fn(gate_up(x2))
        y = self.down_proj(h)
        return y.view(*x.shape[:-1], y.shape[-1])


def _swap(module: nn.Module, plan: KernelPlan, weights: str) -> nn.Module | None:
    kind = type(module)
    if kind is nn.Linear:
        small, large = plan.uses("linear_decode"), plan.uses("linear_prefill")
        if weights == "float32" and not (small or large):
            return None  # torch's own layer, as loaded
        a8 = frozenset(
            size
            for size, op in (("decode", "w8a8_decode"), ("prefill", "w8a8_prefill"))
            if plan.uses(op)
        )
        return PackedLinear(module, small, large, weights, plan.w8a8, a8, plan.a8_planes)  # type: ignore[arg-type]
    if kind is RMSNorm and plan.uses("rmsnorm"):
        return CpuRMSNorm(module)  # type: ignore[arg-type]
    if kind is GatedActivation and module.name == "silu" and plan.uses("silu_mul"):  # type: ignore[attr-defined]
        return CpuSiluMul()
    if kind is QKVRotary and module.rotary_dim == module.head_dim and plan.uses("rotary"):  # type: ignore[attr-defined]
        return CpuQKVRotary(module)  # type: ignore[arg-type]
    return None


def use_cpu_kernels(
    model: nn.Module, plan: KernelPlan | None = None, weights: str = "float32"
) -> int:
    """Swap the model's layers for their kernel versions in place as `plan` says (None: every
    kernel); with `weights` "int8" or "bfloat16" every nn.Linear is converted here, from the
    loaded float32 weights (int8: weight-only, always on the kernel; bfloat16: on the kernel
    or on torch's bfloat16 matmul per size, as the plan says). Returns how many were swapped.
    The model must be float32 on the CPU with its weights loaded."""
    plan = plan or KernelPlan(ck.isa(), frozenset(OPS))
    swaps = []
    for parent in model.modules():
        for name, child in parent.named_children():
            new = _swap(child, plan, weights)
            if new is not None:
                swaps.append((parent, name, new))
    for parent, name, new in swaps:
        setattr(parent, name, new)
    mlps = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if CpuSiluMLP.fits(child)
    ]
    for parent, name, child in mlps:
        setattr(parent, name, CpuSiluMLP(child))
    return len(swaps) + len(mlps)
