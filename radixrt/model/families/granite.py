"""Granite: the Llama layer with four multipliers: the embedding's, each residual branch's,
the attention scaling itself, and the logits' divisor. Granite MoE (3.x's 1B and 3B MoE) is
this layer with every MLP a mixture of experts (`block_sparse_moe` in the checkpoint: the
router's `router.layer`, the experts' fused `input_linear` [gate; up] and `output_linear`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.config_reader import GraniteOptions
from radixrt.model.families.decoder import CausalLM, Rope, SelfAttention, norm_in
from radixrt.model.families.llama import LlamaDecoderLayer
from radixrt.model.families.qwen3_moe import moe_block
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.parallel.comm import BaseComm

if TYPE_CHECKING:
    from radixrt.core.forward_batch import ForwardBatch


def _options(cfg: ArchConfig) -> GraniteOptions:
    assert isinstance(cfg.options, GraniteOptions), "a Granite model needs GraniteOptions"
    return cfg.options


class GraniteDecoderLayer(LlamaDecoderLayer):
    def __init__(
        self,
        cfg: ArchConfig,
        layer_id: int,
        part: TPPartition,
        comm: BaseComm,
        mlp: nn.Module | None = None,
    ) -> None:
        opts = _options(cfg)
        attn = SelfAttention(cfg, layer_id, part, comm, scaling=opts.attention_multiplier)
        super().__init__(cfg, layer_id, part, comm, self_attn=attn, mlp=mlp)
        self.residual_multiplier = opts.residual_multiplier

    def forward(
        self, rope: Rope, x: torch.Tensor, residual: torch.Tensor | None, fb: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x, residual = norm_in(self.input_layernorm, x, residual)
        x = self.self_attn(rope, x, fb) * self.residual_multiplier
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x) * self.residual_multiplier, residual


class GraniteForCausalLM(CausalLM):
    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return GraniteDecoderLayer(cfg, i, part, comm)

    def embed_scale(self, cfg: ArchConfig) -> float | None:
        return _options(cfg).embedding_multiplier

    def final_logits(self, logits: torch.Tensor) -> torch.Tensor:
        return logits / _options(self.config).logits_scaling


class GraniteMoeForCausalLM(GraniteForCausalLM):
    checkpoint_aliases = (
        (".block_sparse_moe.input_linear.weight", ".mlp.experts.gate_up_proj"),
        (".block_sparse_moe.output_linear.weight", ".mlp.experts.down_proj"),
        (".block_sparse_moe.router.layer.", ".mlp.gate."),
    )

    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return GraniteDecoderLayer(cfg, i, part, comm, mlp=moe_block(cfg, part, comm))
