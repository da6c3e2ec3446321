"""A runner's KV memory: how many token slots fit, and the pools that hold them.

The token-slot pool (`TokenToKVPool`) and its allocator own every slot; `ReqToTokenPool` maps
each running request's positions to slots. With tensor parallelism every rank lays out the
same number of slots (the smallest any rank can afford). A model with sliding-window layers
keeps their K/V in a window pool of `window_kv_fraction` as many slots (cache/window_base.py)
where that can work: one rank, pages of one slot, no lower tiers, an attention backend that
reads the window pool; else every layer shares the one pool.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from radixrt.cache.memory_pool import ReqToTokenPool, TokenSlotAllocator, TokenToKVPool
from radixrt.cache.paged_allocator import PagedSlotAllocator
from radixrt.cache.window_base import BaseWindowSlots
from radixrt.cache.window_slots import WindowSlots
from radixrt.core.config import CacheConfig
from radixrt.model.families.arch import ArchConfig
from radixrt.model.parallel.comm import BaseComm

CPU_MEM_FRACTION = 0.25  # of physical memory, weights included, when not configured
CUDA_MEM_FRACTION = 0.85  # of the device's memory, weights included
WINDOW_KV_FRACTION = 0.5  # window pool slots per full pool slot, when not configured
# The window pool holds at least a window plus this many tokens (or an eighth of the full
# pool, if less), so a request can run a whole prefill chunk (512 on the CPU, 2048 on CUDA)
# over a full window; a request needs a window plus one token to move at all.
WINDOW_POOL_SLACK = 2048


@dataclass(frozen=True, slots=True)
class KVMemory:
    token_to_kv_pool: TokenToKVPool
    allocator: TokenSlotAllocator
    req_to_token_pool: ReqToTokenPool
    capacity: int  # token slots


@dataclass(frozen=True, slots=True)
class KVBeside:
    """Memory kept per slot beside the pool, and weights beside the model's, out of the same
    budget: a draft model's K/V (indexed by the pool's slot ids, `values_per_slot` values in
    the model's dtype) and its weights. The default is nothing beside."""

    values_per_slot: int = 0  # 2 * layers * kv heads * head_dim
    weight_bytes: int = 0


NOTHING_BESIDE = KVBeside()


def kv_budget_bytes(device: torch.device, cache: CacheConfig, weight_bytes: int) -> int:
    """Bytes the KV pool may take: --mem-fraction-static of the device's memory (CUDA: of
    what torch reports after the weights loaded; CPU: of physical memory) less the weights."""
    if device.type == "cuda":
        fraction = cache.mem_fraction_static or CUDA_MEM_FRACTION
        torch.cuda.empty_cache()  # cached blocks no tensor holds: mem_get_info counts them used
        free, total = torch.cuda.mem_get_info(device)
        return int(free - total * (1 - fraction))
    fraction = cache.mem_fraction_static or CPU_MEM_FRACTION
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(total * fraction) - weight_bytes


def build_kv_memory(
    arch: ArchConfig,
    num_kv_heads: int,
    dtype: torch.dtype,
    device: torch.device,
    cache: CacheConfig,
    weight_bytes: int,
    comm: BaseComm,
    max_running_requests: int,
    context_len: int,
    window_pool: bool = False,
    beside: KVBeside = NOTHING_BESIDE,
    beside_dtype: torch.dtype = torch.float32,
) -> KVMemory:
    """The pools for --max-total-tokens slots, or as many as the memory budget holds;
    `window_pool`: the caller's backend and setup can keep window layers in their own pool;
    `beside`: what else each slot and the budget carry (a draft model's K/V, in
    `beside_dtype`, and weights)."""
    window_layers = tuple(i for i, w in enumerate(arch.layer_windows) if w)
    fraction = window_fraction(cache) if window_pool and window_layers else 1.0
    if fraction >= 1.0:
        window_layers = ()
    per_layer = TokenToKVPool.bytes_per_token(1, num_kv_heads, arch.head_dim, dtype)
    weight_bytes += beside.weight_bytes
    budget = None if cache.max_total_tokens else kv_budget_bytes(device, cache, weight_bytes)
    num_window = len(window_layers)
    split = per_layer * (arch.num_hidden_layers - (1 - fraction) * num_window)
    beside_bytes = beside.values_per_slot * beside_dtype.itemsize
    split += beside_bytes
    capacity = _capacity(cache, budget, split, comm, weight_bytes)
    window = _window_slots(arch, capacity, fraction, window_layers, device)
    if window is None and window_layers:  # the split would not be smaller: one pool
        window_layers = ()
        whole = per_layer * arch.num_hidden_layers + beside_bytes
        capacity = _capacity(cache, budget, whole, comm, weight_bytes)
    page = cache.page_size
    pool = TokenToKVPool(capacity, arch.num_hidden_layers, num_kv_heads, arch.head_dim, dtype,
                         device, page, window_layers, window)  # fmt: skip
    allocator = (
        PagedSlotAllocator(capacity, page, device) if page > 1
        else TokenSlotAllocator(capacity, device, window)
    )  # fmt: skip
    return KVMemory(
        pool,
        allocator,
        ReqToTokenPool(max_running_requests + 1, context_len + 1, device),
        capacity,
    )


def _capacity(
    cache: CacheConfig, budget: int | None, per_slot: float, comm: BaseComm, weight_bytes: int
) -> int:
    """Full-pool slots: --max-total-tokens, or what `budget` bytes hold at `per_slot` bytes
    each, the same on every rank, in whole pages; ValueError when not even two pages fit."""
    capacity = cache.max_total_tokens or int(budget // per_slot)  # type: ignore[operator]
    capacity = comm.min_int(capacity)  # every rank lays out the same slots
    page = cache.page_size
    capacity = capacity // page * page  # whole pages (the padding page comes on top)
    if capacity < 2 * page:
        raise ValueError(
            f"no memory left for the KV cache after {weight_bytes / 2**30:.2f} GiB of "
            "weights; raise mem_fraction_static or set max_total_tokens"
        )
    return capacity


def window_fraction(cache: CacheConfig) -> float:
    """Window pool slots per full pool slot: 1 (one pool) where the pool cannot split, or
    when --max-total-tokens asks for a number of tokens without --window-kv-fraction (a split
    would hold fewer requests shorter than the window than the tokens asked for)."""
    if cache.page_size > 1 or cache.tiers_enabled:
        return 1.0
    if cache.window_kv_fraction is not None:
        return cache.window_kv_fraction
    return 1.0 if cache.max_total_tokens else WINDOW_KV_FRACTION


def _window_slots(
    arch: ArchConfig,
    capacity: int,
    fraction: float,
    window_layers: tuple[int, ...],
    device: torch.device,
) -> BaseWindowSlots | None:
    """The window pool for `capacity` full slots, or None where it would not be smaller."""
    if not window_layers:
        return None
    slack = min(WINDOW_POOL_SLACK, capacity // 8)
    size = max(int(capacity * fraction), arch.sliding_window + slack)
    if size >= capacity:
        return None
    return WindowSlots(capacity, size, arch.sliding_window, device)
