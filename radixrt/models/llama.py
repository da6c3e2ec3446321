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
        bias, inter = cfg.mlp_bias, cfg.intermediate_size
        # gate_proj and up_proj of the checkpoint, stacked: rows [0, I) gate, [I, 2I) up.
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * inter, bias=bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=bias)
        if cfg.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"unsupported hidden_act {cfg.hidden_act!r}")
        self.act = _ACTIVATIONS[cfg.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(self.act(gate) * up)


class LlamaAttention(nn.Module):
    def __init__(self, cfg: ArchConfig, layer_id: int) -> None:
        super().__init__()
        d, h, hkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        bias = cfg.attention_bias
        # q_proj, k_proj and v_proj of the checkpoint, stacked along the output rows.
        self.qkv_proj = nn.Linear(cfg.hidden_size, (h + 2 * hkv) * d, bias=bias)
        self.qkv_sizes = (h * d, hkv * d, hkv * d)
        self.o_proj = nn.Linear(h * d, cfg.hidden_size, bias=cfg.o_proj_bias)
        self.head_dim = d
        self.attn = RadixAttention(layer_id, h, hkv, d, d**-0.5)

    def forward(self, rope: Rope, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        q, k, v = self.qkv_proj(x).split(self.qkv_sizes, dim=-1)
        q = apply_rotary(q, *rope, self.head_dim)
        k = apply_rotary(k, *rope, self.head_dim)
        return self.o_proj(self.attn(q, k, v, fb))


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
            target, shard = self._stacked_target(name)
            if target not in params:
                raise ValueError(f"checkpoint tensor {name!r} has no matching parameter")
            param = params[target]
            if shard is not None:
                offset, size = shard
                param = param.narrow(0, offset, size)
            if tuple(param.shape) != tuple(tensor.shape):
                raise ValueError(
                    f"checkpoint tensor {name!r} has shape {tuple(tensor.shape)}, "
                    f"expected {tuple(param.shape)}"
                )
            with torch.no_grad():
                param.copy_(tensor)
            loaded.add(name)
        expected = {n for n in self._checkpoint_names() if not n.startswith("lm_head.")}
        if not self.config.tie_word_embeddings:
            expected.add("lm_head.weight")
        missing = expected - loaded
        if missing:
            raise ValueError(f"checkpoint lacks tensors: {sorted(missing)[:5]}")

    def _stacked_target(self, name: str) -> tuple[str, tuple[int, int] | None]:
        """Map a checkpoint name to (parameter name, (row offset, rows) within a stacked one)."""
        cfg = self.config
        d = cfg.head_dim
        sizes = {
            "q_proj": ("qkv_proj", 0, cfg.num_attention_heads * d),
            "k_proj": ("qkv_proj", cfg.num_attention_heads * d, cfg.num_key_value_heads * d),
            "v_proj": (
                "qkv_proj",
                (cfg.num_attention_heads + cfg.num_key_value_heads) * d,
                cfg.num_key_value_heads * d,
            ),
            "gate_proj": ("gate_up_proj", 0, cfg.intermediate_size),
            "up_proj": ("gate_up_proj", cfg.intermediate_size, cfg.intermediate_size),
        }
        for part, (fused, offset, size) in sizes.items():
            if f".{part}." in name:
                return name.replace(f".{part}.", f".{fused}."), (offset, size)
        return name, None

    def _checkpoint_names(self) -> set[str]:
        """The tensor names a checkpoint for this model has (stacked ones split back)."""
        names = set()
        for name, _ in self.named_parameters():
            if ".qkv_proj." in name:
                names |= {
                    name.replace(".qkv_proj.", f".{p}.") for p in ("q_proj", "k_proj", "v_proj")
                }
            elif ".gate_up_proj." in name:
                names |= {
                    name.replace(".gate_up_proj.", f".{p}.") for p in ("gate_proj", "up_proj")
                }
            else:
                names.add(name)
        return names
