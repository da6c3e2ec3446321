"""The CPU process set-up: activation-sized blocks come from the heap and stay there."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Run in a fresh interpreter (glibc's thresholds adapt to what a process has freed so far).
# Prints whether a 24 MB block (one 2048-token gate/up activation of the default model) lies
# in the brk heap, and whether freeing it left the heap's end where it was (the pages stay
# mapped for the next pass instead of being returned and faulted in again).
_PROBE = """
import sys, torch
from radixrt.model.cpu.runtime import MMAP_THRESHOLD, TRIM_THRESHOLD, keep_freed_memory

def heap():
    line = next(x for x in open("/proc/self/maps") if x.rstrip().endswith("[heap]"))
    return tuple(int(v, 16) for v in line.split()[0].split("-"))

if sys.argv[1] == "keep":
    assert keep_freed_memory() and keep_freed_memory()  # idempotent
nbytes = 24 << 20
assert nbytes < MMAP_THRESHOLD and nbytes < TRIM_THRESHOLD
t = torch.empty(nbytes // 4)
t.fill_(1.0)
lo, hi = heap()
in_heap = lo <= t.data_ptr() < hi
del t
print(int(in_heap), int(heap()[1] == hi))
"""


def _probe(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                         check=True, timeout=120).stdout  # fmt: skip
    in_heap, kept = map(int, out.split())
    return in_heap, kept


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_activation_sized_blocks_come_from_the_heap_and_stay_mapped() -> None:
    assert _probe("default")[0] == 0  # glibc's default: a fresh mapping, unmapped on free
    assert _probe("keep") == (1, 1)
