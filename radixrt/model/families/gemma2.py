"""Gemma 2: Gemma's RMSNorm (1 + w), a norm before and after both attention and the MLP,
the embedding scaled by sqrt(hidden), attention scaled by query_pre_attn_scalar**-0.5, soft
caps on the attention scores and the final logits, sliding windows on alternate layers.
Gemma 3 (gemma3.py) is this layer with q/k norms and a rope of its own for local layers;
Gemma (1) is the Llama layer with Gemma's norms and scaled embedding."""

from __future__ import annotations

import torch
from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.config_reader import GemmaOptions
from radixrt.model.families.decoder import CausalLM, SelfAttention
from radixrt.model.families.llama import LlamaDecoderLayer
from radixrt.model.families.sandwich import SandwichDecoderLayer
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.layers.norm import GemmaRMSNorm
from radixrt.model.parallel.comm import BaseComm


def gemma_options(cfg: ArchConfig) -> GemmaOptions:
    assert isinstance(cfg.options, GemmaOptions), "a Gemma model needs GemmaOptions"
    return cfg.options


def gemma_layer(
    cfg: ArchConfig, layer_id: int, part: TPPartition, comm: BaseComm, qk_norm: str | None = None
) -> SandwichDecoderLayer:
    """Gemma 2's layer (Gemma 3's with per-head q/k norms): attention scaled by
    query_pre_attn_scalar**-0.5 and soft-capped, Gemma's norms around attention and MLP."""
    opts = gemma_options(cfg)
    attn = SelfAttention(
        cfg, layer_id, part, comm,
        scaling=opts.query_pre_attn_scalar**-0.5, qk_norm=qk_norm, norm_cls=GemmaRMSNorm,
        logit_softcap=opts.attn_logit_softcapping,
    )  # fmt: skip
    return SandwichDecoderLayer(cfg, part, comm, attn, GemmaRMSNorm)


class Gemma2ForCausalLM(CausalLM):
    norm_cls = GemmaRMSNorm

    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return gemma_layer(cfg, i, part, comm)

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
