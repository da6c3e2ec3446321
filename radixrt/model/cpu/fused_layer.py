"""Llama decoder layers whose decode steps run as one C call (csrc/cpu/layer_f32.c).

After `use_cpu_kernels` has swapped a layer's parts for their kernel versions, a decode batch
spends more time dispatching eleven module calls per layer from Python than in most of the
small kernels; `FusedDecodeLayer` runs the same kernels in the same order from one call.
Other batches (prefill, mixed) run the wrapped layer's modules. The runner wraps the layers
only when its attention backend says a fused layer may stand in for it
(`BaseAttnBackend.fuses_cpu_decode_layers`), once, at start-up.
"""

from __future__ import annotations

import torch
from torch import nn

from radixrt.core.forward_batch import ForwardBatch, ForwardMode
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu.layers import CpuQKVRotary, CpuRMSNorm, CpuSiluMul, PackedLinear


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


class FusedDecodeLayer(nn.Module):
    """Wraps a LlamaDecoderLayer whose parts are all kernel modules (see `can_fuse`)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer
        attn, mlp = layer.self_attn, layer.mlp
        spec = attn.attn.layer  # AttentionLayer: this layer's heads, scaling and window
        self.spec, self.layer_id, self.scaling = spec, spec.layer_id, spec.scaling
        self.hidden = attn.qkv_proj.in_features
        self.eps = float(layer.input_layernorm.variance_epsilon)
        self.dims = (spec.num_heads, spec.num_kv_heads, spec.head_dim, mlp.down_proj.in_features)
        # Weight addresses, fixed for the module's life (the tensors are owned by `layer`).
        self.norm_ptrs = (
            _ptr(layer.input_layernorm.weight),
            _ptr(layer.post_attention_layernorm.weight),
        )
        self.linear_ptrs = tuple(  # per linear: packed weight, bias, int8 scales (or None)
            p
            for lin in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
            for p in (_ptr(lin.packed), _ptr(lin.bias), _ptr(lin.scale))
        )
        # 1: every linear holds bfloat16 panels (`can_fuse` admits one weight type per layer)
        self.bf16_weights = int(attn.qkv_proj.weights == "bfloat16")
        hq, hkv, d, inter = self.dims
        self.scratch_per_row = (hq + 2 * hkv) * d + hq * d + 3 * inter

    @staticmethod
    def can_fuse(layer: nn.Module) -> bool:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attn is None or mlp is None or not getattr(layer, "cpu_fusable", False):
            return False
        linears = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
        return (
            all(type(m) is PackedLinear and m.small for m in linears)
            and len({m.weights for m in linears}) == 1
            and type(layer.input_layernorm) is CpuRMSNorm
            and type(layer.post_attention_layernorm) is CpuRMSNorm
            and layer.input_layernorm.variance_epsilon
            == layer.post_attention_layernorm.variance_epsilon
            and type(mlp.act_fn) is CpuSiluMul
            and type(attn.rotary) is CpuQKVRotary
        )

    def forward(
        self,
        rope: tuple[torch.Tensor, torch.Tensor],
        x: torch.Tensor,
        residual: torch.Tensor | None,
        fb: ForwardBatch,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if fb.mode is not ForwardMode.DECODE:
            return self.layer(rope, x, residual, fb)
        x = x.contiguous()
        residual = torch.zeros_like(x) if residual is None else residual.contiguous()
        cos, sin = rope
        k_buf, v_buf = fb.token_to_kv_pool.get_kv_buffer(self.layer_id)
        kv_kind = ck.KV_KINDS[ck.kv_suffix(k_buf, v_buf)]  # ValueError for an unread dtype
        # Which keys each request reads, and where its new K/V go: its window's, through the
        # window pool where the layer's K/V live there (cpu/attention.py).
        view = fb.attn_backend.decode_view(self.spec, fb)  # type: ignore[attr-defined]
        table = view.table
        b = x.shape[0]
        scratch = torch.empty(b * self.scratch_per_row, dtype=torch.float32)
        ck.lib().rt_decode_layer_f32(
            x.data_ptr(),
            residual.data_ptr(),
            b,
            self.hidden,
            *self.norm_ptrs,
            self.eps,
            *self.linear_ptrs,
            *self.dims,
            cos.data_ptr(),
            sin.data_ptr(),
            k_buf.data_ptr(),
            v_buf.data_ptr(),
            view.out_loc.data_ptr(),
            table.data_ptr(),
            table.stride(0),
            view.rows.data_ptr(),
            view.seq_lens.data_ptr(),
            self.scaling,
            scratch.data_ptr(),
            self.bf16_weights,
            kv_kind,
        )
        return x, residual


def fuse_decode_layers(layers: nn.ModuleList) -> int:
    """Wrap every layer that `FusedDecodeLayer.can_fuse`; returns how many were wrapped."""
    count = 0
    for i, layer in enumerate(layers):
        if FusedDecodeLayer.can_fuse(layer):
            layers[i] = FusedDecodeLayer(layer)
            count += 1
    return count
