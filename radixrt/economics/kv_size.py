"""KV cache sizing: bytes per token, per request and in all, and what fits on a GPU next to the
weights. Pure arithmetic on ModelFacts, so a running server can report the same figures.

Every size is shown in GB (1e9 bytes) and GiB (2**30 bytes) side by side: the two differ by 7%,
and mixing them (bytes / 2**20 / 1000) gives a third number that is neither.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from radixrt.economics.data import read_data
from radixrt.economics.model_facts import ModelFacts

GB = 10**9
GIB = 2**30
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
# Fraction of GPU memory for weights + KV pool, as the server's default (executor/kv_memory.py
# CUDA_MEM_FRACTION; a test keeps the two equal).
DEFAULT_MEM_FRACTION = 0.85


def kv_bytes_per_token(facts: ModelFacts, kv_dtype: str) -> int:
    """K and V of every layer for one token: 2 x layers x KV heads x head dim x dtype bytes."""
    return 2 * facts.num_layers * facts.num_kv_heads * facts.head_dim * DTYPE_BYTES[kv_dtype]


def mha_kv_bytes_per_token(facts: ModelFacts, kv_dtype: str) -> int:
    """The same with one KV head per query head (multi-head attention), for comparison."""
    return 2 * facts.num_layers * facts.num_heads * facts.head_dim * DTYPE_BYTES[kv_dtype]


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
class GpuFit:
    """What fits in `memory_bytes x mem_fraction` after the weights. Activations, CUDA graphs
    and the allocator's slack are not counted: the server measures those when it starts."""

    memory_bytes: int
    mem_fraction: float
    weight_bytes: int
    kv_room_bytes: int  # negative: the weights alone do not fit
    max_tokens: int  # whole pages of KV that fit
    num_pages: int
    max_requests: int  # requests of the sizing's context length

    @property
    def usable_bytes(self) -> int:
        return int(self.memory_bytes * self.mem_fraction)


@dataclass(frozen=True, slots=True)
class KvQuery:
    """What to size: `batch_size` requests of `context_len` tokens, weights at `dtype`, KV at
    `kv_dtype` (None: the weights' dtype), in pages of `page_size` tokens; on a GPU, weights and
    KV share `mem_fraction` of its memory."""

    dtype: str = "bf16"
    kv_dtype: str | None = None
    context_len: int = 8192
    batch_size: int = 1
    page_size: int = 1
    mem_fraction: float = DEFAULT_MEM_FRACTION

    def __post_init__(self) -> None:
        for name, value in (("dtype", self.dtype), ("kv_dtype", self.kv_dtype or self.dtype)):
            if value not in DTYPE_BYTES:
                raise ValueError(f"{name} must be one of {sorted(DTYPE_BYTES)}, got {value!r}")
        for name in ("context_len", "batch_size", "page_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.mem_fraction <= 1:
            raise ValueError(f"mem_fraction must be in (0, 1], got {self.mem_fraction}")

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
        if self.fit is not None:
            f = self.fit
            out["gpu"] = {
                "memory": _sized(f.memory_bytes),
                "mem_fraction_static": f.mem_fraction,
                "usable": _sized(f.usable_bytes),
                "weights": _sized(f.weight_bytes),
                "kv_room": _sized(f.kv_room_bytes),
                "max_tokens": f.max_tokens,
                "num_pages": f.num_pages,
                "max_requests": f.max_requests,
            }
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
        num_pages // pages_per_request,
    )  # fmt: skip
    return replace(sizing, fit=fit)


def format_kv_sizing(s: KvSizing, gpu_label: str | None = None) -> str:
    """The human-readable report of `radixrt kv-size`."""
    f, q = s.facts, s.query
    kv_dtype = q.kv_dtype_or_default
    lines = [
        f"model:       {f.name}  [{f.source}]",
        f"             {f.num_layers} layers, hidden {f.hidden_size}, {f.num_heads} heads, "
        f"{f.num_kv_heads} KV heads, head dim {f.head_dim}, vocab {f.vocab_size:,}, "
        f"{fmt_params(f.num_params)} parameters",
        f"KV per token ({kv_dtype}): {s.bytes_per_token:,} bytes = 2 x {f.num_layers} layers x "
        f"{f.num_kv_heads} KV heads x {f.head_dim} head dim x {_nbytes(DTYPE_BYTES[kv_dtype])}",
    ]
    if f.num_kv_heads < f.num_heads:
        lines.append(
            f"             GQA: {s.gqa_ratio:.1f}x smaller than MHA "
            f"({f.num_heads} KV heads would take {s.mha_bytes_per_token:,} bytes per token)"
        )
    paged = q.tokens_per_request
    rounded = "" if paged == q.context_len else f" ({paged:,} in pages of {q.page_size})"
    lines += [
        f"per request: {q.context_len:,} tokens{rounded}: {fmt_bytes(s.bytes_per_request)}",
        f"in total:    {q.batch_size} x {q.context_len:,} tokens: {fmt_bytes(s.total_bytes)}",
    ]
    if s.fit is None:
        return "\n".join(lines)
    g = s.fit
    lines += [
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
        return "\n".join(lines)
    enough = "enough" if g.max_requests >= q.batch_size else "not enough"
    lines += [
        f"KV room:     {fmt_bytes(g.kv_room_bytes)} = {g.max_tokens:,} tokens = "
        f"{g.num_pages:,} pages of {q.page_size}",
        f"fits:        {g.max_requests:,} requests of {q.context_len:,} tokens "
        f"({enough} for --batch {q.batch_size})",
    ]
    return "\n".join(lines)


def fmt_params(n: int) -> str:
    """'70.55 B', '134.5 M'."""
    return f"{n / 1e9:,.2f} B" if n >= 10**9 else f"{n / 1e6:,.1f} M"


def _sized(n: int) -> dict[str, float | int]:
    return {"bytes": n, "gb": n / GB, "gib": n / GIB}


def _nbytes(n: int) -> str:
    return "1 byte" if n == 1 else f"{n} bytes"


TORCH_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def pool_figures(
    facts: ModelFacts,
    torch_dtype: str,
    pool_tokens: int,
    pool_bytes: int,
    context_length: int,
    tp_size: int = 1,
) -> dict[str, Any]:
    """A running server's KV figures by this module's arithmetic, beside what its pool
    measured (`pool_bytes`: one rank's pool of `pool_tokens` slots): bytes per token of the
    whole model and of one rank, and how many requests of the full context the pool holds."""
    kv_dtype = TORCH_DTYPES.get(torch_dtype, torch_dtype)
    per_token = kv_bytes_per_token(facts, kv_dtype)
    per_rank = per_token // tp_size
    return {
        "kv_dtype": kv_dtype,
        "bytes_per_token": per_token,
        "bytes_per_token_per_rank": per_rank,
        "pool_tokens": pool_tokens,
        "pool_bytes_computed": per_rank * pool_tokens,
        "pool_bytes_measured": pool_bytes,
        "requests_of_full_context": pool_tokens // context_length,
    }
