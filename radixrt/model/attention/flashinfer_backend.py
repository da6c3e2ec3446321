"""FlashInfer attention over the KV pool in pages of the pool's page_size (1: token slots).

Once per batch, `init_forward_metadata` builds the page table (flashinfer_metadata.py:
qo_indptr, kv_indptr, kv_indices, last_page_len) and plans FlashInfer wrappers: paged prefill
wrappers for EXTEND batches (ragged q, causal, so mixed prefill + single-token rows go
through them too) and paged decode wrappers for DECODE batches.
A plan also fixes the sliding window and the soft cap, so each layer kind (LayerKind: Gemma 3
has sliding and full layers, Gemma 2 caps both) has its own wrapper, planned once per batch
over its own page table (a windowed kind's leaves out the pages before the window); every
layer runs with its kind's. Kinds are learnt as layers first run (that plan happens then) and
planned with the batch from then on.
For CUDA graphs (executor/cuda_graph.py) each captured decode batch size gets a decode wrapper
per kind over fixed page-table buffers (one set per window); they are planned before every
replay. Written against flashinfer-python 0.6.x (plan()/run(); NHD layout).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import torch

from radixrt.core.forward_batch import ForwardBatch, ForwardMode
from radixrt.model.attention.base import LAYER_FEATURES, AttentionLayer, BaseAttnBackend
from radixrt.model.attention.flashinfer_metadata import (
    PADDING_PAGE,
    FlashInferMetadata,
    PageTables,
    paged_kv,
)

WORKSPACE_BYTES = 256 * 2**20  # FlashInfer's float workspace, shared by every wrapper


@dataclass(frozen=True, slots=True)
class AttentionGeometry:
    """The head layout a plan is made for (shared by every layer of a Llama-family model)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    scaling: float


@dataclass(frozen=True, slots=True)
class LayerKind:
    """What a plan fixes besides the page table: the layer's sliding window and soft cap (as
    AttentionLayer's, 0: none). Layers of one kind share a planned wrapper."""

    sliding_window: int = 0
    logit_softcap: float = 0.0

    @classmethod
    def of(cls, layer: AttentionLayer) -> LayerKind:
        return cls(layer.sliding_window, layer.logit_softcap)

    def plan_options(self) -> dict[str, Any]:
        """FlashInfer's plan arguments: window_left counts the keys before the query that it
        sees (the query itself excluded; -1: all)."""
        window_left = self.sliding_window - 1 if self.sliding_window else -1
        return {"window_left": window_left, "logits_soft_cap": self.logit_softcap}


@dataclass(frozen=True, slots=True)
class _GraphTable:
    """Fixed page-table buffers the graph decode wrappers of one window read."""

    indptr: torch.Tensor  # (max_bs+1,) int32
    indices: torch.Tensor  # (n,) int32 page ids
    last_page_len: torch.Tensor  # (max_bs,) int32


class FlashInferAttnBackend(BaseAttnBackend):
    """Paged prefill/decode attention through FlashInfer's batch wrappers (CUDA only).

    The head layout is fixed at construction, so `init_forward_metadata` plans each batch
    before its first layer runs (a layer kind seen for the first time is planned when its
    first layer runs). `kernel_backend` is FlashInfer's prefill backend: "fa2" (default: one
    JIT module serves prefill and tensor-core decode) or "auto" (FA3 on Hopper, with a longer
    first compile).
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
        kernel_backend: str = "fa2",
        workspace_bytes: int = WORKSPACE_BYTES,
    ) -> None:
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"the flashinfer backend needs a CUDA device, got {device}")
        geometry = AttentionGeometry(
            num_heads, num_kv_heads, head_dim, head_dim**-0.5 if scaling is None else scaling
        )
        self._setup(_import_flashinfer(), device, geometry, kernel_backend, workspace_bytes)

    def _setup(
        self,
        fi: ModuleType,
        device: torch.device,
        geometry: AttentionGeometry,
        kernel_backend: str,
        workspace_bytes: int,
    ) -> None:
        """Make the backend's state over FlashInfer module `fi` (tests pass a CPU stand-in)."""
        self._fi, self.device, self.geometry = fi, device, geometry
        self._kernel_backend = kernel_backend
        # (workspace_bytes,) uint8; FlashInfer wants it zeroed before first use.
        self.workspace = torch.zeros(workspace_bytes, dtype=torch.uint8, device=self.device)
        self._dtype = torch.bfloat16
        self.kinds: list[LayerKind] = []  # every kind a layer has run with, in order
        self._prefill: dict[LayerKind, Any] = {}  # eager wrappers, made on first use
        self._decode: dict[LayerKind, Any] = {}
        # The current batch: its wrappers planned so far, and how to plan one more kind.
        self._planned: dict[LayerKind, Any] = {}
        self._planner: Callable[[LayerKind], Any] | None = None
        self._graph_wrappers: dict[tuple[int, LayerKind], Any] = {}  # (batch size, kind)
        self._graph_tables: dict[int, _GraphTable] = {}  # window -> its buffers

    # ---- eager forward passes -----------------------------------------------------------

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        self._set_dtype(fb)
        self._begin(functools.partial(self._plan_eager, PageTables(fb)))

    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        return self._wrapper_for(layer).run(q, paged_kv(layer, fb))

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        return self._wrapper_for(layer).run(q, paged_kv(layer, fb))

    # ---- CUDA graphs (the protocol in executor/cuda_graph.py) -----------------------------

    def init_cuda_graph_state(self, max_bs: int, max_num_indices: int) -> None:
        """Allocate the fixed page-table buffers of full-attention kinds, which every captured
        batch size shares (a window's are made when a kind of it first runs)."""
        self._graph_max_bs, self._graph_max_indices = max_bs, max_num_indices
        self._graph_tables = {0: self._new_graph_table(max_num_indices)}
        self._graph_wrappers = {}

    def init_forward_metadata_capture(self, fb: ForwardBatch) -> None:
        """Make and plan the decode wrappers of batch size fb.batch_size for capture; every row
        attends to the padding page's slot 0 alone (the real page table comes with each replay).
        A kind first seen in the warm-up runs before the capture is planned then."""
        bs = fb.batch_size
        self._set_dtype(fb)
        m = FlashInferMetadata(
            qo_indptr=torch.arange(bs + 1, dtype=torch.int32),
            kv_indptr=torch.arange(bs + 1, dtype=torch.int32),
            kv_indices=torch.full((bs,), PADDING_PAGE, dtype=torch.int32, device=self.device),
            kv_last_page_len=torch.ones(bs, dtype=torch.int32),
            page_size=fb.token_to_kv_pool.page_size,
            is_decode=True,
        )
        self._begin(functools.partial(self._plan_graph, bs, m))

    def init_forward_metadata_replay(self, fb: ForwardBatch, bs: int) -> None:
        """Plan every kind's captured wrapper of batch size `bs` for the decode batch fb (B <= bs
        requests); rows B..bs-1 are padding: one page, the padding page, holding one token."""
        if fb.mode != ForwardMode.DECODE:
            raise ValueError("CUDA graphs replay decode batches only")
        self._set_dtype(fb)
        self._begin(functools.partial(self._plan_replay, PageTables(fb), bs))

    # ---- private ------------------------------------------------------------------------

    def _begin(self, planner: Callable[[LayerKind], Any]) -> None:
        """Start a batch whose wrappers `planner` plans, one per kind: every known kind now."""
        self._planner = planner
        self._planned = {kind: planner(kind) for kind in self.kinds}

    def _wrapper_for(self, layer: AttentionLayer) -> Any:
        """The wrapper planned for this batch and the layer's kind; a new kind is planned now."""
        self._check_layer(layer)
        kind = LayerKind.of(layer)
        wrapper = self._planned.get(kind)
        if wrapper is None:
            if self._planner is None:
                raise RuntimeError("forward before init_forward_metadata")
            if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    f"layer kind {kind} first ran inside a CUDA graph capture, where FlashInfer "
                    "cannot plan; run the model once before capturing"
                )
            self.kinds.append(kind)
            wrapper = self._planned[kind] = self._planner(kind)
        return wrapper

    def _plan_eager(self, tables: PageTables, kind: LayerKind) -> Any:
        m = tables.get(kind.sliding_window)
        if m.is_decode:
            wrapper = self._decode.get(kind)
            if wrapper is None:
                wrapper = self._decode[kind] = self._fi.BatchDecodeWithPagedKVCacheWrapper(
                    self.workspace, "NHD", use_tensor_cores=True
                )
            self._plan_decode(wrapper, m, kind)
            return wrapper
        wrapper = self._prefill.get(kind)
        if wrapper is None:
            wrapper = self._prefill[kind] = self._fi.BatchPrefillWithPagedKVCacheWrapper(
                self.workspace, "NHD", backend=self._kernel_backend
            )
        g = self.geometry
        wrapper.plan(
            m.qo_indptr,
            m.kv_indptr,
            m.kv_indices,
            m.kv_last_page_len,
            g.num_heads,
            g.num_kv_heads,
            g.head_dim,
            m.page_size,
            causal=True,
            q_data_type=self._dtype,
            kv_data_type=self._dtype,
            sm_scale=g.scaling,
            **kind.plan_options(),
        )
        return wrapper

    def _plan_graph(self, bs: int, m: FlashInferMetadata, kind: LayerKind) -> Any:
        """Plan (making it first) the graph decode wrapper of (bs, kind) over table m."""
        wrapper = self._graph_wrappers.get((bs, kind))
        if wrapper is None:
            buf = self._graph_table(kind.sliding_window, m.page_size)
            wrapper = self._fi.BatchDecodeWithPagedKVCacheWrapper(
                self.workspace,
                "NHD",
                use_cuda_graph=True,
                use_tensor_cores=True,
                paged_kv_indptr_buffer=buf.indptr[: bs + 1],
                paged_kv_indices_buffer=buf.indices,
                paged_kv_last_page_len_buffer=buf.last_page_len[:bs],
            )
            self._graph_wrappers[(bs, kind)] = wrapper
        self._plan_decode(wrapper, m, kind)
        return wrapper

    def _plan_replay(self, tables: PageTables, bs: int, kind: LayerKind) -> Any:
        """Plan the graph wrapper of (bs, kind) over the batch's table for the kind's window,
        padded to bs rows: the padding pages go into the window's buffer here, and plan copies
        only the real rows' pages in front of them."""
        m = tables.get(kind.sliding_window)
        buf = self._graph_table(kind.sliding_window, m.page_size)
        pad, n = bs - (m.kv_indptr.numel() - 1), m.kv_indices.numel()
        if n + pad > buf.indices.numel():
            raise ValueError(
                f"{n + pad} KV indices exceed the graph buffer's {buf.indices.numel()}"
            )
        if pad:
            tail = m.kv_indptr[-1] + torch.arange(1, pad + 1, dtype=torch.int32)
            buf.indices[n : n + pad].fill_(PADDING_PAGE)
            ones = torch.ones(pad, dtype=torch.int32)
            m = replace(
                m,
                kv_indptr=torch.cat([m.kv_indptr, tail]),
                kv_last_page_len=torch.cat([m.kv_last_page_len, ones]),
            )
        wrapper = self._graph_wrappers[(bs, kind)]
        self._plan_decode(wrapper, m, kind)
        return wrapper

    def _graph_table(self, window: int, page_size: int) -> _GraphTable:
        """The window's graph buffers, made on first use: a decode row of a window w reads at
        most (w - 1) // page_size + 2 pages."""
        buf = self._graph_tables.get(window)
        if buf is None:
            per_row = (window - 1) // page_size + 2
            n = min(self._graph_max_bs * per_row, self._graph_max_indices)
            buf = self._graph_tables[window] = self._new_graph_table(n)
        return buf

    def _new_graph_table(self, num_indices: int) -> _GraphTable:
        dev, n = self.device, self._graph_max_bs
        return _GraphTable(
            indptr=torch.zeros(n + 1, dtype=torch.int32, device=dev),
            indices=torch.zeros(num_indices, dtype=torch.int32, device=dev),
            last_page_len=torch.ones(n, dtype=torch.int32, device=dev),
        )

    def _set_dtype(self, fb: ForwardBatch) -> None:
        kv_dtype = fb.token_to_kv_pool.dtype
        if kv_dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(
                f"flashinfer attends over float16/bfloat16 KV only, not {kv_dtype}; "
                "use attention_backend='torch_native'"
            )
        self._dtype = kv_dtype

    def _plan_decode(self, wrapper: Any, m: FlashInferMetadata, kind: LayerKind) -> None:
        g = self.geometry
        wrapper.plan(
            m.kv_indptr,
            m.kv_indices,
            m.kv_last_page_len,
            g.num_heads,
            g.num_kv_heads,
            g.head_dim,
            m.page_size,
            q_data_type=self._dtype,
            kv_data_type=self._dtype,
            sm_scale=g.scaling,
            **kind.plan_options(),
        )

    def _check_layer(self, layer: AttentionLayer) -> None:
        g = self.geometry
        if (layer.num_heads, layer.num_kv_heads, layer.head_dim) != (
            g.num_heads,
            g.num_kv_heads,
            g.head_dim,
        ):
            raise ValueError(f"layer {layer} does not match the planned head layout {g}")


def _import_flashinfer() -> ModuleType:
    try:
        import flashinfer
    except Exception as e:  # ImportError, or a CUDA/ABI error raised while importing
        raise ImportError(
            "the flashinfer attention backend needs flashinfer-python 0.6.x "
            f"({e}); install it or choose attention_backend='torch_native'"
        ) from e
    return flashinfer
