"""Checkpoint tensors -> a Llama module's parameters, stacked and sliced for this rank.

Each checkpoint name maps to (parameter, destination rows, source slice). Column-parallel
weights (q/k/v, gate/up) take this rank's rows; row-parallel ones (o_proj, down_proj) take
its columns and keep their bias whole; embed_tokens and lm_head take its vocabulary rows.
A safetensors slice is read only for this rank's part, so no rank holds the whole model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from radixrt.models.tp_partition import TPPartition

# This rank's slice of one dimension of a checkpoint tensor: (dim, start, length, full length).
Slice = tuple[int, int, int, int]


def load_llama_weights(model: nn.Module, weights: Iterable[tuple[str, Any]]) -> None:
    """Copy this rank's part of each (name, tensor or safetensors slice) into `model`."""
    cfg, part = model.config, model.partition
    params = dict(model.named_parameters())
    if part.tp_size > 1:  # vocabulary padding rows of the last rank stay zero
        with torch.no_grad():
            model.model.embed_tokens.weight.zero_()
            model.lm_head.weight.zero_()
    loaded: set[str] = set()
    for name, tensor in weights:
        if "rotary_emb.inv_freq" in name:
            continue
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        shape = list(tensor.shape) if isinstance(tensor, torch.Tensor) else tensor.get_shape()
        target, dst_rows, src = _shard_of(name, len(shape), cfg, part)
        if target not in params:
            raise ValueError(f"checkpoint tensor {name!r} has no matching parameter")
        dst = params[target]
        if dst_rows is not None:
            dst = dst.narrow(0, *dst_rows)
        dim, start, size, full = src if src is not None else (0, 0, shape[0], shape[0])
        want = [size if i == dim else n for i, n in enumerate(shape)]
        if shape[dim] != full or want != list(dst.shape):
            raise ValueError(
                f"checkpoint tensor {name!r} has shape {tuple(shape)}, expected "
                f"{tuple(dst.shape) if full == size else f'{full} along dim {dim}'}"
            )
        with torch.no_grad():
            dst.copy_(_take(tensor, dim, start, size))
        loaded.add(name)
    missing = _checkpoint_names(model) - loaded
    if missing:
        raise ValueError(f"checkpoint lacks tensors: {sorted(missing)[:5]}")


def _shard_of(
    name: str, ndim: int, cfg: Any, part: TPPartition
) -> tuple[str, tuple[int, int] | None, Slice | None]:
    """(parameter, its destination rows or None for all, source slice or None for all)."""
    d, h, hkv = cfg.head_dim, part.num_heads, part.num_kv_heads
    inter = part.inter_size
    q_all, kv_all = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
    stacked = {  # piece -> (fused parameter, destination row offset, source slice)
        "q_proj": ("qkv_proj", 0, (0, part.head_start * d, h * d, q_all)),
        "k_proj": ("qkv_proj", h * d, (0, part.kv_head_start * d, hkv * d, kv_all)),
        "v_proj": ("qkv_proj", (h + hkv) * d, (0, part.kv_head_start * d, hkv * d, kv_all)),
        "gate_proj": ("gate_up_proj", 0, (0, part.inter_start, inter, cfg.intermediate_size)),
        "up_proj": ("gate_up_proj", inter, (0, part.inter_start, inter, cfg.intermediate_size)),
    }
    for piece, (fused, offset, src) in stacked.items():
        if f".{piece}." in name:
            return name.replace(f".{piece}.", f".{fused}."), (offset, src[2]), src
    if part.tp_size == 1:
        return name, None, None
    if ndim == 2 and ".o_proj." in name:
        return name, None, (1, part.head_start * d, h * d, q_all)
    if ndim == 2 and ".down_proj." in name:
        return name, None, (1, part.inter_start, inter, cfg.intermediate_size)
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        rows = min(part.vocab_shard, max(cfg.vocab_size - part.vocab_start, 0))
        return name, (0, rows), (0, part.vocab_start, rows, cfg.vocab_size)
    return name, None, None  # replicated: norms, row-parallel biases


def _take(tensor: Any, dim: int, start: int, size: int) -> torch.Tensor:
    """tensor[start:start+size] along `dim`; a safetensors slice reads only those bytes."""
    if isinstance(tensor, torch.Tensor):
        return tensor.narrow(dim, start, size)
    return tensor[(slice(None),) * dim + (slice(start, start + size),)]


def _checkpoint_names(model: nn.Module) -> set[str]:
    """The tensor names a checkpoint for this model has (stacked ones split back)."""
    names = set()
    for name, _ in model.named_parameters():
        if ".qkv_proj." in name:
            names |= {name.replace(".qkv_proj.", f".{p}.") for p in ("q_proj", "k_proj", "v_proj")}
        elif ".gate_up_proj." in name:
            names |= {name.replace(".gate_up_proj.", f".{p}.") for p in ("gate_proj", "up_proj")}
        elif name != "lm_head.weight":
            names.add(name)
    if not model.config.tie_word_embeddings:
        names.add("lm_head.weight")
    return names
