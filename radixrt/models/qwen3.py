"""Qwen3: the Llama layer with a per-head RMSNorm on q and k before the rotary."""

from __future__ import annotations

from torch import nn

from radixrt.distributed.comm import BaseComm
from radixrt.models.arch import ArchConfig
from radixrt.models.decoder import CausalLM, SelfAttention
from radixrt.models.llama import LlamaDecoderLayer
from radixrt.models.tp_partition import TPPartition


class Qwen3ForCausalLM(CausalLM):
    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        attn = SelfAttention(cfg, i, part, comm, qk_norm="head")
        return LlamaDecoderLayer(cfg, i, part, comm, self_attn=attn)
