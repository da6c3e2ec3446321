"""GLM-4 (the 0414 models and their reasoning Z1 siblings): the Llama attention (q/k/v
biases) in the sandwich layer (a norm before and after both attention and the MLP:
sandwich.py, its checkpoint's norm names mapped onto Gemma's), a fused gate_up_proj in the
checkpoint (split by weights.py), and rotary pairs of adjacent dims over half of each head
(ArchConfig.rope_interleaved: permuted into halves at load)."""

from __future__ import annotations

from torch import nn

from radixrt.model.families.arch import ArchConfig
from radixrt.model.families.decoder import CausalLM, SelfAttention
from radixrt.model.families.sandwich import SandwichDecoderLayer
from radixrt.model.families.tp_partition import TPPartition
from radixrt.model.layers.norm import RMSNorm
from radixrt.model.parallel.comm import BaseComm


class Glm4ForCausalLM(CausalLM):
    # GLM's names, applied in this order: its post_attention_layernorm is the one before the
    # MLP (Gemma's pre_feedforward), its post_self_attn the one after attention.
    checkpoint_aliases = (
        (".post_attention_layernorm.", ".pre_feedforward_layernorm."),
        (".post_self_attn_layernorm.", ".post_attention_layernorm."),
        (".post_mlp_layernorm.", ".post_feedforward_layernorm."),
    )

    def make_layer(self, cfg: ArchConfig, i: int, part: TPPartition, comm: BaseComm) -> nn.Module:
        attn = SelfAttention(cfg, i, part, comm)
        return SandwichDecoderLayer(cfg, part, comm, attn, RMSNorm)
