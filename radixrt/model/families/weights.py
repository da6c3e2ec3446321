"""Checkpoint tensors -> a model's parameters, stacked and sliced for this rank.

One map serves every family, because the families name their tensors alike: each checkpoint
name becomes one or more copies (parameter, destination narrowing, source narrowing).
Column-parallel weights (q/k/v, gate/up, experts' gate/up) take this rank's rows;
row-parallel ones (o_proj, down_proj, experts' down) take its columns and keep their bias
whole; embed_tokens and lm_head take its vocabulary rows; norms over a whole projection
(OLMo 2's q_norm/k_norm) take this rank's heads; everything else is whole on every rank.
Stacked parameters: qkv_proj = [q; k; v] rows, gate_up_proj = [gate; up] rows, experts as
(num_experts, rows, cols) tensors. Checkpoints that already fuse them (Phi-3's qkv_proj and
gate_up_proj) are split back per rank. A safetensors slice is read only for this rank's part.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from radixrt.model.families.tp_partition import TPPartition

# (dim, start, length) along one dimension.
Narrow = tuple[int, int, int]

# Mixtral's expert names -> the gated MLP's.
_EXPERT_PIECES = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}
_EXPERT = re.compile(r"\.experts\.(\d+)\.(\w+)\.weight$")


@dataclass(frozen=True, slots=True)
class Copy:
    """Copy source[src...] into param[dst...] (each a chain of narrowings); `expert` picks
    one expert's (rows, cols) slab of a (num_experts, rows, cols) parameter first."""

    param: str
    dst: tuple[Narrow, ...] = ()
    src: tuple[Narrow, ...] = ()
    expert: int | None = None


def load_model_weights(model: nn.Module, weights: Iterable[tuple[str, Any]]) -> None:
    """Copy this rank's part of each (name, tensor or safetensors slice) into `model`;
    ValueError on an unknown or misshapen tensor, or a parameter the checkpoint leaves unset."""
    cfg, part = model.config, model.partition
    params = dict(model.named_parameters())
    filled = dict.fromkeys(params, 0)  # elements written per parameter
    if part.tp_size > 1:  # vocabulary padding rows of the last rank stay zero
        with torch.no_grad():
            for name in ("model.embed_tokens.weight", "lm_head.weight"):
                if name in params:
                    params[name].zero_()
    for name, tensor in weights:
        if "rotary_emb.inv_freq" in name or (name == "lm_head.weight" and cfg.tie_word_embeddings):
            continue
        shape = list(tensor.shape) if isinstance(tensor, torch.Tensor) else tensor.get_shape()
        for copy in copies_of(name, shape, cfg, part):
            if copy.param not in params:
                raise ValueError(f"checkpoint tensor {name!r} has no matching parameter")
            filled[copy.param] += _apply(copy, params[copy.param], name, shape, tensor)
    missing = [n for n, p in params.items() if filled[n] < _expected(n, p, cfg, part)]
    if cfg.tie_word_embeddings:
        missing = [n for n in missing if n != "lm_head.weight"]
    if missing:
        raise ValueError(f"checkpoint lacks tensors for parameters: {sorted(missing)[:5]}")


def copies_of(name: str, shape: list[int], cfg: Any, part: TPPartition) -> list[Copy]:
    """Where checkpoint tensor `name` of `shape` goes on this rank."""
    d, h, hkv = cfg.head_dim, part.num_heads, part.num_kv_heads
    q_rows = (0, part.head_start * d, h * d)
    kv_rows = (0, part.kv_head_start * d, hkv * d)
    q_all, kv_all = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
    inter = (part.inter_start, part.inter_size, cfg.intermediate_size)
    if cfg.moe is not None and ".experts." in name:
        return _expert_copies(name, shape, part)
    # Stacked pieces: (fused parameter, destination row offset, source rows).
    pieces: dict[str, tuple[str, int, Narrow]] = {
        "q_proj": ("qkv_proj", 0, q_rows),
        "k_proj": ("qkv_proj", h * d, kv_rows),
        "v_proj": ("qkv_proj", (h + hkv) * d, kv_rows),
        "gate_proj": ("gate_up_proj", 0, (0, inter[0], inter[1])),
        "up_proj": ("gate_up_proj", inter[1], (0, inter[0], inter[1])),
    }
    for piece, (fused, offset, src) in pieces.items():
        if f".{piece}." in name:
            target = name.replace(f".{piece}.", f".{fused}.")
            return [Copy(target, ((0, offset, src[2]),), (src,))]
    if ".qkv_proj." in name:  # fused in the checkpoint: [q_all; kv_all; kv_all] rows
        k_src, v_src = q_all + kv_rows[1], q_all + kv_all + kv_rows[1]
        return [
            Copy(name, ((0, 0, h * d),), (q_rows,)),
            Copy(name, ((0, h * d, hkv * d),), ((0, k_src, hkv * d),)),
            Copy(name, ((0, (h + hkv) * d, hkv * d),), ((0, v_src, hkv * d),)),
        ]
    if ".gate_up_proj." in name:  # fused in the checkpoint: [gate; up] rows
        return [
            Copy(name, ((0, 0, inter[1]),), ((0, inter[0], inter[1]),)),
            Copy(name, ((0, inter[1], inter[1]),), ((0, inter[2] + inter[0], inter[1]),)),
        ]
    if part.tp_size == 1:
        return [Copy(name)]
    if len(shape) == 2 and ".o_proj." in name:
        return [Copy(name, (), ((1, part.head_start * d, h * d),))]
    if len(shape) == 2 and ".down_proj." in name:
        return [Copy(name, (), ((1, inter[0], inter[1]),))]
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        rows = min(part.vocab_shard, max(cfg.vocab_size - part.vocab_start, 0))
        return [Copy(name, ((0, 0, rows),), ((0, part.vocab_start, rows),))]
    if name.endswith((".q_norm.weight", ".k_norm.weight")) and shape[0] != d:
        return [Copy(name, (), (q_rows if ".q_norm." in name else kv_rows,))]
    return [Copy(name)]  # replicated: norms, routers, row-parallel biases


def _expert_copies(name: str, shape: list[int], part: TPPartition) -> list[Copy]:
    """Experts' tensors: per expert (`experts.{e}.gate_proj.weight`, Mixtral's w1/w3/w2) or
    already stacked (`experts.gate_up_proj` (E, 2I, H), `experts.down_proj` (E, H, I))."""
    start, size, full = part.moe_inter_start, part.moe_inter_size, part.moe_inter_full
    m = _EXPERT.search(name)
    if m is not None:
        expert, piece = int(m.group(1)), _EXPERT_PIECES.get(m.group(2), m.group(2))
        base = name[: m.start()] + ".experts."
        if piece == "down_proj":
            return [Copy(base + "down_proj", (), ((1, start, size),), expert)]
        offset = {"gate_proj": 0, "up_proj": size}.get(piece)
        if offset is None:
            raise ValueError(f"checkpoint tensor {name!r} has no matching parameter")
        return [Copy(base + "gate_up_proj", ((0, offset, size),), ((0, start, size),), expert)]
    if name.endswith(".experts.gate_up_proj"):
        return [
            Copy(name, ((1, 0, size),), ((1, start, size),)),
            Copy(name, ((1, size, size),), ((1, full + start, size),)),
        ]
    if name.endswith(".experts.down_proj"):
        return [Copy(name, (), ((2, start, size),))]
    raise ValueError(f"checkpoint tensor {name!r} has no matching parameter")


def _apply(copy: Copy, param: torch.Tensor, name: str, shape: list[int], tensor: Any) -> int:
    """Do one copy; returns the elements written."""
    dst = param.detach()
    if copy.expert is not None:
        dst = dst[copy.expert]
    for dim, start, length in copy.dst:
        dst = dst.narrow(dim, start, length)
    want = list(shape)
    for dim, start, length in copy.src:
        if dim >= len(shape) or start + length > shape[dim]:
            raise ValueError(f"checkpoint tensor {name!r} has shape {tuple(shape)}, too small "
                             f"for this model's {copy.param}")  # fmt: skip
        want[dim] = length
    if want != list(dst.shape):
        raise ValueError(
            f"checkpoint tensor {name!r} has shape {tuple(shape)}, expected "
            f"{tuple(dst.shape)} for {copy.param}"
        )
    with torch.no_grad():
        dst.copy_(_take(tensor, copy.src, len(shape)))
    return dst.numel()


def _take(tensor: Any, src: tuple[Narrow, ...], ndim: int) -> torch.Tensor:
    """The narrowed source; a safetensors slice reads only those bytes."""
    if isinstance(tensor, torch.Tensor):
        for dim, start, length in src:
            tensor = tensor.narrow(dim, start, length)
        return tensor
    index = [slice(None)] * ndim
    for dim, start, length in src:
        index[dim] = slice(start, start + length)
    return tensor[tuple(index)]


def _expected(name: str, param: torch.Tensor, cfg: Any, part: TPPartition) -> int:
    """Elements the checkpoint must fill: all, but the last rank's vocabulary padding."""
    if part.tp_size > 1 and name in ("model.embed_tokens.weight", "lm_head.weight"):
        rows = min(part.vocab_shard, max(cfg.vocab_size - part.vocab_start, 0))
        return rows * param.shape[1]
    return param.numel()
