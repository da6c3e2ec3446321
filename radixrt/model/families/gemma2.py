"""Gemma 2: Gemma's RMSNorm (1 + w), a norm before and after both attention and the MLP,
the embedding scaled by sqrt(hidden), attention scaled by query_pre_attn_scalar**-0.5, soft
caps on the attention scores and the final logits, sliding windows on alternate layers.
Gemma 3 (gemma3.py) is this layer with q/k norms and a rope of its own for local layers;
Gemma (1) is the Llama layer with Gemma's norms and scaled embedding."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.config_reader import GemmaOptions
from radixrt.model.families.decoder import CausalLM, GatedMLP, Rope, SelfAttention
from radixrt.model.families.llama import LlamaDecoderLayer
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.layers.norm import GemmaRMSNorm
from radixrt.model.parallel.comm import BaseComm

if TYPE_CHECKING:
    from radixrt.core.forward_batch import ForwardBatch


def gemma_options(cfg: ArchConfig) -> GemmaOptions:
    assert isinstance(cfg.options, GemmaOptions), "a Gemma model needs GemmaOptions"
    return cfg.options


class GemmaDecoderLayer(nn.Module):
    """x -> x + post_norm(attn(norm(x))) -> x + post_ff_norm(mlp(pre_ff_norm(x)))."""

    def __init__(
        self,
        cfg: ArchConfig,
        layer_id: int,
        part: TPPartition,
        comm: BaseComm,
        qk_norm: str | None = None,
    ) -> None:
        super().__init__()
        opts = gemma_options(cfg)
        self.self_attn = SelfAttention(
            cfg, layer_id, part, comm,
            scaling=opts.query_pre_attn_scalar**-0.5, qk_norm=qk_norm, norm_cls=GemmaRMSNorm,
            logit_softcap=opts.attn_logit_softcapping,
        )  # fmt: skip
        self.mlp = GatedMLP(cfg, part, comm)
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm = GemmaRMSNorm(h, eps)
        self.post_attention_layernorm = GemmaRMSNorm(h, eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(h, eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(h, eps)

    def forward(
        self, rope: Rope, x: torch.Tensor, residual: torch.Tensor | None, fb: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = x
            x = self.input_layernorm(x)
        else:
            x, residual = self.input_layernorm(x, residual)
        x = self.post_attention_layernorm(self.self_attn(rope, x, fb))
        x, residual = self.pre_feedforward_layernorm(x, residual)
        return self.post_feedforward_layernorm(self.mlp(x)), residual


class Gemma2ForCausalLM(CausalLM):
    norm_cls = GemmaRMSNorm

    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return GemmaDecoderLayer(cfg, i, part, comm)

    def embed_scale(self, cfg: ArchConfig) -> float | None:
        return float(cfg.hidden_size**0.5)

    def final_logits(self, logits: torch.Tensor) -> torch.Tensor:
        cap = gemma_options(self.config).final_logit_softcapping
        return torch.tanh(logits / cap) * cap if cap else logits


class GemmaForCausalLM(CausalLM):
    """Gemma (1): the Llama layer with Gemma's norms, the embedding scaled by sqrt(hidden)."""

    norm_cls = GemmaRMSNorm

    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return LlamaDecoderLayer(cfg, i, part, comm, norm_cls=GemmaRMSNorm)

    def embed_scale(self, cfg: ArchConfig) -> float | None:
        return float(cfg.hidden_size**0.5)
