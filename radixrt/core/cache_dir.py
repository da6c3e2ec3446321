"""The radixrt cache folder: $RADIXRT_CACHE, by default ~/.cache/radixrt. Converted models,
file hashes, the tokenizer classes chosen for model folders, and the CPU kernels and their
plans live under it."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "RADIXRT_CACHE"
DEFAULT_CACHE = "~/.cache/radixrt"


def cache_root() -> Path:
    """Return the radixrt cache folder ($RADIXRT_CACHE, default ~/.cache/radixrt)."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()
