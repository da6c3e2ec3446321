"""What KV layout each model folder of a --cache-dir holds (`layout.json` beside its blocks),
so that a restart with another KV width (another --kv-cache-dtype, or `auto` choosing another
on this machine) is told why the blocks it finds are not served. Blocks of another width sit
under another fingerprint (model/families/fingerprint.py hashes the pool's dtype and row
width): they are never read as this width, nor converted; decode (disk_format.py) refuses a
file of another dtype or shape as well."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

logger = logging.getLogger("radixrt")

LAYOUT_FILE = "layout.json"


def record_layout(root: Path, model_key: str, kv_dtype: str, shape: tuple[int, ...]) -> None:
    """Write `root`'s layout file (once: a folder's fingerprint fixes its layout); `model_key`
    names the model and weights alone, whatever the KV width."""
    path = root / LAYOUT_FILE
    if path.is_file():
        return
    data = {"model": model_key, "kv_dtype": kv_dtype, "shape": list(shape)}
    try:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)  # readers see a whole file or none
    except OSError as e:  # only the restart's hint is lost
        logger.warning("could not write %s: %s", path, e)


def other_widths(folder: Path, root: Path, model_key: str) -> list[tuple[Path, str]]:
    """(folder, KV dtype) of every other folder under the cache dir `folder` holding this
    model's blocks in another layout, by their layout files (unreadable ones are skipped)."""
    found = []
    for sub in sorted(folder.iterdir()):
        if sub == root or sub.is_symlink() or not sub.is_dir():
            continue
        try:
            data = json.loads((sub / LAYOUT_FILE).read_text())
            if data["model"] == model_key:
                found.append((sub, str(data["kv_dtype"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def note_other_widths(folder: Path, root: Path, model_key: str, kv_dtype: str) -> list[str]:
    """Record `root`'s layout and warn, once per start, of this model's blocks in other KV
    widths under `folder`; returns the warnings."""
    notes = []
    for sub, other in other_widths(folder, root, model_key):
        how = "another row layout" if other == kv_dtype else f"a {other} KV pool"
        notes.append(
            f"disk KV cache: blocks of this model under {sub} were written with {how}; this "
            f"server's pool is {kv_dtype} (--kv-cache-dtype), so they are not served (never "
            f"converted): start with --kv-cache-dtype {other} to use them"
        )
    for note in notes:
        logger.warning("%s", note)
    return notes
