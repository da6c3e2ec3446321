"""Qwen3: the Llama layer with a per-head RMSNorm on q and k before the rotary."""

from __future__ import annotations

from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.decoder import CausalLM, SelfAttention
from radixrt.model.families.llama import LlamaDecoderLayer
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.parallel.comm import BaseComm


class Qwen3ForCausalLM(CausalLM):
    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        attn = SelfAttention(cfg, i, part, comm, qk_norm="head")
        return LlamaDecoderLayer(cfg, i, part, comm, self_attn=attn)
