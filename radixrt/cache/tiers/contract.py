"""What the radix tree and the KV manager see of the tiers below the device pool: a hit
(`TierHit`), a load's outcome, a tier's figures, and the `BaseKVTiers` contract with its null
object `NoKVTiers` (no lower tier: eviction drops, nothing loads). `KVTiers` (hierarchy.py) is
the one implementation over real tiers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch

from radixrt.cache.tree_node import TreeNode
from radixrt.core.messages import TierInfoMsg as TierInfo  # one tier's figures, sent as is


@dataclass(slots=True)
class TierHit:
    """Whole blocks, held by lower tiers, that continue a device match."""

    start: int  # the device match's end: the first token to load
    end: int  # one past the last token to load (a block boundary)
    first_block: int  # index of the block holding token `start`
    keys: list[bytes]  # hash of blocks first_block, first_block + 1, ...
    tiers: list[int]  # the tier (index into KVTiers.tiers) holding each
    path: np.ndarray  # (end,) uint32: the tokens to `end`
    extra_key: str | None

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


@dataclass(slots=True)
class LoadResult:
    tokens: int = 0  # loaded from `start`: a prefix of the hit, in whole blocks but the first
    by_tier: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class BaseKVTiers(ABC):
    """The contract the tree's spill observer (spill.py) and the KV manager (lookup, load,
    write-through) use; `NoKVTiers` when no lower tier is configured."""

    names: tuple[str, ...] = ()  # the lower tiers, top first ("host", "disk")

    @abstractmethod
    def spill(self, node: TreeNode) -> None:
        """`node` (a device leaf) is about to be evicted: keep the blocks it owns in the first
        tier that takes them, unless some tier holds them already. Reads the node's and its
        ancestors' slots, which must still hold their K/V; frees nothing."""

    @abstractmethod
    def wants_write_through(self, num_tokens: int) -> bool:
        """Whether a prefix of `num_tokens` just cached should be written through."""

    @abstractmethod
    def write_through(self, node: TreeNode) -> None:
        """Write the blocks of the path ending at `node` that the lowest tier lacks."""

    @abstractmethod
    def lookup(self, key: list[int], extra_key: str | None, start: int) -> TierHit | None:
        """The whole blocks of `key` that lower tiers hold from token `start` on, without a
        gap; None when not even one. Reads only the tiers' indexes."""

    @abstractmethod
    def load(self, hit: TierHit, slots: torch.Tensor) -> LoadResult:
        """Write hit's tokens [start, end) into device `slots` (end - start,), block by block,
        stopping at the first block that is gone or fails its checks; the slots past
        `result.tokens` are left unwritten (the caller frees them)."""

    @abstractmethod
    def clear(self, disk: bool) -> list[str]:
        """Drop the host tier's blocks, and the disk's when `disk`; the tiers cleared."""

    @abstractmethod
    def info(self) -> list[TierInfo]: ...

    def close(self) -> None:  # noqa: B027 (optional: tiers without threads need nothing)
        """Finish pending writes and stop I/O threads."""


class NoKVTiers(BaseKVTiers):
    """No tier below the device: eviction drops, nothing loads."""

    def spill(self, node: TreeNode) -> None:
        pass

    def wants_write_through(self, num_tokens: int) -> bool:
        return False

    def write_through(self, node: TreeNode) -> None:
        pass

    def lookup(self, key: list[int], extra_key: str | None, start: int) -> TierHit | None:
        return None

    def load(self, hit: TierHit, slots: torch.Tensor) -> LoadResult:
        return LoadResult()

    def clear(self, disk: bool) -> list[str]:
        return []

    def info(self) -> list[TierInfo]:
        return []
