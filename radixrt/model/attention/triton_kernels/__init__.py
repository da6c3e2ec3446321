"""Triton kernels for paged attention over the token-slot KV pool (page size 1).

Importing this package imports triton, so only `radixrt.model.attention.triton_backend` imports it,
and only when the `triton` backend is chosen. Whether the kernels run compiled (CUDA) or in
Triton's interpreter (CPU tensors, TRITON_INTERPRET=1) is fixed when this package is first
imported: `INTERPRETED` records which.
"""

from __future__ import annotations

import os

import triton

from radixrt.model.attention.triton_kernels.decode_attention import decode_attention_fwd
from radixrt.model.attention.triton_kernels.extend_attention import extend_attention_fwd


def _interpreted() -> bool:
    knobs = getattr(triton, "knobs", None)  # triton >= 3.4; older ones read the variable
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


INTERPRETED: bool = _interpreted()

__all__ = ["INTERPRETED", "decode_attention_fwd", "extend_attention_fwd"]
