"""A model built without random init: its parameters and buffers allocated, uninitialized,
for the checkpoint's weights to fill."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def build_empty(
    factory: Callable[[], nn.Module], dtype: torch.dtype, device: torch.device
) -> nn.Module:
    """The module `factory` builds (on the meta device: no init runs), then every parameter
    and buffer as an uninitialized tensor on `device`, floating ones in `dtype` (what
    `.to(dtype).to_empty(device)` gives, tied parameters kept tied; without torch's meta
    decompositions, whose first use imports torch.fx's symbolic shapes: half a second of a
    start-up). Buffers are as uninitialized as parameters: the model's load fills both."""
    with torch.device("meta"):
        model = factory()
    made: dict[int, torch.Tensor] = {}  # by id of the meta tensor
    metas: list[torch.Tensor] = [t for _, t in model.named_parameters(remove_duplicate=False)]
    metas += [t for _, t in model.named_buffers(remove_duplicate=False)]

    def empty(t: torch.Tensor) -> torch.Tensor:
        dt = dtype if t.is_floating_point() else t.dtype
        return torch.empty(t.shape, dtype=dt, device=device)

    for module in model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                if id(p) not in made:
                    made[id(p)] = nn.Parameter(empty(p), requires_grad=p.requires_grad)
                module._parameters[name] = made[id(p)]  # type: ignore[assignment]
        for name, b in module._buffers.items():
            if b is not None:
                if id(b) not in made:
                    made[id(b)] = empty(b)
                module._buffers[name] = made[id(b)]
    del metas  # (alive until here: no id in `made` is reused by a new tensor)
    return model
