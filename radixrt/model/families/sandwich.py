"""The sandwich decoder layer: a norm before and after both attention and the MLP (Gemma 2
and 3, GLM-4), x -> x + post_attn_norm(attn(norm(x))) -> x + post_ff_norm(mlp(pre_ff_norm(x))).
Parameter names are Gemma's; GLM-4's checkpoint names map onto them (glm4.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.decoder import GatedMLP, Rope, norm_in
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.layers.norm import RMSNorm
from radixrt.model.parallel.comm import BaseComm

if TYPE_CHECKING:
    from radixrt.core.forward_batch import ForwardBatch


class SandwichDecoderLayer(nn.Module):
    """`self_attn` the family's attention block; `norm_cls` its RMSNorm variant."""

    def __init__(
        self,
        cfg: ArchConfig,
        part: TPPartition,
        comm: BaseComm,
        self_attn: nn.Module,
        norm_cls: type[RMSNorm],
    ) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.mlp = GatedMLP(cfg, part, comm)
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm = norm_cls(h, eps)
        self.post_attention_layernorm = norm_cls(h, eps)
        self.pre_feedforward_layernorm = norm_cls(h, eps)
        self.post_feedforward_layernorm = norm_cls(h, eps)

    def forward(
        self, rope: Rope, x: torch.Tensor, residual: torch.Tensor | None, fb: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x, residual = norm_in(self.input_layernorm, x, residual)
        x = self.post_attention_layernorm(self.self_attn(rope, x, fb))
        x, residual = self.pre_feedforward_layernorm(x, residual)
        return self.post_feedforward_layernorm(self.mlp(x)), residual
