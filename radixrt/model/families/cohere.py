"""Cohere (Command R) and Cohere 2 (Command R7B, Command A): attention and the MLP side by
side off one LayerNorm without bias, h -> h + attn(norm(h)) + mlp(norm(h)); rotary pairs of
adjacent dims (ArchConfig.rope_interleaved: permuted into halves at load); logits times
logit_scale. Cohere 2 slides a window on 3 of every 4 layers and rotates only those (its
full-attention layers are NoPE: ArchConfig.rope_layers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.config_reader import CohereOptions
from radixrt.model.families.decoder import CausalLM, GatedMLP, Rope, SelfAttention
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.layers.norm import BiasFreeLayerNorm
from radixrt.model.parallel.comm import BaseComm

if TYPE_CHECKING:
    from radixrt.core.forward_batch import ForwardBatch


class CohereDecoderLayer(nn.Module):
    """h -> h + attn(norm(h)) + mlp(norm(h)); returns (attn + mlp, h), whose sum is the next h."""

    def __init__(self, cfg: ArchConfig, layer_id: int, part: TPPartition, comm: BaseComm) -> None:
        super().__init__()
        self.self_attn = SelfAttention(cfg, layer_id, part, comm)
        self.mlp = GatedMLP(cfg, part, comm)
        self.input_layernorm = BiasFreeLayerNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, rope: Rope, x: torch.Tensor, residual: torch.Tensor | None, fb: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = x if residual is None else x + residual
        normed = self.input_layernorm(h)
        return self.self_attn(rope, normed, fb) + self.mlp(normed), h


class CohereForCausalLM(CausalLM):
    norm_cls = BiasFreeLayerNorm

    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return CohereDecoderLayer(cfg, i, part, comm)

    def final_logits(self, logits: torch.Tensor) -> torch.Tensor:
        opts = self.config.options
        assert isinstance(opts, CohereOptions), "a Cohere model needs CohereOptions"
        return logits * opts.logit_scale
