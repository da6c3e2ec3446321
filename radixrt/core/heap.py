"""The Python heap of a serving process, once it has started: moved out of the cyclic
collector's reach so that a full collection during serving scans only what serving made.

A server process holds hundreds of thousands of long-lived objects once torch, transformers,
the model and the tokenizer are loaded. CPython's full (generation 2) collection walks all of
them: 150-185 ms on the CPUs measured here, a whole pause of the scheduler loop (eight decode
steps) that fires a few times a minute under load. `freeze_startup_heap` runs one full
collection (the start-up's garbage goes now, not mid-serving), then `gc.freeze()`s the rest
into the permanent generation: it stays alive (reference counting still frees what is
released), and later collections skip it.
"""

from __future__ import annotations

import gc
import logging
import time

logger = logging.getLogger("radixrt")


def freeze_startup_heap(process: str) -> int:
    """Collect once, then freeze every object alive now (call when `process`'s start-up is
    done and before it serves). Returns how many objects were frozen."""
    t0 = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.debug(
        "%s: %d start-up objects frozen out of the cyclic collector (%.0f ms)",
        process,
        frozen,
        (time.perf_counter() - t0) * 1e3,
    )
    return frozen
