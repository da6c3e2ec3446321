"""The file of one KV block on disk, and its checks.

    magic      8 bytes   b"RXKVBLK2"
    hlen       4 bytes   little-endian uint32: the header's length (at most MAX_HEADER_BYTES)
    header     hlen      JSON: fingerprint (hex), namespace, block index, block size, dtype,
                         K/V shape (num_layers, 2, B, num_kv_heads, row width), path length
                         (row width: the head dim, + 4 for fp8's per-row float32 scale)
    path       4 * n     the token path from the namespace's root to the block's end, uint32 LE
    payload    ...       the block's K/V, C order, the pool's dtype
    mac        32 bytes  keyed BLAKE2b of everything above, under the cache folder's key

The MAC's key is a secret file in the cache folder (disk_folder.py: `block_key`), readable by
its owner only, so a file is served only if a process holding the key wrote it: a checksum
anyone who can write a file can recompute, a MAC they cannot. A file is written under a
temporary name in its final folder and renamed into place, so a reader sees a whole file or
none. `decode` refuses (BlockFileError) a file of the wrong length, a bad MAC, another
fingerprint, namespace, block, dtype or shape, or another token path: the path is compared
token for token, so a hash collision can never serve another prefix.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass

import msgspec
import numpy as np
import torch

MAGIC = b"RXKVBLK2"
MAC_BYTES = 32
KEY_BYTES = 32  # the cache folder's secret
MAX_HEADER_BYTES = 16 * 2**10  # a longer header (a huge namespace) is neither written nor read
_HLEN = struct.Struct("<I")


class BlockFileError(ValueError):
    """A block file that must not be served (truncated, corrupted, or another block's)."""


class BlockMismatch(BlockFileError):
    """A whole, well-formed file of another block (another namespace, position or token path
    under the same hash): not served, but not damaged either, so it is kept."""


class BlockHeader(msgspec.Struct, frozen=True):
    fingerprint: str
    namespace: str | None
    block: int
    block_size: int
    dtype: str
    shape: tuple[int, ...]
    path_len: int


@dataclass(frozen=True, slots=True)
class BlockSpec:
    """What a file must hold to be served: the model and layout, known before reading."""

    fingerprint: str
    block_size: int
    dtype: torch.dtype
    shape: tuple[int, ...]  # (num_layers, 2, B, num_kv_heads, row width: memory_pool.py)

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


def encode(spec: BlockSpec, namespace: str | None, index: int, path: np.ndarray,
           data: torch.Tensor, key: bytes) -> list[bytes | memoryview]:  # fmt: skip
    """The file's parts in order (write them one after another); `path` is the token path to
    the block's end, `data` its K/V (CPU, `spec.shape`), `key` the folder's MAC key."""
    end = (index + 1) * spec.block_size
    hbytes = header_bytes(spec, namespace, index)
    tokens = np.ascontiguousarray(path[:end], dtype="<u4").tobytes()
    payload = data.contiguous().view(torch.uint8).numpy().data.cast("B")
    parts: list[bytes | memoryview] = [MAGIC, _HLEN.pack(len(hbytes)), hbytes, tokens, payload]
    mac = _mac(key)
    for part in parts:
        mac.update(part)
    parts.append(mac.digest())
    return parts


def header_bytes(spec: BlockSpec, namespace: str | None, index: int) -> bytes:
    """The encoded header of block `index` in `namespace`."""
    header = BlockHeader(spec.fingerprint, namespace, index, spec.block_size, spec.dtype_name,
                         tuple(spec.shape), (index + 1) * spec.block_size)  # fmt: skip
    return msgspec.json.encode(header)


def file_size(spec: BlockSpec, index: int, header_len: int) -> int:
    """Bytes of a block file whose header is `header_len` bytes long."""
    payload = int(np.prod(spec.shape)) * torch.empty((), dtype=spec.dtype).element_size()
    return (len(MAGIC) + _HLEN.size + header_len + 4 * (index + 1) * spec.block_size + payload
            + MAC_BYTES)  # fmt: skip


def max_file_size(spec: BlockSpec, index: int) -> int:
    """The most bytes a file of block `index` can have (its header at the longest allowed);
    a larger file is refused before anything is read or allocated."""
    return file_size(spec, index, MAX_HEADER_BYTES)


def decode(raw: bytes | bytearray | memoryview, spec: BlockSpec, namespace: str | None,
           index: int, path: np.ndarray, key: bytes) -> torch.Tensor:  # fmt: skip
    """The block's K/V from the file's bytes, after every check (BlockFileError otherwise);
    `key` is the folder's MAC key."""
    view = memoryview(raw)
    if len(view) < len(MAGIC) + _HLEN.size + MAC_BYTES or bytes(view[:8]) != MAGIC:
        raise BlockFileError("not a block file (bad magic or too short)")
    body = view[: len(view) - MAC_BYTES]
    mac = _mac(key)
    mac.update(body)
    if not hmac.compare_digest(mac.digest(), bytes(view[len(body) :])):
        raise BlockFileError("MAC mismatch (corrupted, truncated, or not written with this key)")
    (hlen,) = _HLEN.unpack_from(view, 8)
    if hlen > MAX_HEADER_BYTES:
        raise BlockFileError(f"a header of {hlen} bytes (at most {MAX_HEADER_BYTES})")
    start = 8 + _HLEN.size
    try:
        header = msgspec.json.decode(view[start : start + hlen], type=BlockHeader)
    except msgspec.DecodeError as e:
        raise BlockFileError(f"bad header: {e}") from e
    end = (index + 1) * spec.block_size
    layout = (spec.block_size, spec.dtype_name, tuple(spec.shape))
    if (header.block_size, header.dtype, tuple(header.shape)) != layout:
        raise BlockFileError(f"another layout: {header} where {layout} was expected")
    expected = (spec.fingerprint, namespace, index, end)
    got = (header.fingerprint, header.namespace, header.block, header.path_len)
    if got != expected:
        raise BlockMismatch(f"another block: header {got} where {expected} was expected")
    if len(view) != file_size(spec, index, hlen):
        raise BlockFileError(f"{len(view)} bytes where {file_size(spec, index, hlen)} expected")
    pos = start + hlen
    tokens = np.frombuffer(view[pos : pos + 4 * end], dtype="<u4")
    if not np.array_equal(tokens, path[:end]):
        raise BlockMismatch("another token path (hash collision): not served")
    payload = view[pos + 4 * end : len(body)]
    flat = torch.frombuffer(payload, dtype=torch.uint8) if len(payload) else torch.empty(0)
    return flat.view(spec.dtype).view(spec.shape)


def _mac(key: bytes) -> hashlib.blake2b:
    if len(key) != KEY_BYTES:
        raise ValueError(f"a block MAC key has {KEY_BYTES} bytes, got {len(key)}")
    return hashlib.blake2b(key=key, digest_size=MAC_BYTES, person=b"radixrt-kvblock")
