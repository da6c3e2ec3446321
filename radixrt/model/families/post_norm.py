"""Decoder layers with norms after attention and after the MLP, none before. OLMo 2: q/k
norms over the whole projections, every norm multiplying by w in float32 before the cast;
OLMo 3 adds a window on 3 of every 4 layers, with a rope of their own
(ArchConfig.local_rope_theta). EXAONE 4: Llama's norms, q/k norms per head, and (with a
window) NoPE full-attention layers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.decoder import CausalLM, GatedMLP, Rope, SelfAttention
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.layers.norm import RMSNorm, WeightFirstRMSNorm
from radixrt.model.parallel.comm import BaseComm

if TYPE_CHECKING:
    from radixrt.core.forward_batch import ForwardBatch


class PostNormDecoderLayer(nn.Module):
    """h -> h + post_norm(attn(h)) -> h + post_ff_norm(mlp(h)); `norm_cls` the family's
    RMSNorm, `qk_norm` its q/k norms' reach (SelfAttention)."""

    def __init__(
        self,
        cfg: ArchConfig,
        layer_id: int,
        part: TPPartition,
        comm: BaseComm,
        norm_cls: type[RMSNorm] = WeightFirstRMSNorm,
        qk_norm: str = "full",
    ) -> None:
        super().__init__()
        self.self_attn = SelfAttention(cfg, layer_id, part, comm, qk_norm=qk_norm,
                                       norm_cls=norm_cls)  # fmt: skip
        self.mlp = GatedMLP(cfg, part, comm)
        self.post_attention_layernorm = norm_cls(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_feedforward_layernorm = norm_cls(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, rope: Rope, x: torch.Tensor, residual: torch.Tensor | None, fb: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = x if residual is None else x + residual
        h = h + self.post_attention_layernorm(self.self_attn(rope, h, fb))
        return self.post_feedforward_layernorm(self.mlp(h)), h


class Olmo2ForCausalLM(CausalLM):
    """OLMo 2 and OLMo 3."""

    norm_cls = WeightFirstRMSNorm

    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return PostNormDecoderLayer(cfg, i, part, comm)


class Exaone4ForCausalLM(CausalLM):
    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return PostNormDecoderLayer(cfg, i, part, comm, RMSNorm, "head")
