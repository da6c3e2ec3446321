"""Rotary frequencies of each rope variant a checkpoint may name in its rope parameters.

`rope_frequencies` returns the inverse frequencies (rotary_dim // 2,) float32 and the factor
the cos/sin tables are multiplied by. The variants whose transformers implementation depends
on the current sequence length (dynamic NTK, longrope) are fixed once here from the served
context length, so a position's rotation never changes while its KV is cached: with a served
context within the checkpoint's original length they equal transformers exactly; beyond it
they take the long-context frequencies for every sequence (as vLLM does), where transformers
would switch per sequence length.
"""

from __future__ import annotations

import math
from typing import Any

import torch

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")


def rope_frequencies(
    rotary_dim: int,
    theta: float,
    scaling: dict[str, Any] | None,
    max_position_embeddings: int,
    context_len: int,
) -> tuple[torch.Tensor, float]:
    """(inv_freq (rotary_dim // 2,) float32 on the CPU, cos/sin factor) for one rope."""
    kind = rope_type(scaling)
    s = scaling or {}
    if kind == "default":
        return _base_inv_freq(rotary_dim, theta), 1.0
    if kind == "linear":
        return _base_inv_freq(rotary_dim, theta) / float(s["factor"]), 1.0
    if kind == "llama3":
        return _llama3(_base_inv_freq(rotary_dim, theta), s), 1.0
    if kind == "dynamic":
        return _dynamic_ntk(rotary_dim, theta, s, max_position_embeddings, context_len), 1.0
    if kind == "yarn":
        return _yarn(rotary_dim, theta, s, max_position_embeddings)
    if kind == "longrope":
        return _longrope(rotary_dim, theta, s, max_position_embeddings, context_len)
    raise ValueError(f"unsupported rope type {kind!r} (supported: {', '.join(ROPE_TYPES)})")


def rope_type(scaling: dict[str, Any] | None) -> str:
    """The variant a rope-parameters dict names ("default" for None)."""
    if not scaling:
        return "default"
    return str(scaling.get("rope_type", scaling.get("type", "default")))


def _base_inv_freq(dim: int, theta: float) -> torch.Tensor:
    exps = torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").float() / dim
    return 1.0 / (theta**exps)


def _llama3(inv_freq: torch.Tensor, s: dict[str, Any]) -> torch.Tensor:
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


def _dynamic_ntk(
    dim: int, theta: float, s: dict[str, Any], max_pos: int, context_len: int
) -> torch.Tensor:
    """NTK-aware base stretched for `context_len` positions (unchanged within max_pos)."""
    factor = float(s["factor"])
    length = max(context_len, max_pos)
    base = theta * ((factor * length / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return _base_inv_freq(dim, base)


def _yarn(dim: int, theta: float, s: dict[str, Any], max_pos: int) -> tuple[torch.Tensor, float]:
    """YaRN: interpolate the low frequencies, keep the high ones, blend linearly between."""
    old_ctx = float(s["original_max_position_embeddings"])
    factor = float(s.get("factor") or max_pos / old_ctx)
    attention_factor = s.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all = s.get("mscale"), s.get("mscale_all_dim")
        if mscale and mscale_all:
            attention_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all)
        else:
            attention_factor = _yarn_mscale(factor, 1.0)
    beta_fast, beta_slow = float(s.get("beta_fast") or 32), float(s.get("beta_slow") or 1)

    def dim_at(rotations: float) -> float:  # the dimension that turns `rotations` times
        return dim * math.log(old_ctx / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dim_at(beta_fast), dim_at(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32, device="cpu") - low) / (high - low)).clamp(
        0, 1
    )
    extrapolated = _base_inv_freq(dim, theta)
    interpolated = extrapolated / factor
    keep = 1 - ramp  # 1: the original frequency, 0: interpolated
    return interpolated * (1 - keep) + extrapolated * keep, float(attention_factor)


def _yarn_mscale(scale: float, mscale: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _longrope(
    dim: int, theta: float, s: dict[str, Any], max_pos: int, context_len: int
) -> tuple[torch.Tensor, float]:
    """Per-frequency factors: `short_factor` within the original context, else `long_factor`."""
    old_ctx = int(s["original_max_position_embeddings"])
    factor = float(s.get("factor") or max_pos / old_ctx)
    attention_factor = s.get("attention_factor")
    if attention_factor is None:
        attention_factor = (
            1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(old_ctx))
        )
    factors = s["long_factor"] if context_len > old_ctx else s["short_factor"]
    ext = torch.tensor(factors, dtype=torch.float32, device="cpu")
    if ext.numel() != dim // 2:
        raise ValueError(f"longrope factors have {ext.numel()} entries, expected {dim // 2}")
    exps = torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").float() / dim
    return 1.0 / (ext * theta**exps), float(attention_factor)
