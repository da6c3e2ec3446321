"""Qwen3-MoE: Qwen3's attention; the MLP of each sparse layer is a mixture of experts under
`mlp` (router `mlp.gate`, experts `mlp.experts`), the rest dense."""

from __future__ import annotations

from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.decoder import CausalLM, GatedMLP, SelfAttention
from radixrt.model.families.llama import LlamaDecoderLayer
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.layers.moe import SparseMoeBlock
from radixrt.model.parallel.comm import BaseComm


def moe_block(cfg: ArchConfig, part: TPPartition, comm: BaseComm) -> SparseMoeBlock:
    """The model's expert block, this rank's share of each expert."""
    moe = cfg.moe
    assert moe is not None
    return SparseMoeBlock(cfg.hidden_size, moe.num_experts, moe.top_k, part.moe_inter_size,
                          moe.norm_topk_prob, cfg.hidden_act, comm)  # fmt: skip


class Qwen3MoeForCausalLM(CausalLM):
    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        assert cfg.moe is not None
        attn = SelfAttention(cfg, i, part, comm, qk_norm="head")
        sparse = cfg.moe.sparse_layers[i]
        mlp = moe_block(cfg, part, comm) if sparse else GatedMLP(cfg, part, comm)
        return LlamaDecoderLayer(cfg, i, part, comm, self_attn=attn, mlp=mlp)
