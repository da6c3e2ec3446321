"""Reading a local Hugging Face-style model folder: weights (whole or sliced), config.json,
generation_config.json, the tokenizer and its eos ids."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from radixrt.model.families.chat_defaults import CHAT_DEFAULTS

SAFETENSORS_INDEX = "model.safetensors.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


class ModelLoadError(ValueError):
    """A model path that does not name a usable local model."""


class ModelNotFoundError(ModelLoadError, FileNotFoundError):
    """The default model's package is not installed."""


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
    """Return the folder's fast tokenizer (transformers AutoTokenizer's choice, remembered per
    folder: tokenizer_memo.py); where the checkpoint has no chat template, its family's
    standard one (chat_defaults.py)."""
    from radixrt.model.families.tokenizer_memo import load_auto_tokenizer

    folder = Path(folder)
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelLoadError(f"no tokenizer files ({', '.join(TOKENIZER_FILES)}) in {folder}")
    tokenizer = load_auto_tokenizer(folder)
    default = _chat_default(folder)
    if default is not None and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = default[0]
    return tokenizer


def eos_token_ids(folder: Path, tokenizer: Any) -> list[int]:
    """Return the union of config, generation config and tokenizer eos ids, and the tokens
    that end a turn in the family's chat format, first seen first."""
    default = _chat_default(folder)
    turn_ends = [tokenizer.convert_tokens_to_ids(t) for t in (default[1] if default else ())]
    unk = getattr(tokenizer, "unk_token_id", None)
    return merge_token_ids(
        load_hf_config(folder).get("eos_token_id"),
        load_generation_config(folder).get("eos_token_id"),
        getattr(tokenizer, "eos_token_id", None),
        [t for t in turn_ends if isinstance(t, int) and t != unk],
    )


def _chat_default(folder: Path) -> tuple[str, tuple[str, ...]] | None:
    config = Path(folder) / "config.json"
    model_type = load_hf_config(folder).get("model_type") if config.is_file() else None
    return CHAT_DEFAULTS.get(str(model_type))


def merge_token_ids(*values: int | list[int] | None) -> list[int]:
    """Return the ids of several int / list / None values, deduplicated, first seen first."""
    ids: list[int] = []
    for value in values:
        for token_id in [value] if isinstance(value, int) else value or []:
            if int(token_id) not in ids:
                ids.append(int(token_id))
    return ids
