"""The disk tier's writer thread: queued blocks written to their files one at a time, and the
bounded drain at shutdown.

Ownership: a queued block belongs to the DiskTier (in its `_pending`, readable from memory)
until `finish` is called for it; the writer owns only its temporary file. A block the tier
dropped while it was queued (its LRU, a flush) is skipped (`is_wanted`), and one dropped while
it was being written has its new file removed (`finish` returns False). Once `close` begins,
blocks still queued past its deadline are skipped and stay pending: the tier then forgets
them, so a block is announced (in the tier's index) only once its file is whole.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

from radixrt.cache.tiers.base import Block
from radixrt.cache.tiers.disk_folder import unlink
from radixrt.cache.tiers.disk_format import BlockSpec, encode

logger = logging.getLogger("radixrt")

WARN_EVERY_S = 60.0  # write failures are logged at most this often (a full disk fails them all)


class DiskWriter:
    """One daemon thread writing `spec` blocks under `key`'s MAC to the paths `file_of`
    names; `is_wanted(block)` says whether the tier still wants it, `finish(block, ok)` hands
    it back (True: keep the file)."""

    def __init__(self, spec: BlockSpec, key: bytes, file_of: Callable[[bytes], Path],
                 is_wanted: Callable[[Block], bool],
                 finish: Callable[[Block, bool], bool]) -> None:  # fmt: skip
        self.spec = spec
        self._key = key
        self._file_of = file_of
        self._is_wanted = is_wanted
        self._finish = finish
        self._queue: queue.Queue[Block | None] = queue.Queue()
        self._deadline = math.inf  # monotonic; set by `close`, read by the thread
        self._tmp_seq = 0  # thread only
        self._warned_at = -WARN_EVERY_S  # thread only: when a failure was last logged
        self._unlogged_errors = 0
        self.num_written = 0  # files renamed into place since start
        self._thread = threading.Thread(target=self._loop, name="radixrt-disk-tier", daemon=True)
        self._thread.start()

    def put(self, block: Block) -> None:
        self._queue.put(block)

    def flush(self) -> None:
        """Wait until every queued block is written or skipped."""
        self._queue.join()

    def close(self, timeout_s: float) -> None:
        """Write what is queued for up to `timeout_s`, skip the rest, stop the thread. A write
        under way at the deadline may finish while the process exits (its file is whole or a
        stray temporary, which a later start removes)."""
        self._deadline = time.monotonic() + timeout_s
        self._queue.put(None)
        self._thread.join(timeout=timeout_s + 1.0)

    # ---- the thread ----------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            block = self._queue.get()
            try:
                if block is None:
                    return
                if time.monotonic() < self._deadline and self._is_wanted(block):
                    self._write(block)
            finally:
                self._queue.task_done()

    def _write(self, block: Block) -> None:
        file = self._file_of(block.key)
        self._tmp_seq += 1
        tmp = file.with_name(f"{file.name}.{os.getpid()}.{self._tmp_seq}.tmp")
        try:
            # parents: the folder may have been removed under a running server (to clear it)
            file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                for part in encode(self.spec, block.extra_key, block.index, block.path,
                                   block.data, self._key):  # fmt: skip
                    f.write(part)
            os.replace(tmp, file)
        except OSError as e:
            self._warn(file, e)
            unlink(tmp)
            self._finish(block, False)
            return
        self.num_written += 1
        if not self._finish(block, True):
            unlink(file)  # dropped while being written

    def _warn(self, file: Path, e: OSError) -> None:
        now = time.monotonic()
        self._unlogged_errors += 1
        if now - self._warned_at < WARN_EVERY_S:
            return
        logger.warning("could not write KV block file %s: %s (%d block(s) not written since "
                       "the last warning; the blocks stay on the device and are recomputed "
                       "once evicted)", file, e, self._unlogged_errors)  # fmt: skip
        self._warned_at, self._unlogged_errors = now, 0
