"""The CPU process set-up: activation-sized blocks come from the heap and are reused."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Run in a fresh interpreter (glibc's thresholds adapt to what a process has freed so far).
# Prints whether the first 24 MB block (one 2048-token gate/up activation of the default
# model) lies in the brk heap, then the page faults of three more rounds of a layer-like
# allocate / touch / free pattern after two warm-up rounds, and the pages touched per round.
_PROBE = """
import resource, sys, torch
from radixrt.executor.cpu_setup import MMAP_THRESHOLD, keep_freed_memory

if sys.argv[1] == "keep":
    assert keep_freed_memory() and keep_freed_memory()  # idempotent
sizes = [24 << 20, 5 << 20, 12 << 20]
assert max(sizes) < MMAP_THRESHOLD
first = torch.empty(sizes[0] // 4)
first_ptr = first.data_ptr()
heap = next(line for line in open("/proc/self/maps") if line.rstrip().endswith("[heap]"))
lo, hi = (int(x, 16) for x in heap.split()[0].split("-"))
del first

def round_():
    blocks = [torch.empty(n // 4) for n in sizes]
    for b in blocks:
        b.fill_(1.0)

for _ in range(2):
    round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    round_()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(int(lo <= first_ptr < hi), faults, sum(sizes) // resource.getpagesize())
"""


def _probe(mode: str) -> tuple[int, int, int]:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                         check=True, timeout=120).stdout  # fmt: skip
    in_heap, faults, pages = map(int, out.split())
    return in_heap, faults, pages


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_activation_sized_blocks_come_from_the_heap_and_are_reused() -> None:
    assert _probe("default")[0] == 0  # glibc's default: a fresh mapping, unmapped on free
    in_heap, faults, pages = _probe("keep")
    assert in_heap == 1
    assert faults < pages // 10  # three rounds reuse the blocks' pages, not fresh ones
