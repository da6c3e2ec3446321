"""A model's fingerprint: what KV computed by one model must match to be served to another.

sha256 over a format version, the sha256 of every weight file and of config.json and the
tokenizer files, the dtype, the quantization and the KV layout (layers, KV heads, head
dimension) plus the lower tiers' block size. A different or updated checkpoint (any byte of a
weight file), another dtype or another quantization gives another fingerprint, so the disk
tier (radixrt/cache/tiers/disk.py) never serves stale KV.

A weight file's hash is computed once (about 0.4 s per GB) and remembered under
$RADIXRT_CACHE/fingerprints, keyed by the file's path, size and modification time.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from torch import nn

from radixrt.core.cache_dir import cache_root
from radixrt.model.families.hf_folder import TOKENIZER_FILES, safetensors_files

FORMAT_VERSION = "radixrt-kv-1"


def model_fingerprint(model_path: Path, model: nn.Module | None, dtype: torch.dtype,
                      quantization: str | None, layout: tuple[int, ...]) -> str:  # fmt: skip
    """The hex fingerprint; `model` (given in memory, no folder) is hashed by its tensors."""
    h = hashlib.sha256()
    h.update(json.dumps([FORMAT_VERSION, str(dtype), quantization, list(layout)]).encode())
    if model is not None:
        for name, t in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(t.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
        return h.hexdigest()
    files = [*safetensors_files(model_path), model_path / "config.json"]
    files += [model_path / n for n in TOKENIZER_FILES if (model_path / n).exists()]
    for f in files:
        h.update(f.name.encode())
        h.update(bytes.fromhex(file_sha256(f)))
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, remembered by (path, size, mtime)."""
    st = path.stat()
    real = str(path.resolve())
    memo = cache_root() / "fingerprints" / f"{hashlib.sha256(real.encode()).hexdigest()[:32]}.json"
    stamp = [real, st.st_size, st.st_mtime_ns]
    try:
        saved = json.loads(memo.read_text())
        if saved["stamp"] == stamp:
            return str(saved["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    out = digest.hexdigest()
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"stamp": stamp, "sha256": out}))
        os.replace(tmp, memo)
    except OSError:
        pass
    return out
