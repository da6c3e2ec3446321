"""The disk tier's folder: where a block's file lives, and the listing done at start.

`<root>/<hash[:2]>/<hash>.kv` under a root per model fingerprint (disk.py); temporaries are
`<hash>.kv.<pid>.<n>.tmp` beside their final name.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

STALE_TMP_S = 3600.0  # a .tmp this old belongs to no live writer


def block_file(root: Path, key: bytes) -> Path:
    h = key.hex()
    return root / h[:2] / f"{h}.kv"


def scan_folder(root: Path) -> list[tuple[bytes, int]]:
    """(key, file bytes) of every block file under `root`, least recently written first;
    reads names and sizes only. Removes temporaries older than STALE_TMP_S."""
    found: list[tuple[float, bytes, int]] = []
    now = time.time()
    for sub in subdirs(root):
        for entry in os.scandir(sub):
            try:
                st = entry.stat()
            except OSError:
                continue
            if entry.name.endswith(".tmp"):
                if now - st.st_mtime > STALE_TMP_S:
                    unlink(Path(entry.path))
            elif entry.name.endswith(".kv") and len(entry.name) == 67:
                try:
                    found.append((st.st_mtime, bytes.fromhex(entry.name[:64]), st.st_size))
                except ValueError:
                    continue
    found.sort()
    return [(key, size) for _, key, size in found]


def subdirs(root: Path) -> list[str]:
    """The two-letter folders under `root` (none when it is gone)."""
    try:
        return [e.path for e in os.scandir(root) if e.is_dir() and len(e.name) == 2]
    except FileNotFoundError:
        return []


def unlink(path: Path) -> None:
    """Remove `path` if it is there (another process may have removed it first)."""
    try:
        os.unlink(path)
    except OSError:
        pass
