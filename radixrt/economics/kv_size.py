"""KV cache sizing: bytes per token, per request and in all, and what fits on a GPU next to the
weights. Pure arithmetic on ModelFacts, so a running server can report the same figures.

A model with sliding-window layers is sized both ways: with every layer in one pool, and with
its window layers' K/V in a pool of their own as radixrt splits it (executor/kv_memory.py),
where a request keeps their K/V only for its last `sliding_window` tokens.

Every size is shown in GB (1e9 bytes) and GiB (2**30 bytes) side by side: the two differ by 7%,
and mixing them (bytes / 2**20 / 1000) gives a third number that is neither.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

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


def format_kv_sizing(s: KvSizing, gpu_label: str | None = None) -> str:
    """The human-readable report of `radixrt kv-size`; a model with window layers gets its
    per-request figures and what fits both in one pool and with a window pool."""
    f, q = s.facts, s.query
    kv_dtype = q.kv_dtype_or_default
    lines = [
        f"model:       {f.name}  [{f.source}]",
        f"             {f.num_layers} layers, hidden {f.hidden_size}, {f.num_heads} heads, "
        f"{f.num_kv_heads} KV heads, head dim {f.head_dim}, vocab {f.vocab_size:,}, "
        f"{fmt_params(f.num_params)} parameters",
        f"KV per token ({kv_dtype}): {s.bytes_per_token:,} bytes = 2 x {f.num_layers} layers x "
        f"{f.num_kv_heads} KV heads x {f.head_dim} head dim x {_nbytes(DTYPE_BYTES[kv_dtype])}"
        + (f" (+ a {KV_ROW_SCALE_BYTES[kv_dtype]}-byte scale per KV head)"
           if kv_dtype in KV_ROW_SCALE_BYTES else ""),
    ]  # fmt: skip
    if f.num_kv_heads < f.num_heads:
        lines.append(
            f"             GQA: {s.gqa_ratio:.1f}x smaller than MHA "
            f"({f.num_heads} KV heads would take {s.mha_bytes_per_token:,} bytes per token)"
        )
    paged = q.tokens_per_request
    rounded = "" if paged == q.context_len else f" ({paged:,} in pages of {q.page_size})"
    per_request, total = fmt_bytes(s.bytes_per_request), fmt_bytes(s.total_bytes)
    if s.has_windows:
        window_tokens = min(paged, f.sliding_window)
        lines.append(
            f"windows:     {f.num_window_layers} of {f.num_layers} layers see the last "
            f"{f.sliding_window:,} tokens: a window pool keeps their K/V for those only"
        )
        per_request += (
            f" in one pool; {fmt_bytes(s.window_bytes_per_request)} with a window pool "
            f"({f.num_full_layers} layers x {paged:,} tokens + {f.num_window_layers} x "
            f"{window_tokens:,})"
        )
        total += f" in one pool; {fmt_bytes(s.window_total_bytes)} with a window pool"
    lines += [
        f"per request: {q.context_len:,} tokens{rounded}: {per_request}",
        f"in total:    {q.batch_size} x {q.context_len:,} tokens: {total}",
    ]
    if s.fit is not None:
        lines += _gpu_lines(s, gpu_label)
    return "\n".join(lines)


def _gpu_lines(s: KvSizing, gpu_label: str | None) -> list[str]:
    f, q, g = s.facts, s.query, s.fit
    assert g is not None
    lines = [
        f"GPU:         {gpu_label or 'memory'} {fmt_bytes(g.memory_bytes)} x {g.mem_fraction} "
        f"(--mem-fraction-static) = {fmt_bytes(g.usable_bytes)}",
        f"weights:     {fmt_params(f.num_params)} x {_nbytes(DTYPE_BYTES[q.dtype])} ({q.dtype}) = "
        f"{fmt_bytes(g.weight_bytes)}",
    ]
    if g.kv_room_bytes <= 0:
        lines.append(
            f"KV room:     none: the weights exceed the usable memory by "
            f"{fmt_bytes(-g.kv_room_bytes)}"
        )
        return lines
    one_pool = " in one pool" if s.has_windows else ""
    lines += [
        f"KV room:     {fmt_bytes(g.kv_room_bytes)} = {g.max_tokens:,} tokens = "
        f"{g.num_pages:,} pages of {q.page_size}",
        f"fits:        {g.max_requests:,} requests of {q.context_len:,} tokens{one_pool} "
        f"({_enough(g.max_requests, q.batch_size)})",
    ]
    if s.has_windows:
        lines += _window_pool_lines(s)
    return lines


def _window_pool_lines(s: KvSizing) -> list[str]:
    f, q, g = s.facts, s.query, s.fit
    assert g is not None
    w = g.window
    if w is None:
        why = f"pages of {q.page_size}" if q.page_size > 1 else "too little room to split"
        return [f"window pool: none ({why}): radixrt keeps one pool"]
    return [
        f"window pool: {w.full_slots:,} slots for the {f.num_full_layers} full layers + "
        f"{w.window_slots:,} for the {f.num_window_layers} window layers "
        f"(--window-kv-fraction {w.window_kv_fraction})",
        f"fits:        {w.max_requests:,} requests of {q.context_len:,} tokens with the window "
        f"pool ({_enough(w.max_requests, q.batch_size)})",
    ]


def _enough(num_requests: int, batch_size: int) -> str:
    return f"{'enough' if num_requests >= batch_size else 'not enough'} for --batch {batch_size}"


def fmt_params(n: int) -> str:
    """'70.55 B', '134.5 M'."""
    return f"{n / 1e9:,.2f} B" if n >= 10**9 else f"{n / 1e6:,.1f} M"


def _sized(n: int) -> dict[str, float | int]:
    return {"bytes": n, "gb": n / GB, "gib": n / GIB}


def _nbytes(n: int) -> str:
    return "1 byte" if n == 1 else f"{n} bytes"
