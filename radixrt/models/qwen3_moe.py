"""Qwen3-MoE: Qwen3's attention; the MLP of each sparse layer is a mixture of experts under
`mlp` (router `mlp.gate`, experts `mlp.experts`), the rest dense."""

from __future__ import annotations

from torch import nn

from radixrt.distributed.comm import BaseComm
from radixrt.layers.moe import SparseMoeBlock
from radixrt.models.arch import ArchConfig
from radixrt.models.decoder import CausalLM, GatedMLP, SelfAttention
from radixrt.models.llama import LlamaDecoderLayer
from radixrt.models.tp_partition import TPPartition


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
