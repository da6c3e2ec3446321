"""The tokenizer class AutoTokenizer chose for a model folder, remembered so later loads of the
same folder construct that class directly.

AutoTokenizer reads the folder's config.json through AutoConfig to choose a class, and
importing a configuration class pulls in much of transformers and torch.distributed (about
1.5 s of a server's start, in the scheduler and the HTTP process alike). The choice depends on
the folder's files and on the transformers version only, so it is remembered under
$RADIXRT_CACHE/tokenizers, keyed by the folder's resolved path, every file's name, size and
modification time, and the transformers version: a changed file or another transformers
chooses again. A later load calls `from_pretrained` on the remembered class with the
arguments AutoTokenizer passes it. Classes outside transformers (remote code) are never
remembered; a cache that cannot be read or written only costs the slower load."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from radixrt.core.cache_dir import cache_root

logger = logging.getLogger("radixrt")


def load_auto_tokenizer(folder: Path) -> Any:
    """The folder's tokenizer as `AutoTokenizer.from_pretrained(folder)` gives it (local files
    only), through the remembered class where there is one."""
    from transformers import AutoTokenizer

    memo = _memo_path(folder)
    chosen = _read(memo) if memo is not None else None
    if chosen is not None:
        try:
            return chosen.from_pretrained(str(folder), local_files_only=True, _from_auto=True)
        except Exception as e:  # the files changed under the same stamp: choose again
            logger.debug("remembered tokenizer class %s failed (%s); AutoTokenizer", chosen, e)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), use_fast=True, local_files_only=True)
    if memo is not None:
        _write(memo, type(tokenizer))
    return tokenizer


def _memo_path(folder: Path) -> Path | None:
    """Where the folder's choice is remembered, or None when the folder cannot be listed."""
    import transformers

    try:
        real = Path(folder).resolve()
        files = sorted((p.name, p.stat()) for p in real.iterdir() if p.is_file())
    except OSError:
        return None
    stamp = [str(real), transformers.__version__]
    stamp += [[name, st.st_size, st.st_mtime_ns] for name, st in files]
    key = hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:32]
    return cache_root() / "tokenizers" / f"{key}.json"


def _read(memo: Path) -> Any | None:
    """The remembered class, or None (nothing remembered, unreadable, or no longer there)."""
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    try:
        saved = json.loads(memo.read_text())
        name, module = str(saved["class"]), str(saved["module"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    cls = tokenizer_class_from_name(name)
    return cls if cls is not None and cls.__module__ == module else None


def _write(memo: Path, cls: type) -> None:
    """Remember `cls` where transformers finds it again by name; otherwise remember nothing."""
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    if not cls.__module__.startswith("transformers.") or (
        tokenizer_class_from_name(cls.__name__) is not cls
    ):
        return
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"class": cls.__name__, "module": cls.__module__}))
        os.replace(tmp, memo)  # concurrent starts write the same choice; readers see whole files
    except OSError:
        pass
