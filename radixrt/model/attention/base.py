"""The attention-backend interface every backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from radixrt.core.forward_batch import ForwardBatch, ForwardMode


@dataclass(frozen=True, slots=True)
class AttentionLayer:
    """Static facts about one attention layer that a backend needs."""

    layer_id: int
    num_heads: int  # query heads on this rank
    num_kv_heads: int  # KV heads on this rank
    head_dim: int
    scaling: float
    # Keys each query sees, itself included: the query at position i attends to positions
    # max(0, i - sliding_window + 1) .. i. 0: the whole sequence (no window).
    sliding_window: int = 0
    # Scores become cap * tanh(scores / cap) before the softmax (Gemma 2). 0: no cap.
    logit_softcap: float = 0.0


# What a layer may ask of a backend beyond plain causal attention (see `BaseAttnBackend.supports`).
LAYER_FEATURES = ("sliding_window", "logit_softcap")


def layer_features(layer: AttentionLayer) -> set[str]:
    """The LAYER_FEATURES this layer uses."""
    return {name for name in LAYER_FEATURES if getattr(layer, name)}


class BaseAttnBackend(ABC):
    """Paged attention over the token-slot KV pool.

    Contract:
    - `init_forward_metadata(fb)` is called once per forward pass, before any layer runs; it
      may build index tensors from `fb.req_to_token_pool` and must not mutate the pools.
    - `forward(q, k, v, layer, fb)` writes the new k/v of every token in the batch into the
      pool at `fb.out_loc` (the caller owns those slots), then returns attention output over
      each request's whole sequence (cached prefix + new tokens, causal within the new ones).
      Shapes: q (T, num_heads * head_dim), k and v (T, num_kv_heads * head_dim), output
      (T, num_heads * head_dim), all in the model dtype.
    - Backends never allocate or free slots.
    - `supports`: the LAYER_FEATURES this backend implements; the runner refuses, at start-up,
      a model with a layer that needs one it lacks (never a silent full attention).
    - `reads_window_pool`: True when the backend reads a window layer's K/V through the pool's
      `slot_map(layer_id)` (cache/window_base.py), so the runner may give window layers a
      smaller pool of their own; storing through `set_kv_buffer` translates by itself.
    - `fuses_cpu_decode_layers`: True when a decode batch may instead run whole decoder
      layers as one C call each (cpu/fused_layer.py), which attend over the pool and store
      the new K/V exactly as this backend's decode does (an extend batch too, where the
      backend's `extend_segments` describes it); the runner decides it once, when it builds
      the model and this backend.
    - `decodes_request_rows`: True when a batch may hold several consecutive decode rows of
      one request (forward_batch.split_short_extends makes them of a short extend of output
      tokens, e.g. a draft being verified), in a decode pass or beside prefills: row j attends
      over req_to_token[row, :seq_lens[j]] like any decode row, and `forward` (or the fused
      layer's kernel) stores every row's K/V before any row attends, so each row reads the
      K/V of its request's rows before it. Else such extends run as extends.
    - `reads_other_kv_dtypes`: True when the pool may hold K/V in another dtype than the
      activations' (--kv-cache-dtype): the backend widens what it reads and attends over
      exactly what the pool holds (new tokens' K/V as rounded by storing them too); else the
      runner refuses such a pool at start-up.
    """

    fuses_cpu_decode_layers: bool = False
    decodes_request_rows: bool = False
    reads_other_kv_dtypes: bool = False
    supports: frozenset[str] = frozenset()
    reads_window_pool: bool = False

    def init_forward_metadata(self, fb: ForwardBatch) -> None:  # noqa: B027 - optional hook
        """Precompute per-batch metadata shared by all layers."""

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        k = k.view(-1, layer.num_kv_heads, layer.head_dim)
        v = v.view(-1, layer.num_kv_heads, layer.head_dim)
        fb.token_to_kv_pool.set_kv_buffer(layer.layer_id, fb.out_loc, k, v)
        q = q.view(-1, layer.num_heads, layer.head_dim)
        if fb.mode is ForwardMode.DECODE:
            out = self.forward_decode(q, k, v, layer, fb)
        else:
            out = self.forward_extend(q, k, v, layer, fb)
        return out.reshape(-1, layer.num_heads * layer.head_dim)

    @abstractmethod
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        """q (T, H, D); k, v (T, Hkv, D) already stored; return (T, H, D)."""

    @abstractmethod
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        """One token per request: q (B, H, D); k, v (B, Hkv, D) already stored; return (B, H, D)."""


def indptr(lens: list[int]) -> torch.Tensor:
    """(len(lens)+1,) int32 CPU exclusive prefix sums: [0, l0, l0+l1, ...]."""
    out = torch.zeros(len(lens) + 1, dtype=torch.int32)
    if lens:
        out[1:] = torch.tensor(lens, dtype=torch.int64).cumsum(0)
    return out
