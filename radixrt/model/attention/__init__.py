"""Attention backends, chosen by name; each is imported only when chosen.

Every backend is constructed as `cls(device, num_heads=, num_kv_heads=, head_dim=, scaling=)`:
the head layout comes up front so a backend can plan a whole batch before the first layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from radixrt.model.attention.base import BaseAttnBackend

# name -> "module:class"; modules are imported lazily so FlashInfer and CUDA stay optional.
ATTENTION_BACKENDS: dict[str, str] = {
    "torch_native": "radixrt.model.attention.torch_native:TorchNativeAttnBackend",
    "cpu": "radixrt.model.cpu.attention:CpuAttnBackend",  # chosen with the CPU kernels
    "flashinfer": "radixrt.model.attention.flashinfer_backend:FlashInferAttnBackend",
    "triton": "radixrt.model.attention.triton_backend:TritonAttnBackend",
}

_FLASHINFER_DTYPES = ("float16", "bfloat16")


def default_backend(device: object, dtype: object = None) -> str:
    """Backend used when none is named: on CUDA in 16-bit dtypes flashinfer if it imports, else
    triton if it imports; torch_native otherwise. `device` and `dtype` may be torch objects or
    their strings."""
    if str(device).split(":")[0] != "cuda":
        return "torch_native"
    if dtype is not None and str(dtype).removeprefix("torch.") not in _FLASHINFER_DTYPES:
        return "torch_native"
    try:
        import flashinfer  # noqa: F401
    except Exception:  # not installed, or unusable here (ABI, CUDA): fall back quietly
        pass
    else:
        return "flashinfer"
    try:
        import triton  # noqa: F401
    except Exception:
        return "torch_native"
    return "triton"


def get_attention_backend_cls(name: str) -> type[BaseAttnBackend]:
    """Import and return the backend class registered as `name`; ValueError if unknown."""
    if name not in ATTENTION_BACKENDS:
        raise ValueError(
            f"unknown attention backend {name!r}; choose from {sorted(ATTENTION_BACKENDS)}"
        )
    module_name, cls_name = ATTENTION_BACKENDS[name].split(":")
    return getattr(importlib.import_module(module_name), cls_name)


def create_attention_backend(
    name: str,
    device: object,
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    scaling: float | None = None,
    **options: object,
) -> BaseAttnBackend:
    """The backend registered as `name`, built for one head layout (scaling: head_dim**-0.5);
    `options` are that backend's own keyword arguments (e.g. the cpu backend's kernel plan)."""
    cls = get_attention_backend_cls(name)
    return cls(  # type: ignore[call-arg]  # the registry's constructor protocol (module doc)
        device,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        scaling=head_dim**-0.5 if scaling is None else scaling,
        **options,
    )
