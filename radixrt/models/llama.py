"""Llama-family decoder (Llama 2/3, Mistral without sliding window, SmolLM2, Qwen2).

Parameter names follow the Hugging Face checkpoints so weights load by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from radixrt.distributed.comm import BaseComm, NullComm
from radixrt.layers.activation import GatedActivation
from radixrt.layers.attention import RadixAttention
from radixrt.layers.linear import lm_head, row_parallel_linear, vocab_embedding
from radixrt.layers.norm import RMSNorm
from radixrt.layers.rotary import QKVRotary, RotaryEmbedding
from radixrt.models.arch import ArchConfig
from radixrt.models.llama_weights import load_llama_weights
from radixrt.models.tp_partition import TPPartition

if TYPE_CHECKING:
    from radixrt.forward_batch import ForwardBatch

Rope = tuple[torch.Tensor, torch.Tensor]  # cos, sin: each (T, head_dim) float32


class LlamaMLP(nn.Module):
    def __init__(self, cfg: ArchConfig, part: TPPartition, comm: BaseComm) -> None:
        super().__init__()
        bias, inter = cfg.mlp_bias, part.inter_size
        # This rank's rows of gate_proj and up_proj, stacked: [0, I/tp) gate, [I/tp, 2I/tp) up.
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * inter, bias=bias)
        self.down_proj = row_parallel_linear(inter, cfg.hidden_size, bias, comm)
        self.act_fn = GatedActivation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class LlamaAttention(nn.Module):
    def __init__(self, cfg: ArchConfig, layer_id: int, part: TPPartition, comm: BaseComm) -> None:
        super().__init__()
        d, h, hkv = cfg.head_dim, part.num_heads, part.num_kv_heads
        bias = cfg.attention_bias
        # This rank's heads of q_proj, k_proj and v_proj, stacked along the output rows.
        self.qkv_proj = nn.Linear(cfg.hidden_size, (h + 2 * hkv) * d, bias=bias)
        self.rotary = QKVRotary(h, hkv, d)
        self.o_proj = row_parallel_linear(h * d, cfg.hidden_size, cfg.o_proj_bias, comm)
        self.attn = RadixAttention(layer_id, h, hkv, d, d**-0.5)

    def forward(self, rope: Rope, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        q, k, v = self.rotary(self.qkv_proj(x), *rope)
        return self.o_proj(self.attn(q, k, v, fb))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: ArchConfig, layer_id: int, part: TPPartition, comm: BaseComm) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(cfg, layer_id, part, comm)
        self.mlp = LlamaMLP(cfg, part, comm)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, rope: Rope, x: torch.Tensor, residual: torch.Tensor | None, fb: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = x
            x = self.input_layernorm(x)
        else:
            x, residual = self.input_layernorm(x, residual)
        x = self.self_attn(rope, x, fb)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x), residual


class LlamaModel(nn.Module):
    def __init__(
        self, cfg: ArchConfig, max_position: int, part: TPPartition, comm: BaseComm
    ) -> None:
        super().__init__()
        self.embed_tokens = vocab_embedding(
            cfg.vocab_size, part.vocab_start, part.vocab_shard, cfg.hidden_size, comm
        )
        self.rotary = RotaryEmbedding(cfg.head_dim, max_position, cfg.rope_theta, cfg.rope_scaling)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(cfg, i, part, comm) for i in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """Return final hidden states (T, hidden_size) for the packed batch."""
        x = self.embed_tokens(fb.input_ids)
        rope = self.rotary(fb.positions)
        residual = None
        for layer in self.layers:
            x, residual = layer(rope, x, residual, fb)
        x, _ = self.norm(x, residual)
        return x


class LlamaForCausalLM(nn.Module):
    """Decoder + LM head. `forward` returns logits only for `fb.logits_indices`.

    With a communicator of several ranks this module is one rank's shard (`partition`), and
    every rank returns the same gathered logits.
    """

    def __init__(
        self, cfg: ArchConfig, max_position: int | None = None, comm: BaseComm | None = None
    ) -> None:
        super().__init__()
        comm = comm or NullComm()
        self.config = cfg
        self.partition = TPPartition.of(cfg, comm.world_size, comm.rank)
        part = self.partition
        self.model = LlamaModel(cfg, max_position or cfg.max_position_embeddings, part, comm)
        self.lm_head = lm_head(cfg.vocab_size, part.vocab_shard, cfg.hidden_size, comm)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """(N, vocab_size) float32 logits for the N rows in fb.logits_indices."""
        hidden = self.model(fb)
        return self.lm_head(hidden[fb.logits_indices]).float()

    def fuse_cpu_decode_layers(self) -> int:
        """After `use_cpu_kernels`: run each layer's decode steps as one C call where all of
        its parts have kernel versions; returns how many layers (cpu/fused_layer.py)."""
        from radixrt.cpu.fused_layer import fuse_decode_layers

        return fuse_decode_layers(self.model.layers)

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> None:
        """Copy this rank's part of each checkpoint tensor (a torch.Tensor or a safetensors
        slice) into its parameter by name; raise on missing or misshapen ones."""
        if self.config.tie_word_embeddings:  # moving off "meta" may have untied them
            self.lm_head.weight = self.model.embed_tokens.weight
        load_llama_weights(self, weights)
