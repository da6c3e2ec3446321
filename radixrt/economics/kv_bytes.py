"""KV bytes arithmetic: bytes per (token, KV head) row, per layer and per token, what a window
pool holds and how many requests fit in a number of slots, weights and GPU memory. Pure
arithmetic on ModelFacts (kv_size.py sizes a query with it, pool_figures.py a running pool).
Sizes are shown in GB (1e9 bytes) and GiB (2**30 bytes) side by side (`fmt_bytes`)."""

from __future__ import annotations

from radixrt.economics.data import read_data
from radixrt.economics.model_facts import ModelFacts

GB = 10**9
GIB = 2**30
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# Bytes beside each (token, KV head) row of K and of V: radixrt's CPU fp8 pools keep a float32
# scale per row (radixrt/cache/kv_layout.py); "fp8" is a format without scales (a GPU
# engine's, per tensor).
KV_ROW_SCALE_BYTES = {"fp8_e4m3": 4, "fp8_e5m2": 4}
# Fraction of GPU memory for weights + KV pool, as the server's default (executor/kv_memory.py
# CUDA_MEM_FRACTION; a test keeps the two equal).
DEFAULT_MEM_FRACTION = 0.85
# The server's window pool split (executor/kv_memory.py WINDOW_KV_FRACTION, WINDOW_POOL_SLACK;
# a test keeps them equal): window slots per full slot, and the window pool's least size
# beyond one window (or an eighth of the full pool, if less).
DEFAULT_WINDOW_KV_FRACTION = 0.5
WINDOW_POOL_SLACK = 2048


def kv_head_row_bytes(head_dim: int, kv_dtype: str) -> int:
    """One (token, KV head) row of K (or V): head dim x dtype bytes, plus its scale if any."""
    return head_dim * DTYPE_BYTES[kv_dtype] + KV_ROW_SCALE_BYTES.get(kv_dtype, 0)


def kv_bytes_per_layer_token(facts: ModelFacts, kv_dtype: str) -> int:
    """K and V of one layer for one token: 2 x KV heads x (head dim x dtype bytes + scale)."""
    return 2 * facts.num_kv_heads * kv_head_row_bytes(facts.head_dim, kv_dtype)


def kv_bytes_per_token(facts: ModelFacts, kv_dtype: str) -> int:
    """K and V of every layer for one token: 2 x layers x KV heads x row bytes."""
    return facts.num_layers * kv_bytes_per_layer_token(facts, kv_dtype)


def window_kv_bytes(facts: ModelFacts, kv_dtype: str, num_tokens: int) -> int:
    """K and V a request of `num_tokens` tokens holds with a window pool: the full layers' for
    every token, the window layers' for its last `sliding_window` tokens only."""
    window_tokens = min(num_tokens, facts.sliding_window)
    return kv_bytes_per_layer_token(facts, kv_dtype) * (
        facts.num_full_layers * num_tokens + facts.num_window_layers * window_tokens
    )


def window_pool_slots(
    facts: ModelFacts, kv_dtype: str, room_bytes: int, fraction: float
) -> tuple[int, int] | None:
    """(F, W): the full and window slots the server lays out in `room_bytes`: F from the room
    at one layer's bytes x (full layers + fraction x window layers) per slot, W = max(fraction
    x F, sliding_window + min(WINDOW_POOL_SLACK, F // 8)). None where it keeps one pool: no
    window layers, fraction 1, or W >= F."""
    if not facts.num_window_layers or fraction >= 1.0:
        return None
    per_layer = kv_bytes_per_layer_token(facts, kv_dtype)
    per_slot = per_layer * (facts.num_full_layers + fraction * facts.num_window_layers)
    full = int(max(room_bytes, 0) // per_slot)
    window = max(int(full * fraction), facts.sliding_window + min(WINDOW_POOL_SLACK, full // 8))
    return None if window >= full else (full, window)


def requests_that_fit(
    facts: ModelFacts, num_tokens: int, full_slots: int, window_slots: int = 0
) -> int:
    """Requests of `num_tokens` tokens that fit at once: each takes a full slot per token and,
    with a window pool (`window_slots` > 0), a window slot per token of its last window."""
    if not window_slots or not facts.sliding_window:
        return full_slots // num_tokens
    window_tokens = min(num_tokens, facts.sliding_window)
    return min(full_slots // num_tokens, window_slots // window_tokens)


def mha_kv_bytes_per_token(facts: ModelFacts, kv_dtype: str) -> int:
    """The same with one KV head per query head (multi-head attention), for comparison."""
    return 2 * facts.num_layers * facts.num_heads * kv_head_row_bytes(facts.head_dim, kv_dtype)


def weight_bytes(facts: ModelFacts, dtype: str) -> int:
    """Weights at `dtype`: parameters x bytes per parameter."""
    return facts.num_params * DTYPE_BYTES[dtype]


def gpu_memory_bytes(gpu: str) -> int:
    """Memory a named GPU reports (gpus.json); ValueError lists the names."""
    gpus = read_data("gpus.json")["gpus"]
    if gpu not in gpus:
        raise ValueError(f"unknown GPU {gpu!r}; known: {', '.join(gpus)}")
    return int(gpus[gpu]["memory_mib"]) * 2**20


def gpu_names() -> list[str]:
    return list(read_data("gpus.json")["gpus"])


def fmt_bytes(n: float) -> str:
    """'42.9 GB (40.0 GiB)'; below 1 GB in MB (1e6) and MiB (2**20)."""
    if abs(n) < GB:
        return f"{n / 1e6:,.1f} MB ({n / 2**20:,.1f} MiB)"
    return f"{n / GB:,.1f} GB ({n / GIB:,.1f} GiB)"
