"""Llama-family decoder (Llama 2/3, Mistral without sliding window, SmolLM2, Qwen2).

Parameter names follow the Hugging Face checkpoints so weights load by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
from torch import nn

from radixrt.layers.attention import RadixAttention
from radixrt.layers.norm import RMSNorm
from radixrt.layers.rotary import RotaryEmbedding, apply_rotary
from radixrt.models.arch import ArchConfig

if TYPE_CHECKING:
    from radixrt.executor.forward_batch import ForwardBatch

Rope = tuple[torch.Tensor, torch.Tensor]  # cos, sin: each (T, 1, head_dim) float32
_ACTIVATIONS = {"silu": nn.functional.silu, "gelu": nn.functional.gelu}


class LlamaMLP(nn.Module):
    def __init__(self, cfg: ArchConfig) -> None:
        super().__init__()
        bias = cfg.mlp_bias
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=bias)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=bias)
        if cfg.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"unsupported hidden_act {cfg.hidden_act!r}")
        self.act = _ACTIVATIONS[cfg.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class LlamaAttention(nn.Module):
    def __init__(self, cfg: ArchConfig, layer_id: int) -> None:
        super().__init__()
        d, h, hkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, h * d, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, hkv * d, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, hkv * d, bias=bias)
        self.o_proj = nn.Linear(h * d, cfg.hidden_size, bias=cfg.o_proj_bias)
        self.head_dim = d
        self.attn = RadixAttention(layer_id, h, hkv, d, d**-0.5)

    def forward(self, rope: Rope, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        q = apply_rotary(self.q_proj(x), *rope, self.head_dim)
        k = apply_rotary(self.k_proj(x), *rope, self.head_dim)
        return self.o_proj(self.attn(q, k, self.v_proj(x), fb))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: ArchConfig, layer_id: int) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(cfg, layer_id)
        self.mlp = LlamaMLP(cfg)
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
    def __init__(self, cfg: ArchConfig, max_position: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary = RotaryEmbedding(cfg.head_dim, max_position, cfg.rope_theta, cfg.rope_scaling)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
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
    """Decoder + LM head. `forward` returns logits only for `fb.logits_indices`."""

    def __init__(self, cfg: ArchConfig, max_position: int | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.model = LlamaModel(cfg, max_position or cfg.max_position_embeddings)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """(N, vocab_size) float32 logits for the N rows in fb.logits_indices."""
        hidden = self.model(fb)
        return self.lm_head(hidden[fb.logits_indices]).float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy checkpoint tensors into parameters by name; raise on missing or misshapen ones."""
        if self.config.tie_word_embeddings:  # moving off "meta" may have untied them
            self.lm_head.weight = self.model.embed_tokens.weight
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, tensor in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            if name == "lm_head.weight" and self.config.tie_word_embeddings:
                continue
            if name not in params:
                raise ValueError(f"checkpoint tensor {name!r} has no matching parameter")
            param = params[name]
            if tuple(param.shape) != tuple(tensor.shape):
                raise ValueError(
                    f"checkpoint tensor {name!r} has shape {tuple(tensor.shape)}, "
                    f"expected {tuple(param.shape)}"
                )
            with torch.no_grad():
                param.copy_(tensor)
            loaded.add(name)
        missing = set(params) - loaded
        if self.config.tie_word_embeddings:
            missing.discard("lm_head.weight")
        if missing:
            raise ValueError(f"checkpoint lacks tensors: {sorted(missing)[:5]}")
