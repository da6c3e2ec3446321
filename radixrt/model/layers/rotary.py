"""Rotary position embeddings (neox / rotate-half layout) over the first `rotary_dim` dims of
each head; the frequencies of each rope variant come from rope_scaling.py."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from radixrt.model.layers.rope_scaling import rope_frequencies


class RotaryEmbedding(nn.Module):
    """Cos/sin tables for rotary embeddings; `apply_rotary` rotates q and k with them.

    `max_position`: how many positions the tables cover; `context_len`: the served context,
    which fixes the length-dependent variants (rope_scaling.py)."""

    def __init__(
        self,
        rotary_dim: int,
        max_position: int,
        theta: float,
        scaling: dict[str, Any] | None = None,
        max_position_embeddings: int | None = None,
        context_len: int | None = None,
    ) -> None:
        super().__init__()
        self.rotary_dim = rotary_dim
        self.max_position = max_position
        orig = max_position_embeddings or max_position
        self.inv_freq, self.attention_scaling = rope_frequencies(
            rotary_dim, theta, scaling, orig, context_len or orig
        )  # (rotary_dim/2,) float32, CPU
        # cos/sin caches (max_position, rotary_dim) float32 with halves repeated (rotate-half
        # layout); built on first use on the positions' device, so the module can be on "meta".
        self._cos_sin: tuple[torch.Tensor, torch.Tensor] | None = None

    def _cache(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos_sin is None or self._cos_sin[0].device != device:
            t = torch.arange(self.max_position, dtype=torch.float32, device="cpu")
            freqs = torch.outer(t, self.inv_freq)  # (max_position, rotary_dim/2) float32
            emb = torch.cat([freqs, freqs], dim=-1)
            cos, sin = emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling
            self._cos_sin = (cos.to(device), sin.to(device))
        return self._cos_sin

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin for the positions (T,): each (T, rotary_dim) float32, shared by layers."""
        cos_cache, sin_cache = self._cache(positions.device)
        return cos_cache.index_select(0, positions), sin_cache.index_select(0, positions)


def apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int
) -> torch.Tensor:
    """Rotate packed x (T, H*D) by cos/sin (T, R), R <= D: each head's first R dims turn, the
    rest pass through. Returns a new (T, H*D)."""
    shape = x.shape
    rot = cos.shape[-1]
    x = x.view(shape[0], -1, head_dim)
    cos, sin = cos.view(shape[0], 1, rot).to(x.dtype), sin.view(shape[0], 1, rot).to(x.dtype)
    xr = x[..., :rot]
    half = rot // 2
    rotated = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
    out = xr * cos + rotated * sin
    if rot < head_dim:
        out = torch.cat([out, x[..., rot:]], dim=-1)
    return out.reshape(shape)


class QKVRotary(nn.Module):
    """Splits a fused qkv projection (T, (H + 2*Hkv) * D) into q, k, v and rotates q and k
    (the first `rotary_dim` dims of each head; the cos/sin given must be that wide)."""

    def __init__(
        self, num_heads: int, num_kv_heads: int, head_dim: int, rotary_dim: int | None = None
    ) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.rotary_dim = rotary_dim or head_dim
        self.sizes = (num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim)

    def forward(
        self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = qkv.split(self.sizes, dim=-1)
        return apply_rotary(q, cos, sin, self.head_dim), apply_rotary(k, cos, sin, self.head_dim), v


def interleaved_to_halves(rotary_dim: int) -> torch.Tensor:
    """The order of a head's first `rotary_dim` dims that turns adjacent rotary pairs (2i,
    2i+1) into halves (i, i + rotary_dim/2): even dims first, then odd. Rows of q and k (and
    their biases and per-head norms) taken in this order rotate as halves exactly as the
    originals rotate in pairs, at the same frequency per pair; q . k is unchanged, since both
    are permuted alike."""
    return torch.cat([torch.arange(0, rotary_dim, 2), torch.arange(1, rotary_dim, 2)])
