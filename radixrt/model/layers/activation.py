"""Gated activations: act(gate) * up on a fused gate_up projection."""

from __future__ import annotations

import functools

import torch
from torch import nn

# config.json's hidden_act -> the function; "gelu_pytorch_tanh" is GeGLU's tanh approximation.
ACTIVATIONS = {
    "silu": nn.functional.silu,
    "gelu": nn.functional.gelu,
    "swish": nn.functional.silu,
    "gelu_pytorch_tanh": functools.partial(nn.functional.gelu, approximate="tanh"),
    "gelu_new": functools.partial(nn.functional.gelu, approximate="tanh"),
}


class GatedActivation(nn.Module):
    """gate_up (T, 2I), gate in [:, :I] and up in [:, I:] -> act(gate) * up (T, I)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        if name not in ACTIVATIONS:
            raise ValueError(f"unsupported hidden_act {name!r} (supported: {sorted(ACTIVATIONS)})")
        self.name = name
        self.act = ACTIVATIONS[name]

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return self.act(gate) * up
