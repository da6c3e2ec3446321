"""ArchConfig: the shape of a checkpoint, read from its config.json by its family's reader
(families.py, config_reader.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from radixrt.model.families.config_reader import SLIDING_ATTENTION, FamilyOptions, MoEConfig
from radixrt.model.families.families import parse_config

__all__ = ["ArchConfig", "FamilyOptions", "MoEConfig"]


@dataclass(frozen=True, slots=True)
class ArchConfig:
    """Architecture facts of a checkpoint; `options` holds its family's own fields."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int  # the dense MLP's (Mixtral: each expert's)
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
    rotary_dim: int = 0  # dims of each head that rotate; 0: all (head_dim)
    sliding_window: int = 0  # keys a sliding layer's query sees, itself included; 0: none
    layer_types: tuple[str, ...] = ()  # per layer: "full_attention" or "sliding_attention"
    # Per layer: whether it rotates q and k; (): every layer does (SmolLM3's NoPE layers not).
    rope_layers: tuple[bool, ...] = ()
    # The checkpoint's rotary pairs are adjacent dims (2i, 2i+1) of each head (GLM-4) rather
    # than its two halves; run as halves once q and k's rows are permuted at load
    # (decoder.py: SelfAttention.pair_rope_halves).
    rope_interleaved: bool = False
    # The sliding layers' own rope (Gemma 3, OLMo 3); theta 0: the full layers' rope.
    local_rope_theta: float = 0.0
    local_rope_scaling: dict[str, Any] | None = None
    moe: MoEConfig | None = None
    options: FamilyOptions = field(default_factory=FamilyOptions)

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> ArchConfig:
        """Parse an HF config.json dict; ValueError names an unsupported architecture, a
        missing field, or a field that changes the math and is not implemented."""
        return cls(**parse_config(cfg))

    @property
    def layer_windows(self) -> tuple[int, ...]:
        """Per layer: its sliding window in keys, 0 for a layer that sees every key."""
        types = self.layer_types or ("full_attention",) * self.num_hidden_layers
        return tuple(self.sliding_window if t == SLIDING_ATTENTION else 0 for t in types)

    def rotates(self, layer: int) -> bool:
        """Whether layer `layer` rotates its q and k (a NoPE layer does not)."""
        return not self.rope_layers or self.rope_layers[layer]

    @property
    def rotary_width(self) -> int:
        return self.rotary_dim or self.head_dim
