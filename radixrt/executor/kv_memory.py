"""A runner's KV memory: how many token slots fit, and the pools that hold them.

The token-slot pool (`TokenToKVPool`) and its allocator own every slot; `ReqToTokenPool` maps
each running request's positions to slots. With tensor parallelism every rank lays out the
same number of slots (the smallest any rank can afford).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from radixrt.cache.memory_pool import ReqToTokenPool, TokenSlotAllocator, TokenToKVPool
from radixrt.cache.paged_allocator import PagedSlotAllocator
from radixrt.config import CacheConfig
from radixrt.distributed.comm import BaseComm
from radixrt.models.arch import ArchConfig

CPU_MEM_FRACTION = 0.25  # of physical memory, weights included, when not configured
CUDA_MEM_FRACTION = 0.85  # of the device's memory, weights included


@dataclass(frozen=True, slots=True)
class KVMemory:
    token_to_kv_pool: TokenToKVPool
    allocator: TokenSlotAllocator
    req_to_token_pool: ReqToTokenPool
    capacity: int  # token slots


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
) -> KVMemory:
    """The pools for --max-total-tokens slots, or as many as the memory budget holds."""
    per_token = TokenToKVPool.bytes_per_token(
        arch.num_hidden_layers, num_kv_heads, arch.head_dim, dtype
    )
    capacity = cache.max_total_tokens or kv_budget_bytes(device, cache, weight_bytes) // per_token
    capacity = comm.min_int(capacity)  # every rank lays out the same slots
    page = cache.page_size
    capacity = capacity // page * page  # whole pages (the padding page comes on top)
    if capacity < 2 * page:
        raise ValueError(
            f"no memory left for the KV cache after {weight_bytes / 2**30:.2f} GiB of "
            "weights; raise mem_fraction_static or set max_total_tokens"
        )
    pool = TokenToKVPool(capacity, arch.num_hidden_layers, num_kv_heads, arch.head_dim, dtype,
                         device, page_size=page)  # fmt: skip
    allocator = (
        PagedSlotAllocator(capacity, page, device) if page > 1
        else TokenSlotAllocator(capacity, device)
    )  # fmt: skip
    return KVMemory(
        pool,
        allocator,
        ReqToTokenPool(max_running_requests + 1, context_len + 1, device),
        capacity,
    )
