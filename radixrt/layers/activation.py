"""Gated activations: act(gate) * up on a fused gate_up projection."""

from __future__ import annotations

import torch
from torch import nn

_ACTIVATIONS = {"silu": nn.functional.silu, "gelu": nn.functional.gelu}


class GatedActivation(nn.Module):
    """gate_up (T, 2I), gate in [:, :I] and up in [:, I:] -> act(gate) * up (T, I)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        if name not in _ACTIVATIONS:
            raise ValueError(f"unsupported hidden_act {name!r} (supported: {sorted(_ACTIVATIONS)})")
        self.name = name
        self.act = _ACTIVATIONS[name]

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return self.act(gate) * up
