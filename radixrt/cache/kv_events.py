"""KV events: what the radix tree stores and drops, told to routers outside the process.

The schema is the one vLLM and SGLang publish and llm-d's precise prefix scorer and Dynamo's
KV router consume: msgpack `KVEventBatch` [ts, events, data_parallel_rank], each event a
tagged array `BlockStored` [block_hashes, parent_block_hash, token_ids, block_size, lora_id,
medium], `BlockRemoved` [block_hashes, medium] or `AllBlocksCleared` []. radixrt appends the
namespace (tenant / cache salt; null for none) as one more trailing field of each block event;
msgspec decoders of the plain schema skip trailing fields they do not know.

The tree is token-granular; events speak of **blocks** of `block_size` tokens aligned on the
path from the namespace's root, as the lower tiers do (cache/blocks.py). A tree node of path
range [start, end) owns the blocks whose last token lies in it: they are stored when the node
is added and removed when it is evicted; splitting a node moves no block. So at any moment the
stored set is exactly the whole blocks of the cached paths, which a subscriber rebuilds from
the stream. A block's hash is the first 8 bytes of its sha256 chain hash (as a non-negative
int64), the chain starting from the namespace, so equal hashes mean equal token paths in one
namespace, whatever process computed them.

The events are a tree observer (tree_observer.py), added to the tree where the cache is built:
the tree calls `on_stored`, `on_evicted` and `on_cleared`; the scheduler loop calls `publish`
once per iteration, which hands one batch (if any event happened) to the publisher
(kv_events_zmq.py). `NoKVEvents` is the null object when events are off (never observing).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Protocol

from radixrt.cache.blocks import blocks_ending_in, chain_hashes, root_hash
from radixrt.cache.kv_event_schema import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVCacheEvent,
    KVEventBatch,
    block_hash,
)
from radixrt.cache.tree_node import TreeNode, path_key
from radixrt.cache.tree_observer import TreeObserver

__all__ = [
    "AllBlocksCleared",
    "BaseKVEvents",
    "BlockRemoved",
    "BlockStored",
    "KVCacheEvent",
    "KVEventBatch",
    "KVEvents",
    "NoKVEvents",
    "block_hash",
]


class EventSender(Protocol):
    """Where batches go (the ZMQ publisher; a list in tests)."""

    def send(self, batch: KVEventBatch) -> None: ...

    def close(self) -> None: ...


class NullSender:
    """Drops every batch (`"publisher": "null"`: events computed, not sent)."""

    def send(self, batch: KVEventBatch) -> None:
        pass

    def close(self) -> None:
        pass


class BaseKVEvents(TreeObserver, ABC):
    """Block events of the tree it observes; owns the events pending until `publish`."""

    @abstractmethod
    def on_stored(self, node: TreeNode) -> None:
        """`node` was just added to the tree (its parent chain is in place)."""

    @abstractmethod
    def on_evicted(self, node: TreeNode) -> None:
        """`node` (a leaf, still attached) is about to be evicted."""

    @abstractmethod
    def on_cleared(self) -> None:
        """The whole tree was dropped."""

    def publish(self) -> None:  # noqa: B027 (the null object has nothing to send)
        """Send what happened since the last call as one batch."""

    def close(self) -> None:  # noqa: B027
        """Stop the publisher."""


class NoKVEvents(BaseKVEvents):
    def on_stored(self, node: TreeNode) -> None:
        pass

    def on_evicted(self, node: TreeNode) -> None:
        pass

    def on_cleared(self) -> None:
        pass


class KVEvents(BaseKVEvents):
    """Events of blocks of `block_size` tokens, hashed from `salt` (a deployment's secret or
    b""), sent through `sender` as one batch per `publish`."""

    def __init__(self, sender: EventSender, block_size: int, medium: str,
                 salt: bytes = b"", dp_rank: int | None = None,
                 token_ids: bool = True) -> None:  # fmt: skip
        self.sender = sender
        self.token_ids = token_ids  # False: BlockStored's token_ids are empty (hashes only)
        self.block_size = block_size
        self.medium = medium
        self.salt = salt
        self.dp_rank = dp_rank
        self._pending: list[BlockStored | BlockRemoved | AllBlocksCleared] = []

    def on_stored(self, node: TreeNode) -> None:
        tokens, start = _path(node)
        blocks = blocks_ending_in(start, len(tokens), self.block_size)
        if not blocks:
            return
        b = self.block_size
        hashes = chain_hashes(tokens, b, root_hash(self.salt, node.extra_key), blocks.stop)
        parent = block_hash(hashes[blocks.start - 1]) if blocks.start else None
        self._pending.append(
            BlockStored(
                [block_hash(hashes[i]) for i in blocks],
                parent,
                tokens[blocks.start * b : blocks.stop * b] if self.token_ids else [],
                b,
                None,
                self.medium,
                node.extra_key,
            )  # fmt: skip
        )

    def on_evicted(self, node: TreeNode) -> None:
        tokens, start = _path(node)
        blocks = blocks_ending_in(start, len(tokens), self.block_size)
        if not blocks:
            return
        root = root_hash(self.salt, node.extra_key)
        hashes = chain_hashes(tokens, self.block_size, root, blocks.stop)
        removed = [block_hash(hashes[i]) for i in blocks]
        self._pending.append(BlockRemoved(removed, self.medium, node.extra_key))

    def on_cleared(self) -> None:
        self._pending = [AllBlocksCleared()]  # what came before no longer matters

    def publish(self) -> None:
        if self._pending:
            batch = KVEventBatch(time.time(), self._pending, self.dp_rank)
            self._pending = []
            self.sender.send(batch)

    def close(self) -> None:
        self.publish()
        self.sender.close()


def _path(node: TreeNode) -> tuple[list[int], int]:
    """The tokens from the root to `node`'s end, and where `node` starts."""
    tokens = path_key(node)
    return tokens, len(tokens) - len(node.key)
