"""A serving process's start-up heap is frozen out of the cyclic collector (core/heap.py):
start-up garbage is collected first, what is alive stays alive, and a full collection during
serving walks only what serving allocated. Run in a child process, so that this test
process's own heap is left as it was."""

from __future__ import annotations

import json
import subprocess
import sys

_CHILD = r"""
import gc, json, weakref
from radixrt.core.heap import freeze_startup_heap

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a

live = [cycle() for _ in range(50_000)]  # long-lived state of the start-up
dead = weakref.ref(cycle())              # start-up garbage: a cycle nothing refers to
gc.disable()                             # no automatic collection between the steps below
frozen = freeze_startup_heap("test")
after_start = dead() is None
old_in_gen2 = len(gc.get_objects(generation=2))
later = weakref.ref(cycle())             # garbage made while serving
gc.collect()
print(json.dumps({
    "frozen": frozen,
    "freeze_count": gc.get_freeze_count(),
    "startup_garbage_collected": after_start,
    "gen2_after_freeze": old_in_gen2,
    "serving_garbage_collected": later() is None,
    "live_kept": all(n.other.other is n for n in live),
}))
"""


def test_startup_heap_is_collected_then_frozen() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120, check=True
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["startup_garbage_collected"]
    assert out["frozen"] == out["freeze_count"] >= 100_000  # the live cycles' objects, at least
    assert out["gen2_after_freeze"] < 1000  # a full collection no longer walks them
    assert out["serving_garbage_collected"]
    assert out["live_kept"]
