"""One-time conversion of a .gguf file into a cached float32 safetensors model folder.

The cache folder appears only complete (written in a temporary sibling, then renamed), and a
file lock makes concurrent processes share one conversion.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from radixrt.core.cache_dir import cache_root
from radixrt.model.families.hf_folder import ModelLoadError, merge_token_ids

logger = logging.getLogger("radixrt")

_QUANTIZER_ATTRS = ("hf_quantizer", "quantization_method")


def converted_folder(gguf: Path) -> Path:
    """Return where the conversion of this exact file (path, size, mtime) is cached."""
    gguf = Path(gguf).resolve()
    stat = gguf.stat()
    key = f"{gguf}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()
    digest = hashlib.sha256(key).hexdigest()[:12]
    return cache_root() / "models" / f"{gguf.stem}-{digest}"


def convert_gguf(gguf: Path) -> Path:
    """Return the cached converted folder of a .gguf file, converting it first if needed."""
    final = converted_folder(gguf)
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(final.with_name(final.name + ".lock")):
        if final.is_dir():
            return final
        for stale in final.parent.glob(f".{final.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        try:
            start = time.perf_counter()
            _convert_into(Path(gguf).resolve(), tmp)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        logger.info("converted %s to %s in %.1f s", gguf, final, time.perf_counter() - start)
    return final


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _convert_into(gguf: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    _drop_quantizer(model)
    eos_ids = merge_token_ids(model.config.eos_token_id, tokenizer.eos_token_id)
    if eos_ids:
        model.generation_config.eos_token_id = eos_ids[0] if len(eos_ids) == 1 else eos_ids
    max_len = getattr(model.config, "max_position_embeddings", None)
    if max_len:
        tokenizer.model_max_length = max_len
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    _check_tokenizer(tokenizer, out)


def _drop_quantizer(model: Any) -> None:
    # transformers 5 refuses to save a GGUF-loaded model; its weights are already dense.
    for attr in _QUANTIZER_ATTRS:
        if hasattr(model, attr):
            setattr(model, attr, None)
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def _check_tokenizer(tokenizer: Any, out: Path) -> None:
    from transformers import AutoTokenizer

    template = tokenizer.chat_template
    if template and not (out / "chat_template.jinja").is_file():
        (out / "chat_template.jinja").write_text(template)
    saved = AutoTokenizer.from_pretrained(str(out))
    if saved.chat_template != template:
        raise ModelLoadError(f"chat template did not survive saving the tokenizer to {out}")
    if saved.eos_token_id != tokenizer.eos_token_id:
        raise ModelLoadError(f"eos token did not survive saving the tokenizer to {out}")
