"""A running server's KV pool by `radixrt kv-size`'s arithmetic (kv_bytes.py), beside what the
pool measured: `/get_server_info`'s `kv_sizing`."""

from __future__ import annotations

from typing import Any

from radixrt.economics.kv_bytes import (
    kv_bytes_per_layer_token,
    kv_bytes_per_token,
    requests_that_fit,
)
from radixrt.economics.model_facts import ModelFacts

TORCH_DTYPES = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float8_e4m3fn": "fp8_e4m3",  # with a float32 scale per (token, KV head): kv_bytes.py
    "float8_e5m2": "fp8_e5m2",
}


def pool_figures(
    facts: ModelFacts,
    torch_dtype: str,
    pool_tokens: int,
    pool_bytes: int,
    context_length: int,
    tp_size: int = 1,
    window_pool_tokens: int = 0,
    num_window_layers: int = 0,
) -> dict[str, Any]:
    """The figures of one rank's pool of `pool_tokens` slots (and, with a window pool, of
    `window_pool_tokens` window slots for `num_window_layers` layers) that measured
    `pool_bytes`: bytes per token of the whole model and of one rank, the pool's bytes, and
    how many requests of the full context it holds at once; with a window pool, also what one
    pool of the same bytes would hold (`one_pool`)."""
    kv_dtype = TORCH_DTYPES.get(torch_dtype, torch_dtype)
    per_token = kv_bytes_per_token(facts, kv_dtype)
    per_rank = per_token // tp_size
    out: dict[str, Any] = {
        "kv_dtype": kv_dtype,
        "bytes_per_token": per_token,
        "bytes_per_token_per_rank": per_rank,
        "pool_tokens": pool_tokens,
        "window_pool_tokens": window_pool_tokens,
        "num_window_layers": num_window_layers if window_pool_tokens else 0,
        "pool_bytes_computed": per_rank * pool_tokens,
        "pool_bytes_measured": pool_bytes,
        "requests_of_full_context": pool_tokens // context_length,
    }
    if not window_pool_tokens:
        return out
    # The full pool holds the full layers' K/V, the window pool the window layers'.
    per_layer = kv_bytes_per_layer_token(facts, kv_dtype) // tp_size
    num_full_layers = facts.num_layers - num_window_layers
    computed = per_layer * (num_full_layers * pool_tokens + num_window_layers * window_pool_tokens)
    one_pool_tokens = computed // per_rank
    out["pool_bytes_computed"] = computed
    out["requests_of_full_context"] = requests_that_fit(
        facts, context_length, pool_tokens, window_pool_tokens
    )
    out["one_pool"] = {
        "pool_tokens": one_pool_tokens,
        "pool_bytes": one_pool_tokens * per_rank,
        "requests_of_full_context": one_pool_tokens // context_length,
    }
    return out
