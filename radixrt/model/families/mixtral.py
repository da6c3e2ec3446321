"""Mixtral: Mistral's attention (sliding window where set); every MLP is a mixture of experts,
`block_sparse_moe` in the checkpoint (experts' w1/w3/w2: gate/up/down; weights.py)."""

from __future__ import annotations

from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.decoder import CausalLM
from radixrt.model.families.llama import LlamaDecoderLayer
from radixrt.model.families.qwen3_moe import moe_block
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.parallel.comm import BaseComm


class MixtralForCausalLM(CausalLM):
    checkpoint_aliases = ((".block_sparse_moe.", ".mlp."),)

    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        return LlamaDecoderLayer(cfg, i, part, comm, mlp=moe_block(cfg, part, comm))
