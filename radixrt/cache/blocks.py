"""Path-aligned KV blocks and their chain hashes: the unit the lower cache tiers store and KV
events publish.

A token path (the tokens from the root of a namespace's tree) is cut into blocks of
`block_size` tokens at offsets 0, B, 2B, ...; a trailing partial block has no hash and is
never stored. Block b's hash is sha256(hash of block b-1 || its tokens as little-endian
uint32), with block -1's hash the `root` of the namespace (`root_hash`: a salt such as a model
fingerprint, and the namespace), so equal hashes mean equal whole paths in one namespace
under one salt, and a block's hash names the whole prefix up to its end.

In the radix tree a block belongs to the node its last token lies in: the node of path range
[start, end) owns the blocks whose end lies in (start, end] (`blocks_ending_in`). A block may
begin in an ancestor; leaf-first eviction removes a node before its ancestors, so every block
of a node can be read from the pool while the node is still there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

HASH_BYTES = 32  # sha256


def root_hash(salt: bytes, extra_key: str | None) -> bytes:
    """The chain's start for namespace `extra_key` under `salt` (None and "" differ)."""
    ns = b"\x00" if extra_key is None else b"\x01" + extra_key.encode("utf-8", "surrogatepass")
    return hashlib.sha256(b"radixrt-blocks\x00" + salt + b"\x00" + ns).digest()


def token_bytes(tokens: Sequence[int]) -> bytes:
    """`tokens` as little-endian uint32 (what the hashes and the disk files hold)."""
    return np.asarray(tokens, dtype="<u4").tobytes()


def chain_hashes(
    tokens: Sequence[int], block_size: int, root: bytes, num_blocks: int | None = None
) -> list[bytes]:
    """The hashes of the whole blocks of `tokens` from block 0 (at most `num_blocks` of them)."""
    n = len(tokens) // block_size
    if num_blocks is not None:
        n = min(n, num_blocks)
    raw = token_bytes(tokens[: n * block_size])
    step = 4 * block_size
    out: list[bytes] = []
    prev = root
    for b in range(n):
        prev = hashlib.sha256(prev + raw[b * step : (b + 1) * step]).digest()
        out.append(prev)
    return out


def blocks_ending_in(start: int, end: int, block_size: int) -> range:
    """Indices of the blocks whose last token lies in [start, end): those a tree node of path
    range [start, end) owns."""
    first = start // block_size  # block `first` ends at (first + 1) * B - 1 >= start
    last = end // block_size  # blocks < last end at or before end - 1
    return range(first, last)
