"""The KV pool's element type (`--kv-cache-dtype`, CacheConfig.kv_cache_dtype): resolved once
at start-up against the activations' dtype, the device and the attention backend; a pool the
chosen path cannot read is refused with a message naming it, never ignored."""

from __future__ import annotations

import logging

import torch

from radixrt.cache.kv_layout import FP8_DTYPES

# fp8 rows carry a float32 scale each (kv_layout.py): the C kernels and torch_native read them.
KV_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, **FP8_DTYPES}
_NAMES = {dtype: name for name, dtype in KV_TORCH_DTYPES.items()}
logger = logging.getLogger("radixrt")


def resolve_kv_dtype(
    name: str,
    act_dtype: torch.dtype,
    device: torch.device,
    backend: str,
    backend_reads_other: bool,
    auto: torch.dtype | None = None,
) -> torch.dtype:
    """The pool's dtype for `name`. "auto": `auto` (the CPU kernels' choice,
    model/cpu/runtime.py auto_kv_dtype) where the backend reads it, else the activations'
    own. Another dtype than the activations' needs the CPU and a backend that widens what it
    reads (ValueError else)."""
    if name == "auto":
        if auto is None:
            return act_dtype
        if auto != act_dtype and (device.type != "cpu" or not backend_reads_other):
            logger.info(
                "--kv-cache-dtype auto: %s KV, not the kernels' %s: attention backend %r reads "
                "only the activations' dtype", kv_dtype_name(act_dtype), kv_dtype_name(auto),
                backend,
            )  # fmt: skip
            return act_dtype
        return auto
    if name not in KV_TORCH_DTYPES:
        raise ValueError(f"kv_cache_dtype must be auto or one of {sorted(KV_TORCH_DTYPES)}")
    kv = KV_TORCH_DTYPES[name]
    if kv == act_dtype:
        return kv
    act = str(act_dtype).removeprefix("torch.")
    if device.type != "cpu":
        raise ValueError(
            f"--kv-cache-dtype {name}: on {device.type} the attention backends read KV in the "
            f"activations' dtype ({act}); leave it auto or set --dtype {name}"
        )
    if not backend_reads_other:
        raise ValueError(
            f"--kv-cache-dtype {name}: attention backend {backend!r} reads KV in the "
            f"activations' dtype ({act}) only; choose --attention-backend cpu or torch_native"
        )
    return kv


def kv_dtype_name(dtype: torch.dtype) -> str:
    """The --kv-cache-dtype name of a pool dtype (fp8_e4m3 for torch.float8_e4m3fn)."""
    return _NAMES.get(dtype) or str(dtype).removeprefix("torch.")
