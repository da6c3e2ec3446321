"""`DiskTier`: KV blocks as files in a directory that outlives the process.

Layout: `<cache_dir>/<fingerprint[:16]>/<hash[:2]>/<hash>.kv`, one file per block
(disk_format.py), so another model (or the same one updated) never reads these files, and
several processes (`--dp` replicas, a restarted server) share the blocks of the same model.

Index: at start the folder is listed (names, sizes and times only: milliseconds for thousands
of files); a block another process wrote later is found by its name on first lookup. A file is
checked in full when read (`decode`: its MAC under the folder's key, then what it holds); the
folder and key are checked at start (disk_folder.py); a link, FIFO or oversized file is a miss.

Writes run on one writer thread (disk_writer.py): `put` queues the block (it stays readable
from memory until its file is in place) and returns; the writer writes `<name>.<pid>.<n>.tmp`
and renames it, so a crash (`kill -9` included) leaves whole files or stray `.tmp` files, which
the next start removes once they are an hour old. A clean stop (`close`) drains the queue for
up to `drain_timeout_s`; what is not written by then is dropped from the index, and the counts
are logged. The LRU bound counts this process's view of the folder.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from radixrt.cache.tiers.base import BaseKVTier, Block
from radixrt.cache.tiers.disk_folder import (
    block_file,
    block_key,
    check_private,
    read_block_file,
    regular_size,
    scan_folder,
    subdirs,
    unlink,
)
from radixrt.cache.tiers.disk_format import (
    BlockFileError,
    BlockMismatch,
    BlockSpec,
    decode,
    file_size,
    header_bytes,
    max_file_size,
)
from radixrt.cache.tiers.disk_writer import DiskWriter

logger = logging.getLogger("radixrt")

MAX_PENDING_BYTES = 1 << 30  # queued for the writer; past it new blocks are not kept


class DiskTier(BaseKVTier):
    """Up to `capacity_bytes` of block files under `cache_dir`, LRU first out; `spec` names the
    model (fingerprint), dtype and block shape of every file; `close` drains for a bound."""

    name = "disk"

    def __init__(self, cache_dir: str | Path, spec: BlockSpec, capacity_bytes: int,
                 drain_timeout_s: float = 10.0) -> None:  # fmt: skip
        block_bytes = int(np.prod(spec.shape)) * torch.empty((), dtype=spec.dtype).element_size()
        super().__init__(block_bytes, capacity_bytes)
        self.spec = spec
        folder = Path(cache_dir)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        check_private(folder)  # ValueError naming the folder: refused at start
        self.root = folder / spec.fingerprint[:16]
        self.root.mkdir(exist_ok=True, mode=0o700)
        check_private(self.root)
        self._key = block_key(folder)  # every file's MAC (disk_format.py)
        self._lock = threading.Lock()  # guards _index, _pending, _bytes (writer thread too)
        self._index: OrderedDict[bytes, int] = OrderedDict()  # key -> file bytes; LRU order
        self._pending: dict[bytes, Block] = {}  # queued, not yet renamed into place
        self._pending_bytes = 0
        self._bytes = 0
        self.drain_timeout_s = drain_timeout_s
        t0 = time.perf_counter()
        for key, size in scan_folder(self.root):  # oldest first
            if size <= capacity_bytes:  # larger: no block file, never to push the others out
                self._index[key] = size
                self._bytes += size
        self._make_room(0)
        self.index_s = time.perf_counter() - t0
        if self._index:
            logger.info("disk KV cache %s: %d blocks (%.2f GB) indexed in %.3f s", self.root,
                        len(self._index), self._bytes / 1e9, self.index_s)  # fmt: skip
        self._writer = DiskWriter(spec, self._key, self._file, self._is_pending, self._written)

    # ---- BaseKVTier ----------------------------------------------------------------------

    def contains(self, key: bytes) -> bool:
        with self._lock:
            if key in self._index:
                return True
        size = regular_size(self._file(key))  # written by another process since the scan?
        if size is None or size > self.capacity_bytes:
            return False
        with self._lock:
            if key not in self._index:
                self._make_room(size)
                self._index[key] = size
                self._bytes += size
        return True

    def put(self, block: Block) -> list[Block]:
        size = self._size(block)
        with self._lock:
            if block.key in self._index:
                self._index.move_to_end(block.key)
                return []
            too_big = size > min(self.capacity_bytes, max_file_size(self.spec, block.index))
            if self._pending_bytes + size > MAX_PENDING_BYTES or too_big:
                self.counters.write_errors += 1
                return []
            self._make_room(size)
            self._index[block.key] = size
            self._bytes += size
            self._pending[block.key] = block
            self._pending_bytes += size
        self._writer.put(block)
        self.counters.stored_blocks += 1
        return []

    def get(
        self, key: bytes, index: int, path: np.ndarray, extra_key: str | None
    ) -> torch.Tensor | None:
        with self._lock:
            pending = self._pending.get(key)
            if key in self._index:
                self._index.move_to_end(key)
        if pending is not None:
            end = (index + 1) * self.spec.block_size
            ok = pending.extra_key == extra_key and np.array_equal(pending.path[:end], path[:end])
            return pending.data if ok else None
        file = self._file(key)
        try:
            raw = read_block_file(file, max_file_size(self.spec, index))
            return decode(raw, self.spec, extra_key, index, path, self._key)
        except FileNotFoundError:  # deleted by another process's LRU or a flush
            self._forget(key)
            return None
        except BlockMismatch:  # another block's whole file under this hash: kept, not served
            return None
        except (BlockFileError, OSError) as e:
            logger.warning("KV block file %s not served (%s); recomputing instead", file, e)
            self.counters.corrupt_blocks += 1
            self._forget(key)
            unlink(file)
            return None

    def clear(self) -> None:
        """Delete every block file of this model (all processes' files under the folder)."""
        with self._lock:
            self._pending.clear()
            self._pending_bytes = 0
            self._index.clear()
            self._bytes = 0
        for sub in subdirs(self.root):
            for entry in os.scandir(sub):
                if entry.name.endswith(".kv"):
                    unlink(Path(entry.path))

    @property
    def num_blocks(self) -> int:
        return len(self._index)

    @property
    def used_bytes(self) -> int:
        return self._bytes

    def close(self) -> None:
        """Write what is queued for up to `drain_timeout_s`, then stop the writer; a block not
        written by then leaves the index (never announced) and the counts are logged."""
        with self._lock:
            queued = len(self._pending)
        written = self._writer.num_written
        self._writer.close(self.drain_timeout_s)
        with self._lock:
            lost = list(self._pending)
            for key in lost:
                self._forget_locked(key)
            self._pending.clear()
            self._pending_bytes = 0
        written = self._writer.num_written - written
        self.counters.dropped_blocks += len(lost)
        if lost:
            logger.warning("disk KV cache: %d of %d queued block(s) written at shutdown, %d "
                           "dropped (not written within %g s)", written, queued, len(lost),
                           self.drain_timeout_s)  # fmt: skip
        elif queued:
            logger.info("disk KV cache: %d queued block(s) written at shutdown", queued)

    def flush(self) -> None:
        """Wait until every queued block is in its file (tests)."""
        self._writer.flush()

    # ---- files ---------------------------------------------------------------------------

    def _file(self, key: bytes) -> Path:
        return block_file(self.root, key)

    def _size(self, block: Block) -> int:
        header = header_bytes(self.spec, block.extra_key, block.index)
        return file_size(self.spec, block.index, len(header))

    def _is_pending(self, block: Block) -> bool:
        """Whether the writer should still write `block` (not dropped while queued)."""
        with self._lock:
            return self._pending.get(block.key) is block

    def _written(self, block: Block, ok: bool) -> bool:
        """The writer is done with `block` (ok: its file is in place); whether to keep it."""
        with self._lock:
            if not ok:
                self.counters.write_errors += 1
                if self._pending.pop(block.key, None) is not None:
                    self._pending_bytes -= self._index.get(block.key, 0)
                self._forget_locked(block.key)
                return False
            if self._pending.get(block.key) is block:
                del self._pending[block.key]
                self._pending_bytes -= self._index[block.key]
                return True
        return False  # dropped while being written

    def _make_room(self, size: int) -> None:
        """Delete least recently used files until `size` more bytes fit (lock held)."""
        while self._index and self._bytes + size > self.capacity_bytes:
            key, old = self._index.popitem(last=False)
            self._bytes -= old
            self.counters.dropped_blocks += 1
            if self._pending.pop(key, None) is not None:
                self._pending_bytes -= old
            else:
                unlink(self._file(key))

    def _forget(self, key: bytes) -> None:
        with self._lock:
            self._forget_locked(key)

    def _forget_locked(self, key: bytes) -> None:
        size = self._index.pop(key, None)
        if size is not None:
            self._bytes -= size
