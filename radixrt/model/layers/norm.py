"""RMSNorm and its variants, each with an optional fused residual add.

The variants differ only in where the float32 result meets the weight, as in each family's
transformers code: `RMSNorm` (Llama) casts back to the input dtype, then multiplies by w;
`WeightFirstRMSNorm` (OLMo 2) multiplies in float32, then casts; `GemmaRMSNorm` multiplies
by (1 + w) in float32, then casts (Gemma stores w as an offset from 1). `BiasFreeLayerNorm`
(Cohere) centres x first, as a LayerNorm without bias does.
"""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight, computed in float32 like the HF reference."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Normalise x; with `residual`, first x += residual and return (normed, new residual)."""
        if residual is not None:
            x = x + residual
            residual = x
        out = self._scale(self._normalize(x), x.dtype)
        return out if residual is None else (out, residual)

    def _normalize(self, x: torch.Tensor) -> torch.Tensor:
        """x -> float32 x / sqrt(mean(x^2) + eps)."""
        return _normalized(x, self.variance_epsilon)

    def _scale(self, h: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """h (..., hidden) float32, normalised -> the output in `dtype`."""
        return self.weight * h.to(dtype)


class WeightFirstRMSNorm(RMSNorm):
    """(weight * normalised x) in float32, then cast (OLMo 2)."""

    def _scale(self, h: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return (self.weight.float() * h).to(dtype)


class GemmaRMSNorm(RMSNorm):
    """(normalised x * (1 + weight)) in float32, then cast; the checkpoint's w starts at 0."""

    def _scale(self, h: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return (h * (1.0 + self.weight.float())).to(dtype)


class BiasFreeLayerNorm(WeightFirstRMSNorm):
    """A LayerNorm without bias (Cohere's): x centred on its mean, divided by its standard
    deviation, times w in float32, then cast; RMSNorm's calls (the fused residual add)."""

    def _normalize(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.float32)
        h = h - h.mean(-1, keepdim=True)
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


def _normalized(x: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.to(torch.float32)
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
