"""Triton attention over the token-slot KV pool (page size 1): the CUDA backend used when
FlashInfer is missing, and a CPU one under Triton's interpreter (TRITON_INTERPRET=1, tests).

Once per batch, `init_forward_metadata` flattens each request's slots from `req_to_token`
into (kv_indptr, kv_indices); every layer's kernels read that table. EXTEND batches (prefill
chunks and single-token rows mixed) run the causal extend kernel; DECODE batches run the
split-KV decode kernel. For CUDA graphs the table lives in fixed buffers, filled before each
replay; padded rows attend to the padding slot alone.

Sliding windows and soft caps (LAYER_FEATURES) are compiled into the kernels per layer: the
table stays whole, and the kernels read only the keys inside each query's window.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from types import ModuleType

import torch

from radixrt.core.forward_batch import ForwardBatch, ForwardMode
from radixrt.model.attention.base import LAYER_FEATURES, AttentionLayer, BaseAttnBackend, indptr
from radixrt.model.cuda import build_kv_indices

NUM_KV_SPLITS = 8  # decode splits per request (a fixed count keeps the grid graph-safe)
PADDING_SLOT = 0  # the pool's never-allocated slot: padded graph rows attend to it alone


@dataclass(frozen=True, slots=True)
class TritonMetadata:
    """The slot table of one batch of B requests, all on the pool's device."""

    qo_indptr: torch.Tensor  # (B+1,) int32: request b's new tokens are q[qo[b]:qo[b+1]]
    kv_indptr: torch.Tensor  # (B+1,) int32: its slots are kv_indices[kv[b]:kv[b+1]]
    kv_indices: torch.Tensor  # (>= sum(seq_lens),) int32 KV slots, in token order
    max_extend_len: int  # sizes the extend grid
    is_decode: bool
    # Decode scratch, None for EXTEND: (>= B, H, S, D) and (>= B, H, S) float32, S splits.
    mid_o: torch.Tensor | None = None
    mid_lse: torch.Tensor | None = None


def build_triton_metadata(fb: ForwardBatch) -> TritonMetadata:
    """Slot table of `fb`: request b attends to req_to_token[row_b, :seq_lens[b]], causally."""
    req_to_token = fb.req_to_token_pool.req_to_token
    dev = req_to_token.device
    kv_indptr = indptr(fb.seq_lens_cpu)
    num_indices = int(kv_indptr[-1])
    kv_indptr = kv_indptr.to(dev, non_blocking=True)
    kv_indices = build_kv_indices(
        req_to_token, fb.req_pool_indices, fb.seq_lens, kv_indptr, num_indices
    )
    return TritonMetadata(
        qo_indptr=indptr(fb.extend_seq_lens_cpu).to(dev, non_blocking=True),
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        max_extend_len=max(fb.extend_seq_lens_cpu, default=0),
        is_decode=fb.mode == ForwardMode.DECODE,
    )


class TritonAttnBackend(BaseAttnBackend):
    """Paged extend/decode attention in Triton kernels (attention/triton_kernels/).

    Runs on CUDA, or on CPU tensors when Triton's interpreter was on (TRITON_INTERPRET=1) at
    the moment the kernels were first imported. Any KV dtype the pool holds (float16,
    bfloat16, float32); q is cast to it.
    """

    supports = frozenset(LAYER_FEATURES)

    def __init__(
        self,
        device: torch.device | str,
        *,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        scaling: float | None = None,
        num_kv_splits: int = NUM_KV_SPLITS,
    ) -> None:
        del scaling  # each layer carries its own (AttentionLayer.scaling)
        self.device = torch.device(device)
        self._kernels = _import_kernels()
        if self.device.type != "cuda" and not self._kernels.INTERPRETED:
            raise ValueError(
                f"the triton backend needs a CUDA device, got {self.device} (on CPU it runs "
                "only in Triton's interpreter: set TRITON_INTERPRET=1 before starting)"
            )
        if num_heads % num_kv_heads:
            raise ValueError(f"{num_heads} query heads do not group over {num_kv_heads} KV heads")
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.num_kv_splits = num_kv_splits
        self.metadata: TritonMetadata | None = None
        # Eager decode scratch, grown to the largest batch seen; CUDA graphs keep their own.
        self._mid_o, self._mid_lse = self._scratch(0)

    # ---- eager forward passes -----------------------------------------------------------

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        m = build_triton_metadata(fb)
        if m.is_decode:
            if self._mid_o.shape[0] < fb.batch_size:
                self._mid_o, self._mid_lse = self._scratch(fb.batch_size)
            m = dataclasses.replace(m, mid_o=self._mid_o, mid_lse=self._mid_lse)
        self.metadata = m

    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        m = self._metadata_for(layer)
        k_buf, v_buf = fb.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        q = _rows(q.to(k_buf.dtype))
        out = torch.empty_like(q)
        self._kernels.extend_attention_fwd(
            q,
            k_buf,
            v_buf,
            out,
            m.qo_indptr,
            m.kv_indptr,
            m.kv_indices,
            m.max_extend_len,
            layer.scaling,
            layer.sliding_window,
            layer.logit_softcap,
        )
        return out

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        m = self._metadata_for(layer)
        k_buf, v_buf = fb.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        q = _rows(q.to(k_buf.dtype))
        out = torch.empty_like(q)
        bs = q.shape[0]
        assert m.mid_o is not None and m.mid_lse is not None, "decode without decode metadata"
        self._kernels.decode_attention_fwd(
            q,
            k_buf,
            v_buf,
            out,
            m.kv_indptr,
            m.kv_indices,
            m.mid_o[:bs],
            m.mid_lse[:bs],
            layer.scaling,
            layer.sliding_window,
            layer.logit_softcap,
        )
        return out

    # ---- CUDA graphs (the protocol in executor/cuda_graph.py) -----------------------------

    def init_cuda_graph_state(self, max_bs: int, max_num_indices: int) -> None:
        """Allocate the fixed slot-table and scratch buffers every captured batch size shares."""
        dev = self.device
        self._graph_kv_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=dev)
        self._graph_kv_indices = torch.zeros(max_num_indices, dtype=torch.int32, device=dev)
        self._graph_qo_indptr = torch.arange(max_bs + 1, dtype=torch.int32, device=dev)
        self._graph_mid_o, self._graph_mid_lse = self._scratch(max_bs)

    def init_forward_metadata_capture(self, fb: ForwardBatch) -> None:
        """Point the metadata at the graph buffers for capturing batch size fb.batch_size;
        every row attends to the padding slot alone until a replay fills the real table."""
        bs = fb.batch_size
        self._graph_kv_indptr[: bs + 1].copy_(torch.arange(bs + 1, dtype=torch.int32))
        self._graph_kv_indices[:bs].fill_(PADDING_SLOT)
        self._set_graph_metadata(bs)

    def init_forward_metadata_replay(self, fb: ForwardBatch, bs: int) -> None:
        """Fill the graph buffers for decode batch fb (B <= bs requests); rows B..bs-1 are
        padding and attend to the padding slot alone."""
        if fb.mode != ForwardMode.DECODE:
            raise ValueError("CUDA graphs replay decode batches only")
        m = build_triton_metadata(fb)
        b, n = fb.batch_size, m.kv_indices.numel()
        pad = bs - b
        if n + pad > self._graph_kv_indices.numel():
            raise ValueError(
                f"{n + pad} KV indices exceed the graph buffer's {self._graph_kv_indices.numel()}"
            )
        self._graph_kv_indptr[: b + 1].copy_(m.kv_indptr)
        self._graph_kv_indices[:n].copy_(m.kv_indices)
        if pad:
            tail = torch.arange(n + 1, n + pad + 1, dtype=torch.int32, device=self.device)
            self._graph_kv_indptr[b + 1 : bs + 1].copy_(tail)
            self._graph_kv_indices[n : n + pad].fill_(PADDING_SLOT)
        self._set_graph_metadata(bs)

    # ---- private ------------------------------------------------------------------------

    def _set_graph_metadata(self, bs: int) -> None:
        self.metadata = TritonMetadata(
            qo_indptr=self._graph_qo_indptr[: bs + 1],
            kv_indptr=self._graph_kv_indptr[: bs + 1],
            kv_indices=self._graph_kv_indices,
            max_extend_len=1,
            is_decode=True,
            mid_o=self._graph_mid_o,
            mid_lse=self._graph_mid_lse,
        )

    def _scratch(self, bs: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (bs, self.num_heads, self.num_kv_splits)
        return (
            torch.empty((*shape, self.head_dim), dtype=torch.float32, device=self.device),
            torch.empty(shape, dtype=torch.float32, device=self.device),
        )

    def _metadata_for(self, layer: AttentionLayer) -> TritonMetadata:
        if self.metadata is None:
            raise RuntimeError("forward before init_forward_metadata")
        if (layer.num_heads, layer.num_kv_heads, layer.head_dim) != (
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
        ):
            raise ValueError(f"layer {layer} does not match the backend's head layout")
        return self.metadata


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x (N, H, D) with a unit stride over D, as the kernels index it."""
    return x if x.stride(-1) == 1 else x.contiguous()


def _import_kernels() -> ModuleType:
    try:
        triton_kernels = importlib.import_module("radixrt.model.attention.triton_kernels")
    except ImportError as e:
        raise ImportError(
            f"the triton attention backend needs the triton package ({e}); install it "
            "(pip install 'radixrt[gpu]') or choose attention_backend='torch_native'"
        ) from e
    return triton_kernels
