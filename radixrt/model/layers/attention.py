"""The attention layer module: hands q/k/v to the batch's attention backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from radixrt.model.attention.base import AttentionLayer

if TYPE_CHECKING:
    from radixrt.core.forward_batch import ForwardBatch


class RadixAttention(nn.Module):
    """Attention over the paged KV pool; the backend stores new K/V and attends.

    `sliding_window` (0: none) and `logit_softcap` (0: none) as in AttentionLayer."""

    def __init__(
        self,
        layer_id: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        scaling: float,
        sliding_window: int = 0,
        logit_softcap: float = 0.0,
    ) -> None:
        super().__init__()
        self.layer = AttentionLayer(
            layer_id, num_heads, num_kv_heads, head_dim, scaling, sliding_window, logit_softcap
        )

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fb: ForwardBatch
    ) -> torch.Tensor:
        return fb.attn_backend.forward(q, k, v, self.layer, fb)
