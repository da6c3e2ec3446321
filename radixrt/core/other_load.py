"""CPU time other processes take while this one measures something (`OtherLoad`): the CPU
kernels' guard keeps a plan timed on a busy machine for that run only, and the benchmarks
report it beside their figures."""

from __future__ import annotations

import os
import time


class OtherLoad:
    """CPU used by other processes since construction, as a fraction of all cores.

    From /proc/stat (busy time of the whole machine) minus this process's CPU time and that of
    `pids` (e.g. its tensor-parallel ranks); None where /proc/stat is missing. 0.0 means this
    process had the machine to itself.
    """

    def __init__(self, pids: tuple[int, ...] = ()) -> None:
        self._pids = pids
        self._start = self._sample()

    def fraction(self) -> float | None:
        """Since construction: other processes' CPU seconds / (wall seconds * cores)."""
        now = self._sample()
        if now is None or self._start is None:
            return None
        wall, busy, own = (b - a for a, b in zip(self._start, now, strict=True))
        return max(busy - own, 0.0) / (wall * (os.cpu_count() or 1)) if wall > 0 else None

    def _sample(self) -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat") as f:
                ticks = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
        busy = (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # up to steal; guests in user
        return time.monotonic(), busy, time.process_time() + cpu_seconds(self._pids)


def cpu_seconds(pids: tuple[int, ...]) -> float:
    """User + system CPU seconds of the processes `pids` (0 for any that are gone)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")
