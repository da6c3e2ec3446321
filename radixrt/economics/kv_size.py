"""KV cache sizing: bytes per token, per request and in all, and what fits on a GPU next to the
weights, for one query (model, context, batch, dtypes). Pure arithmetic on ModelFacts
(kv_bytes.py), so a running server can report the same figures; kv_size_report.py prints it.

A model with sliding-window layers is sized both ways: with every layer in one pool, and with
its window layers' K/V in a pool of their own as radixrt splits it (executor/kv_memory.py),
where a request keeps their K/V only for its last `sliding_window` tokens.

Every size is shown in GB (1e9 bytes) and GiB (2**30 bytes) side by side: the two differ by 7%,
and mixing them (bytes / 2**20 / 1000) gives a third number that is neither.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from radixrt.economics.kv_bytes import (
    DEFAULT_MEM_FRACTION,
    DEFAULT_WINDOW_KV_FRACTION,
    DTYPE_BYTES,
    GB,
    GIB,
    kv_bytes_per_token,
    mha_kv_bytes_per_token,
    requests_that_fit,
    weight_bytes,
    window_kv_bytes,
    window_pool_slots,
)
from radixrt.economics.model_facts import ModelFacts


@dataclass(frozen=True, slots=True)
class WindowPoolFit:
    """The KV room split as radixrt splits it for a model with window layers: `full_slots`
    (the full layers' K/V; every token takes one) and `window_slots` (the window layers' K/V;
    a request holds those of its last window)."""

    window_kv_fraction: float  # window slots per full slot
    full_slots: int
    window_slots: int
    max_requests: int  # requests of the sizing's context length


@dataclass(frozen=True, slots=True)
class GpuFit:
    """What fits in `memory_bytes x mem_fraction` after the weights. Activations, CUDA graphs
    and the allocator's slack are not counted: the server measures those when it starts."""

    memory_bytes: int
    mem_fraction: float
    weight_bytes: int
    kv_room_bytes: int  # negative: the weights alone do not fit
    max_tokens: int  # whole pages of KV that fit
    num_pages: int
    max_requests: int  # requests of the sizing's context length, every layer in one pool
    # A model with window layers: the room split into a window pool; None where radixrt keeps
    # one pool (no window layers, pages > 1, or too little room to split).
    window: WindowPoolFit | None = None

    @property
    def usable_bytes(self) -> int:
        return int(self.memory_bytes * self.mem_fraction)


@dataclass(frozen=True, slots=True)
class KvQuery:
    """What to size: `batch_size` requests of `context_len` tokens, weights at `dtype`, KV at
    `kv_dtype` (None: the weights' dtype), in pages of `page_size` tokens; on a GPU, weights and
    KV share `mem_fraction` of its memory, and a model with window layers gets
    `window_kv_fraction` window slots per full slot (as the server's --window-kv-fraction)."""

    dtype: str = "bf16"
    kv_dtype: str | None = None
    context_len: int = 8192
    batch_size: int = 1
    page_size: int = 1
    mem_fraction: float = DEFAULT_MEM_FRACTION
    window_kv_fraction: float = DEFAULT_WINDOW_KV_FRACTION

    def __post_init__(self) -> None:
        for name, value in (("dtype", self.dtype), ("kv_dtype", self.kv_dtype or self.dtype)):
            if value not in DTYPE_BYTES:
                raise ValueError(f"{name} must be one of {sorted(DTYPE_BYTES)}, got {value!r}")
        for name in ("context_len", "batch_size", "page_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.mem_fraction <= 1:
            raise ValueError(f"mem_fraction must be in (0, 1], got {self.mem_fraction}")
        if not 0 < self.window_kv_fraction <= 1:
            raise ValueError(f"window_kv_fraction must be in (0, 1], got {self.window_kv_fraction}")

    @property
    def kv_dtype_or_default(self) -> str:
        return self.kv_dtype or self.dtype

    @property
    def tokens_per_request(self) -> int:
        """The context rounded up to whole pages."""
        return -(-self.context_len // self.page_size) * self.page_size


@dataclass(frozen=True, slots=True)
class KvSizing:
    facts: ModelFacts
    query: KvQuery
    bytes_per_token: int
    mha_bytes_per_token: int
    fit: GpuFit | None

    @property
    def bytes_per_request(self) -> int:
        return self.bytes_per_token * self.query.tokens_per_request

    @property
    def total_bytes(self) -> int:
        return self.bytes_per_request * self.query.batch_size

    @property
    def has_windows(self) -> bool:
        return self.facts.num_window_layers > 0

    @property
    def window_bytes_per_request(self) -> int:
        """What a request holds with a window pool (bytes_per_request without window layers)."""
        q = self.query
        return window_kv_bytes(self.facts, q.kv_dtype_or_default, q.tokens_per_request)

    @property
    def window_total_bytes(self) -> int:
        return self.window_bytes_per_request * self.query.batch_size

    @property
    def gqa_ratio(self) -> float:
        """How many times smaller than multi-head attention (1.0 without GQA)."""
        return self.facts.num_heads / self.facts.num_kv_heads

    def to_dict(self) -> dict[str, object]:
        q = self.query
        out: dict[str, object] = {
            "model": self.facts.to_dict(),
            "dtype": q.dtype,
            "kv_dtype": q.kv_dtype_or_default,
            "context_len": q.context_len,
            "batch_size": q.batch_size,
            "page_size": q.page_size,
            "kv_bytes_per_token": self.bytes_per_token,
            "mha_kv_bytes_per_token": self.mha_bytes_per_token,
            "gqa_ratio": self.gqa_ratio,
            "kv_bytes_per_request": _sized(self.bytes_per_request),
            "kv_bytes_total": _sized(self.total_bytes),
        }
        if self.has_windows:
            out["windows"] = {
                "sliding_window": self.facts.sliding_window,
                "num_window_layers": self.facts.num_window_layers,
                "kv_bytes_per_request": _sized(self.window_bytes_per_request),
                "kv_bytes_total": _sized(self.window_total_bytes),
            }
        if self.fit is not None:
            f = self.fit
            gpu: dict[str, object] = {
                "memory": _sized(f.memory_bytes),
                "mem_fraction_static": f.mem_fraction,
                "usable": _sized(f.usable_bytes),
                "weights": _sized(f.weight_bytes),
                "kv_room": _sized(f.kv_room_bytes),
                "max_tokens": f.max_tokens,
                "num_pages": f.num_pages,
                "max_requests": f.max_requests,
            }
            if self.has_windows:  # None: radixrt keeps one pool
                gpu["window_pool"] = None if f.window is None else asdict(f.window)
            out["gpu"] = gpu
        return out


def size_kv(facts: ModelFacts, query: KvQuery, gpu_memory: int | None = None) -> KvSizing:
    """Size the query's KV cache; with `gpu_memory` (bytes), also what fits there."""
    kv_dtype = query.kv_dtype_or_default
    per_token = kv_bytes_per_token(facts, kv_dtype)
    sizing = KvSizing(facts, query, per_token, mha_kv_bytes_per_token(facts, kv_dtype), None)
    if gpu_memory is None:
        return sizing
    weights = weight_bytes(facts, query.dtype)
    room = int(gpu_memory * query.mem_fraction) - weights
    num_pages = max(room, 0) // (per_token * query.page_size)
    pages_per_request = query.tokens_per_request // query.page_size
    fit = GpuFit(
        gpu_memory, query.mem_fraction, weights, room, num_pages * query.page_size, num_pages,
        num_pages // pages_per_request, _window_fit(facts, query, room),
    )  # fmt: skip
    return replace(sizing, fit=fit)


def _window_fit(facts: ModelFacts, query: KvQuery, room_bytes: int) -> WindowPoolFit | None:
    """The window pool split of the room; the server splits only pages of one token."""
    if query.page_size > 1:
        return None
    fraction = query.window_kv_fraction
    split = window_pool_slots(facts, query.kv_dtype_or_default, room_bytes, fraction)
    if split is None:
        return None
    full, window = split
    requests = requests_that_fit(facts, query.tokens_per_request, full, window)
    return WindowPoolFit(fraction, full, window, requests)


def _sized(n: int) -> dict[str, float | int]:
    return {"bytes": n, "gb": n / GB, "gib": n / GIB}
