"""Triton kernels for paged attention over the token-slot KV pool (page size 1).

Importing this package imports triton, so only `radixrt.attention.triton_backend` imports it,
and only when the `triton` backend is chosen. Whether the kernels run compiled (CUDA) or in
Triton's interpreter (CPU tensors, TRITON_INTERPRET=1) is fixed when this package is first
imported: `INTERPRETED` records which.
"""

from __future__ import annotations

import triton

from radixrt.attention.triton_kernels.decode_attention import decode_attention_fwd
from radixrt.attention.triton_kernels.extend_attention import extend_attention_fwd

INTERPRETED: bool = bool(triton.knobs.runtime.interpret)

__all__ = ["INTERPRETED", "decode_attention_fwd", "extend_attention_fwd"]
