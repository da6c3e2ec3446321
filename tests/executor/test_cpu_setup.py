"""The CPU process set-up: activation-sized blocks come from the heap and are reused."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Run in a fresh interpreter (glibc's thresholds adapt to what a process has freed so far).
# Prints whether the first 24 MB block (one 2048-token gate/up activation of the default
# model) lies in the brk heap, and whether the next one of that size reuses its address.
_PROBE = """
import sys, torch
from radixrt.executor.cpu_setup import MMAP_THRESHOLD, keep_freed_memory

if sys.argv[1] == "keep":
    assert keep_freed_memory() and keep_freed_memory()  # idempotent
nbytes = 24 << 20
assert nbytes < MMAP_THRESHOLD
t = torch.empty(nbytes // 4)
t.fill_(1.0)
heap = next(line for line in open("/proc/self/maps") if line.rstrip().endswith("[heap]"))
lo, hi = (int(x, 16) for x in heap.split()[0].split("-"))
first = t.data_ptr()
del t
again = torch.empty(nbytes // 4).data_ptr()
print(int(lo <= first < hi), int(again == first))
"""


def _probe(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                         check=True, timeout=120).stdout  # fmt: skip
    in_heap, reused = map(int, out.split())
    return in_heap, reused


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_activation_sized_blocks_come_from_the_heap_and_are_reused() -> None:
    assert _probe("default")[0] == 0  # glibc's default: a fresh mapping, unmapped on free
    assert _probe("keep") == (1, 1)
