"""The KV events wire schema (msgspec, msgpack): what kv_events.py publishes and a router
outside the process decodes. Plain Python, no torch: the standalone router imports it.

vLLM's and SGLang's schema: `KVEventBatch` [ts, events, data_parallel_rank], each event a tagged
array; radixrt appends the namespace as a trailing field of each block event (decoders of the
plain schema skip it). A block's hash is the first 8 bytes of its sha256 chain hash
(cache/blocks.py) as a non-negative int64.
"""

from __future__ import annotations

import msgspec

# The replay socket's last frame pair: this seq (8 signed big-endian bytes) and an empty payload.
END_SEQ = (-1).to_bytes(8, "big", signed=True)


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    """One change to the set of cached blocks."""


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None  # the block before the first one (None: at the root)
    token_ids: list[int]  # the tokens of every block in `block_hashes`, in order
    block_size: int
    lora_id: int | None
    medium: str | None  # "GPU" or "CPU": where the pool is
    namespace: str | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None
    namespace: str | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


def block_hash(chain_hash: bytes) -> int:
    """The event hash of a block: its chain hash's first 8 bytes, as a non-negative int64."""
    return int.from_bytes(chain_hash[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF
