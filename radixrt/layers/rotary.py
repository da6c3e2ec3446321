"""Rotary position embeddings (neox / rotate-half layout) with Llama-3 and linear scaling."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


def compute_inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> torch.Tensor:
    """Inverse frequencies (head_dim // 2,) float32, after any supported rope scaling."""
    exps = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
    inv_freq = 1.0 / (theta**exps)
    if not scaling:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / float(scaling["factor"])
    if kind == "llama3":
        return _llama3_inv_freq(inv_freq, scaling)
    raise ValueError(f"unsupported rope_scaling type {kind!r} (supported: default, linear, llama3)")


def _llama3_inv_freq(inv_freq: torch.Tensor, s: dict[str, Any]) -> torch.Tensor:
    factor = float(s["factor"])
    low_ff, high_ff = float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old_ctx = float(s["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old_ctx / low_ff, old_ctx / high_ff
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_ctx / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    """Cos/sin tables for rotary embeddings; `apply_rotary` rotates q and k with them."""

    def __init__(
        self,
        head_dim: int,
        max_position: int,
        theta: float,
        scaling: dict[str, Any] | None = None,
        attention_scaling: float = 1.0,
    ) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.max_position = max_position
        self.inv_freq = compute_inv_freq(head_dim, theta, scaling)  # (D/2,) float32, CPU
        self.attention_scaling = attention_scaling
        # cos/sin caches (max_position, D) float32 with halves repeated (rotate-half layout);
        # built on first use on the positions' device, so the module can be made on "meta".
        self._cos_sin: tuple[torch.Tensor, torch.Tensor] | None = None

    def _cache(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos_sin is None or self._cos_sin[0].device != device:
            t = torch.arange(self.max_position, dtype=torch.float32, device="cpu")
            freqs = torch.outer(t, self.inv_freq)  # (max_position, D/2) float32
            emb = torch.cat([freqs, freqs], dim=-1)
            cos, sin = emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling
            self._cos_sin = (cos.to(device), sin.to(device))
        return self._cos_sin

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin for the positions (T,): each (T, D) float32, shared by every layer."""
        cos_cache, sin_cache = self._cache(positions.device)
        return cos_cache.index_select(0, positions), sin_cache.index_select(0, positions)


def apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int
) -> torch.Tensor:
    """Rotate packed x (T, H*D) by cos/sin (T, D) or (T, 1, D); returns a new (T, H*D)."""
    shape = x.shape
    x = x.view(shape[0], -1, head_dim)
    cos, sin = cos.view(shape[0], 1, head_dim), sin.view(shape[0], 1, head_dim)
    half = head_dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos.to(x.dtype) + rotated * sin.to(x.dtype)).view(shape)


class QKVRotary(nn.Module):
    """Splits a fused qkv projection (T, (H + 2*Hkv) * D) into q, k, v and rotates q and k."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.sizes = (num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim)

    def forward(
        self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = qkv.split(self.sizes, dim=-1)
        return apply_rotary(q, cos, sin, self.head_dim), apply_rotary(k, cos, sin, self.head_dim), v
