"""ArchConfig: the shape of a checkpoint, read from its config.json."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ArchConfig:
    """Architecture facts of a Llama-family checkpoint (Llama, Mistral, Qwen2)."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool  # bias on q/k/v projections
    o_proj_bias: bool
    mlp_bias: bool
    hidden_act: str

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> ArchConfig:
        """Parse an HF config.json dict; ValueError names what is missing or unsupported."""
        archs = cfg.get("architectures") or [cfg.get("model_type", "?")]
        arch = archs[0]
        try:
            heads = int(cfg["num_attention_heads"])
            hidden = int(cfg["hidden_size"])
            rope = dict(cfg.get("rope_parameters") or {})
            scaling = cfg.get("rope_scaling") or (
                rope if rope.get("rope_type", "default") != "default" else None
            )
            theta = float(cfg.get("rope_theta") or rope.get("rope_theta") or 10000.0)
            if cfg.get("use_sliding_window") and cfg.get("sliding_window"):
                raise ValueError("sliding-window attention is not supported")
            return cls(
                architecture=arch,
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(cfg["intermediate_size"]),
                num_hidden_layers=int(cfg["num_hidden_layers"]),
                num_attention_heads=heads,
                num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or hidden // heads),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                rope_theta=theta,
                rope_scaling=scaling,
                max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                attention_bias=bool(cfg.get("attention_bias", False)) or arch.startswith("Qwen2"),
                o_proj_bias=bool(cfg.get("attention_bias", False)) and not arch.startswith("Qwen2"),
                mlp_bias=bool(cfg.get("mlp_bias", False)),
                hidden_act=str(cfg.get("hidden_act", "silu")),
            )
        except KeyError as e:
            raise ValueError(f"config.json of {arch} lacks the field {e.args[0]!r}") from None
