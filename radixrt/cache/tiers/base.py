"""`BaseKVTier`: a store of KV blocks below the device pool (host memory, a disk directory),
keyed by the blocks' chain hashes (radixrt/cache/blocks.py), each with its own LRU and bound.

A tier never decides what the tree holds: the hierarchy (hierarchy.py) asks it whether a block
is there, gives it blocks to keep, and reads blocks back. A tier may drop any block at any time
to make room (that is its LRU); a block it dropped is simply absent at the next lookup, so the
tree never points at data a tier has dropped (the tree indexes the device pool only).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(slots=True)
class Block:
    """One block on its way into a tier."""

    key: bytes  # its chain hash
    index: int  # block index along the path: tokens [index * B, (index + 1) * B)
    # (>= (index + 1) * B,) uint32: the token path from the namespace's root, at least to the
    # block's end; often a view shared by the blocks of one spill.
    path: np.ndarray
    # (num_layers, 2, B, num_kv_heads, head_dim) in the pool's dtype on the CPU (pinned with
    # CUDA); owned by the tier once `put` returns.
    data: torch.Tensor
    extra_key: str | None = None  # the namespace (disk files record it and check it on load)


@dataclass(slots=True)
class TierCounters:
    """What a tier did since start (blocks, tokens, seconds)."""

    stored_blocks: int = 0  # blocks put (spilled or written through into this tier)
    dropped_blocks: int = 0  # blocks its LRU pushed out (to the next tier, or gone)
    hit_tokens: int = 0  # tokens loaded back to the device from here
    loaded_blocks: int = 0
    load_s: float = 0.0
    corrupt_blocks: int = 0  # failed their checks on load: dropped, recomputed instead
    write_errors: int = 0  # blocks that could not be stored (I/O errors)
    extra: dict[str, float] = field(default_factory=dict)


class BaseKVTier(ABC):
    """A bounded block store. Called from the scheduler's thread only (a tier may run its own
    I/O thread behind these calls)."""

    name: str  # "host" or "disk"

    def __init__(self, block_bytes: int, capacity_bytes: int) -> None:
        self.block_bytes = block_bytes  # K/V bytes of one block
        self.capacity_bytes = capacity_bytes
        self.counters = TierCounters()

    @abstractmethod
    def contains(self, key: bytes) -> bool:
        """Whether block `key` can be read now (it may still fail its checks on `get`)."""

    @abstractmethod
    def put(self, block: Block) -> list[Block]:
        """Keep `block` (a block already held is only marked used); returns the blocks pushed
        out to make room, least recently used first, for the next tier down. A block that
        cannot be kept at all (an I/O error) is counted in `write_errors` and dropped."""

    @abstractmethod
    def get(
        self, key: bytes, index: int, path: np.ndarray, extra_key: str | None
    ) -> torch.Tensor | None:
        """Block `key`'s K/V, (num_layers, 2, B, num_kv_heads, head_dim), after checking that
        it holds `path[: (index + 1) * B]` in namespace `extra_key`; marks it used. None when
        it is absent or fails a check (it is then dropped and counted as corrupt)."""

    @abstractmethod
    def clear(self) -> None:
        """Drop every block this tier holds (for this model)."""

    @property
    @abstractmethod
    def num_blocks(self) -> int:
        """Blocks held now."""

    def close(self) -> None:  # noqa: B027 (optional: tiers without threads need nothing)
        """Finish pending I/O and stop any thread the tier runs."""

    @property
    def used_bytes(self) -> int:
        return self.num_blocks * self.block_bytes

    @property
    def capacity_blocks(self) -> int:
        return self.capacity_bytes // self.block_bytes if self.block_bytes else 0
