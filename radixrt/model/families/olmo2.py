"""OLMo 2: norms after attention and after the MLP (none before), q/k norms over the whole
projections, every norm multiplying by w in float32 before the cast."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.decoder import CausalLM, GatedMLP, Rope, SelfAttention
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.layers.norm import WeightFirstRMSNorm
from radixrt.model.parallel.comm import BaseComm

if TYPE_CHECKING:
    from radixrt.core.forward_batch import ForwardBatch


class Olmo2DecoderLayer(nn.Module):
    """h -> h + post_norm(attn(h)) -> h + post_ff_norm(mlp(h))."""

    def __init__(self, cfg: ArchConfig, layer_id: int, part: TPPartition, comm: BaseComm) -> None:
        super().__init__()
        self.self_attn = SelfAttention(
            cfg, layer_id, part, comm, qk_norm="full", norm_cls=WeightFirstRMSNorm
        )
        self.mlp = GatedMLP(cfg, part, comm)
        self.post_attention_layernorm = WeightFirstRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_feedforward_layernorm = WeightFirstRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, rope: Rope, x: torch.Tensor, residual: torch.Tensor | None, fb: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = x if residual is None else x + residual
        h = h + self.post_attention_layernorm(self.self_attn(rope, h, fb))
        return self.post_feedforward_layernorm(self.mlp(h)), h


class Olmo2ForCausalLM(CausalLM):
    norm_cls = WeightFirstRMSNorm

    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return Olmo2DecoderLayer(cfg, i, part, comm)
