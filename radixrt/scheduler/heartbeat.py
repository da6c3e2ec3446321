"""The scheduler loop's heartbeat: the CLOCK_MONOTONIC time of its latest iteration, written
into an 8-byte file both processes map, so the HTTP process can tell a wedged scheduler (a
SIGSTOP, a read that never returns) from a busy one without a message having to get through.

The HTTP process owns the file (made 0600 in its private socket folder, `create_heartbeat`)
and reads it; the scheduler process maps it and writes it (`HeartbeatWriter.beat`) once per
loop iteration: every step, and every IDLE_WAIT_S when idle. Imports nothing heavy: the HTTP
process loads it without torch. CLOCK_MONOTONIC is one clock for every process of a host.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path

_STAMP = struct.Struct("<d")  # seconds, time.monotonic(); 0.0: no beat yet


def create_heartbeat(path: Path) -> None:
    """Make the file (owner-only, no beat yet); FileExistsError if it is there already."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, _STAMP.pack(0.0))
    finally:
        os.close(fd)


class _Mapped:
    """The file mapped into this process."""

    def __init__(self, path: str | Path) -> None:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        try:
            self._map = mmap.mmap(fd, _STAMP.size)
        finally:
            os.close(fd)  # the mapping keeps the file

    def close(self) -> None:
        self._map.close()


class HeartbeatWriter(_Mapped):
    """The scheduler's side: `beat` at the top of every loop iteration (about 0.2 us)."""

    def beat(self) -> None:
        _STAMP.pack_into(self._map, 0, time.monotonic())


class HeartbeatReader(_Mapped):
    """The HTTP process's side."""

    def last_beat(self) -> float:
        """The monotonic time of the latest beat; 0.0 before the first. Read until two reads
        agree, so a write torn across the 8 bytes is never returned."""
        first = _STAMP.unpack_from(self._map, 0)[0]
        while True:
            again = _STAMP.unpack_from(self._map, 0)[0]
            if again == first:
                return float(first)
            first = again
