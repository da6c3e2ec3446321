"""`HostTier`: KV blocks in host memory, one preallocated buffer of fixed-size block slots
(page-locked with CUDA, so copies to and from the device run at full speed).

Ownership: buffer slot i belongs to the block `_entries` maps to it, or is in `_free`; a
block pushed out by the LRU is copied out of its slot before the slot is reused.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from radixrt.cache.tiers.base import BaseKVTier, Block

# Of the memory the kernel reports available, the share the host tier may commit: the rest is
# left to activations, the tokenizer and other processes (committing more gets the process
# killed by the OOM killer at start, with no message).
MAX_AVAILABLE_FRACTION = 0.9


class HostTier(BaseKVTier):
    """Up to `capacity_bytes // block_bytes` blocks; least recently used pushed out first."""

    name = "host"

    def __init__(self, block_shape: tuple[int, ...], dtype: torch.dtype, capacity_bytes: int,
                 pin_memory: bool = False) -> None:  # fmt: skip
        numel = int(np.prod(block_shape))
        block_bytes = numel * torch.empty((), dtype=dtype).element_size()
        super().__init__(block_bytes, capacity_bytes)
        n = self.capacity_blocks
        if n < 1:
            raise ValueError(
                f"host_cache_size holds no block: a block of this model takes {block_bytes} bytes"
            )
        _check_memory_available(n * block_bytes)
        # (n, *block_shape): slot i holds one block's K/V.
        # Zeroed at start: its pages are committed now, not on the first spill into each slot.
        self._buffer = torch.zeros((n, *block_shape), dtype=dtype, pin_memory=pin_memory)
        self._free = list(range(n - 1, -1, -1))
        # key -> (slot, the token path to the block's end (a view), namespace); LRU order.
        self._entries: OrderedDict[bytes, tuple[int, np.ndarray, str | None]] = OrderedDict()

    def contains(self, key: bytes) -> bool:
        return key in self._entries

    def put(self, block: Block) -> list[Block]:
        if block.key in self._entries:
            self._entries.move_to_end(block.key)
            return []
        out: list[Block] = []
        if not self._free:
            out.append(self._pop_lru())
        slot = self._free.pop()
        self._buffer[slot].copy_(block.data)
        end = (block.index + 1) * block.data.shape[2]
        self._entries[block.key] = (slot, block.path[:end], block.extra_key)
        self.counters.stored_blocks += 1
        return out

    def get(
        self, key: bytes, index: int, path: np.ndarray, extra_key: str | None
    ) -> torch.Tensor | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        slot, own_path, ns = entry
        if ns != extra_key or not np.array_equal(own_path, path[: own_path.shape[0]]):
            # Equal chain hashes over other tokens: never served.
            self._discard(key)
            self.counters.corrupt_blocks += 1
            return None
        self._entries.move_to_end(key)
        return self._buffer[slot]

    def clear(self) -> None:
        self._free = list(range(self._buffer.shape[0] - 1, -1, -1))
        self._entries.clear()

    @property
    def num_blocks(self) -> int:
        return len(self._entries)

    def _pop_lru(self) -> Block:
        key, (slot, path, ns) = next(iter(self._entries.items()))
        index = path.shape[0] // self._buffer.shape[3] - 1
        block = Block(key, index, path, self._buffer[slot].clone(), ns)
        self._discard(key)
        self.counters.dropped_blocks += 1
        return block

    def _discard(self, key: bytes) -> None:
        slot, _, _ = self._entries.pop(key)
        self._free.append(slot)


def _check_memory_available(num_bytes: int) -> None:
    """Raise ValueError when `num_bytes` more of host memory would not fit (Linux's
    MemAvailable; nothing is checked where /proc/meminfo is absent)."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return
    kb = next((int(ln.split()[1]) for ln in lines if ln.startswith("MemAvailable:")), None)
    if kb is None:
        return
    available = kb * 1024
    if num_bytes > available * MAX_AVAILABLE_FRACTION:
        raise ValueError(
            f"--host-cache-size asks for {num_bytes / 1e9:.1f} GB of host memory but "
            f"{available / 1e9:.1f} GB is available; lower it (at most "
            f"{available * MAX_AVAILABLE_FRACTION / 1e9:.1f} GB)"
        )
