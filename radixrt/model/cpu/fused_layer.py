"""Llama decoder layers whose steps run as one C call each (csrc/cpu/layer_f32.c).

After `use_cpu_kernels` has swapped a layer's parts for their kernel versions, a decode batch
spends more time dispatching eleven module calls per layer from Python than in most of the
small kernels; `FusedDecodeLayer` runs the same kernels in the same order from one call.
Extend batches (prefill chunks, mixed with decode rows) run one call too
(`rt_extend_layer_f32`) where the attention backend runs the pass wholly on its kernels
(`CpuAttnBackend.extend_segments`), the layer has no window, its K/V live in the main pool,
and either every linear runs the kernel at every size or the batch has at most
FUSED_EXTEND_ROWS rows; other batches run the wrapped layer's modules. The runner wraps the
layers only when its attention backend says a fused layer may stand in for it
(`BaseAttnBackend.fuses_cpu_decode_layers`), once, at start-up.
"""

from __future__ import annotations

import torch
from torch import nn

from radixrt.core.forward_batch import ForwardBatch, ForwardMode
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu import w8a8
from radixrt.model.cpu.guard import DECODE_ROWS
from radixrt.model.cpu.layers import CpuQKVRotary, CpuRMSNorm, CpuSiluMul, PackedLinear

# Where the guard gives prefill-sized linears to torch (MKL's float32 GEMM beats the kernel's
# by 7-12% at 256 rows on an AVX2 EPYC), extend batches of at most this many rows still run as
# one call on the kernel's panels (which the decode side keeps): in a served chat's mixed
# steps (decode rows beside a question's chunk) the module path's dispatch and extra passes
# over the activations cost more than the GEMM rate gains. Measured in docs/benchmarks.md
# section 19.
FUSED_EXTEND_ROWS = 128
ANY_ROWS = 1 << 62  # fuse_extend_rows where every linear runs the kernel at every size


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _a8_table(linears: tuple[PackedLinear, ...]) -> torch.Tensor | None:
    """The W8A8 part of the layer call (layer_f32.c's a8): DECODE_ROWS, then per linear its
    W8A8 weight's address (0: none), path, planes and whether decode- and prefill-sized calls
    take it, as each PackedLinear's forward decides; None when no linear has one."""
    if not any(lin.w8a8 for lin in linears):
        return None
    rows = [DECODE_ROWS]
    for lin in linears:  # (a8_packed is None where the linear has no W8A8 path)
        rows += [_ptr(lin.a8_packed) or 0, w8a8.PATHS.get(lin.w8a8, 0), lin.a8_planes]
        rows += [int(lin.a8_small), int(lin.a8_large)]
    return torch.tensor(rows, dtype=torch.int64)


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
        linears = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
        self.linear_ptrs = tuple(  # per linear: packed weight, bias, int8 scales (or None)
            p for lin in linears for p in (_ptr(lin.packed), _ptr(lin.bias), _ptr(lin.scale))
        )
        # 1: every linear holds bfloat16 panels (`can_fuse` admits one weight type per layer)
        self.bf16_weights = int(attn.qkv_proj.weights == "bfloat16")
        hq, hkv, d, inter = self.dims
        self.scratch_per_row = (hq + 2 * hkv) * d + hq * d + 3 * inter
        # The extend call's weight addresses and sizes (rt_extend_layer_f32's ptrs, dims).
        self.ext_ptrs = torch.tensor(
            [p or 0 for p in (*self.norm_ptrs, *self.linear_ptrs)], dtype=torch.int64
        )
        self.ext_dims = torch.tensor([self.hidden, *self.dims, self.bf16_weights])
        # int8 linears' W8A8 weights where the plan gives them one (owned by the linears)
        self.a8 = _a8_table(linears)
        self.a8_ptr = None if self.a8 is None else self.a8.data_ptr()
        # Up to how many rows extend batches run as one call: any number where every linear
        # runs the kernel at every size, else FUSED_EXTEND_ROWS (the panels are there:
        # `can_fuse` asks for the decode size on the kernel). `fuse_extend` is a switch that
        # tests and benchmarks turn off to compare with the modules.
        self.fuse_extend = True
        self.fuse_extend_rows = ANY_ROWS if all(lin.large for lin in linears) else FUSED_EXTEND_ROWS
        self.extend_calls = 0  # extend passes run as one call (for tests and benchmarks)
        self._bf16_attention: dict[torch.dtype, bool] = {}  # per pool dtype (bf16_attention)

    def bf16_attention(self, kv_dtype: torch.dtype) -> bool:
        """Whether this layer attends with bfloat16 products over a pool of `kv_dtype`
        (kernels.bf16_extend_takes), decided once per dtype: the library's variant is fixed
        for the layer's life (its packed weights are that variant's)."""
        if kv_dtype not in self._bf16_attention:
            self._bf16_attention[kv_dtype] = ck.bf16_extend_takes(
                kv_dtype, self.dims[2], self.spec.sliding_window
            )
        return self._bf16_attention[kv_dtype]

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
            return self._extend(rope, x, residual, fb)
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
            int(self.bf16_attention(k_buf.dtype)),
            self.a8_ptr,
        )
        return x, residual

    def _extend(
        self,
        rope: tuple[torch.Tensor, torch.Tensor],
        x: torch.Tensor,
        residual: torch.Tensor | None,
        fb: ForwardBatch,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """An extend batch as one call where it can (see the module docstring), else the
        wrapped layer's modules."""
        segments_of = getattr(fb.attn_backend, "extend_segments", None)
        seg = segments_of() if self.fuse_extend and segments_of is not None else None
        pool = fb.token_to_kv_pool
        if (
            seg is None
            or x.shape[0] > self.fuse_extend_rows
            or self.spec.sliding_window
            or pool.slot_map(self.layer_id) is not None
        ):
            return self.layer(rope, x, residual, fb)
        x = x.contiguous()
        residual = torch.zeros_like(x) if residual is None else residual.contiguous()
        cos, sin = (r.contiguous() for r in rope)
        k_buf, v_buf = pool.get_kv_buffer(self.layer_id)
        kv_kind = ck.KV_KINDS[ck.kv_suffix(k_buf, v_buf)]
        bf16 = self.bf16_attention(k_buf.dtype)  # (no window here: windowed layers returned)
        table = fb.req_to_token_pool.req_to_token
        t = x.shape[0]
        hq_d = self.dims[0] * self.dims[2]
        scratch = torch.empty(t * self.scratch_per_row + 2 * seg.decode_rows * hq_d)
        rc = ck.lib().rt_extend_layer_f32(
            x.data_ptr(), residual.data_ptr(), t, self.ext_ptrs.data_ptr(),
            self.ext_dims.data_ptr(), self.eps, cos.data_ptr(), sin.data_ptr(),
            k_buf.data_ptr(), v_buf.data_ptr(), kv_kind, fb.out_loc.data_ptr(),
            table.data_ptr(), table.stride(0), seg.ext.data_ptr(), seg.ext.shape[0],
            seg.dec.data_ptr(), seg.decode_rows, self.scaling, int(bf16), scratch.data_ptr(),
            self.a8_ptr,
        )  # fmt: skip
        if rc != 0:
            raise RuntimeError(f"rt_extend_layer_f32 failed ({rc})")
        self.extend_calls += 1
        return x, residual


def fuse_decode_layers(layers: nn.ModuleList) -> int:
    """Wrap every layer that `FusedDecodeLayer.can_fuse`; returns how many were wrapped."""
    count = 0
    for i, layer in enumerate(layers):
        if FusedDecodeLayer.can_fuse(layer):
            layers[i] = FusedDecodeLayer(layer)
            count += 1
    return count
