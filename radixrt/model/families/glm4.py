"""GLM-4 (the 0414 models and their reasoning Z1 siblings): the Llama attention (q/k/v
biases) with a norm after attention and after the MLP as well as before each, a fused
gate_up_proj in the checkpoint (split by weights.py), and rotary pairs of adjacent dims over
half of each head (ArchConfig.rope_interleaved: permuted into halves at load)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.decoder import CausalLM, GatedMLP, Rope, SelfAttention
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.layers.norm import RMSNorm
from radixrt.model.parallel.comm import BaseComm

if TYPE_CHECKING:
    from radixrt.core.forward_batch import ForwardBatch


class Glm4DecoderLayer(nn.Module):
    """x -> x + post_self_attn_norm(attn(norm(x))) -> x + post_mlp_norm(mlp(post_attn_norm(x)))."""

    def __init__(self, cfg: ArchConfig, layer_id: int, part: TPPartition, comm: BaseComm) -> None:
        super().__init__()
        self.self_attn = SelfAttention(cfg, layer_id, part, comm)
        self.mlp = GatedMLP(cfg, part, comm)
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm = RMSNorm(h, eps)
        self.post_self_attn_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)  # (before the MLP, as GLM names it)
        self.post_mlp_layernorm = RMSNorm(h, eps)

    def forward(
        self, rope: Rope, x: torch.Tensor, residual: torch.Tensor | None, fb: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = x
            x = self.input_layernorm(x)
        else:
            x, residual = self.input_layernorm(x, residual)
        x = self.post_self_attn_layernorm(self.self_attn(rope, x, fb))
        x, residual = self.post_attention_layernorm(x, residual)
        return self.post_mlp_layernorm(self.mlp(x)), residual


class Glm4ForCausalLM(CausalLM):
    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return Glm4DecoderLayer(cfg, i, part, comm)
