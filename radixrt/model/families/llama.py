"""Llama-family decoder (Llama 2/3, SmolLM2, Mistral with its sliding window, Qwen2): pre-norm
layers of attention and a gated MLP. Phi-3 and Granite are this layer with another weight
layout or multipliers (phi3.py, granite.py); Helium is it with OLMo 2's norms."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.decoder import CausalLM, GatedMLP, Rope, SelfAttention, norm_in
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.layers.norm import RMSNorm, WeightFirstRMSNorm
from radixrt.model.parallel.comm import BaseComm

if TYPE_CHECKING:
    from radixrt.core.forward_batch import ForwardBatch


class LlamaDecoderLayer(nn.Module):
    """x -> x + attn(norm(x)) -> x + mlp(norm(x)); the residual adds fuse into the norms."""

    def __init__(
        self,
        cfg: ArchConfig,
        layer_id: int,
        part: TPPartition,
        comm: BaseComm,
        self_attn: nn.Module | None = None,
        mlp: nn.Module | None = None,
        norm_cls: type[RMSNorm] = RMSNorm,
    ) -> None:
        super().__init__()
        self.self_attn = self_attn or SelfAttention(cfg, layer_id, part, comm)
        self.mlp = mlp or GatedMLP(cfg, part, comm)
        self.input_layernorm = norm_cls(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = norm_cls(cfg.hidden_size, cfg.rms_norm_eps)
        # Whether csrc/cpu/layer_f32.c computes exactly this layer (cpu/fused_layer.py): the
        # plain Llama layer (a window is the backend's key view).
        self.cpu_fusable = (
            type(self) is LlamaDecoderLayer
            and self_attn is None
            and mlp is None
            and norm_cls is RMSNorm
        )

    def forward(
        self, rope: Rope, x: torch.Tensor, residual: torch.Tensor | None, fb: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x, residual = norm_in(self.input_layernorm, x, residual)
        x = self.self_attn(rope, x, fb)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x), residual


class LlamaForCausalLM(CausalLM):
    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return LlamaDecoderLayer(cfg, i, part, comm)


class HeliumForCausalLM(CausalLM):
    """Helium: the Llama layer with norms that multiply by w in float32 before the cast, and
    rotary pairs of adjacent dims (ArchConfig.rope_interleaved)."""

    norm_cls = WeightFirstRMSNorm

    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return LlamaDecoderLayer(cfg, i, part, comm, norm_cls=WeightFirstRMSNorm)
