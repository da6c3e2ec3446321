"""FlashInfer attention over the KV pool in pages of the pool's page_size (1: token slots).

Once per batch, `init_forward_metadata` builds the page table (flashinfer_metadata.py:
qo_indptr, kv_indptr, kv_indices, last_page_len) and plans one FlashInfer wrapper: the paged
prefill wrapper for EXTEND batches (ragged q, causal, so mixed prefill + single-token rows go
through it too) and the paged decode wrapper for DECODE batches. Every layer then runs with
that plan.
For CUDA graphs (executor/cuda_graph.py) each captured decode batch size gets its own decode
wrapper over fixed page-table buffers; it is planned before every replay.
Written against flashinfer-python 0.6.x (plan()/run(); NHD layout).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import torch

from radixrt.attention.base import AttentionLayer, BaseAttnBackend
from radixrt.attention.flashinfer_metadata import (
    PADDING_PAGE,
    FlashInferMetadata,
    build_flashinfer_metadata,
    paged_kv,
)
from radixrt.forward_batch import ForwardBatch, ForwardMode

WORKSPACE_BYTES = 256 * 2**20  # FlashInfer's float workspace, shared by every wrapper


@dataclass(frozen=True, slots=True)
class AttentionGeometry:
    """The head layout a plan is made for (shared by every layer of a Llama-family model)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    scaling: float


class FlashInferAttnBackend(BaseAttnBackend):
    """Paged prefill/decode attention through FlashInfer's batch wrappers (CUDA only).

    The head layout is fixed at construction, so `init_forward_metadata` plans each batch
    before its first layer runs. `kernel_backend` is FlashInfer's prefill backend: "fa2"
    (default: one JIT module serves prefill and tensor-core decode) or "auto" (FA3 on Hopper,
    with a longer first compile).
    """

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
        """Make the wrappers from FlashInfer module `fi` (tests pass a CPU stand-in)."""
        self._fi, self.device, self.geometry = fi, device, geometry
        # (workspace_bytes,) uint8; FlashInfer wants it zeroed before first use.
        self.workspace = torch.zeros(workspace_bytes, dtype=torch.uint8, device=self.device)
        self.prefill_wrapper = self._fi.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, "NHD", backend=kernel_backend
        )
        self.decode_wrapper = self._fi.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_tensor_cores=True
        )
        self.metadata: FlashInferMetadata | None = None
        self._dtype = torch.bfloat16
        self._decode: Any = self.decode_wrapper  # the decode wrapper the next layers run
        self._graph_wrappers: dict[int, Any] = {}  # captured batch size -> its decode wrapper

    # ---- eager forward passes -----------------------------------------------------------

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        self._set_dtype(fb)
        m = self.metadata = build_flashinfer_metadata(fb)
        self._decode = self.decode_wrapper
        if m.is_decode:
            self._plan_decode(self.decode_wrapper, m)
            return
        g = self.geometry
        self.prefill_wrapper.plan(
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
        )

    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        self._check_layer(layer)
        return self.prefill_wrapper.run(q, paged_kv(layer, fb))

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        self._check_layer(layer)
        return self._decode.run(q, paged_kv(layer, fb))

    # ---- CUDA graphs (the protocol in executor/cuda_graph.py) -----------------------------

    def init_cuda_graph_state(self, max_bs: int, max_num_indices: int) -> None:
        """Allocate the fixed page-table buffers that every captured batch size shares."""
        dev = self.device
        self._graph_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=dev)  # (max_bs+1,)
        self._graph_indices = torch.zeros(max_num_indices, dtype=torch.int32, device=dev)
        self._graph_last_page_len = torch.ones(max_bs, dtype=torch.int32, device=dev)
        self._graph_wrappers = {}

    def init_forward_metadata_capture(self, fb: ForwardBatch) -> None:
        """Make and plan the decode wrapper of batch size fb.batch_size for capture; every row
        attends to the padding page's slot 0 alone (the real page table comes with each replay)."""
        bs = fb.batch_size
        self._set_dtype(fb)
        wrapper = self._graph_wrappers.get(bs)
        if wrapper is None:
            wrapper = self._fi.BatchDecodeWithPagedKVCacheWrapper(
                self.workspace,
                "NHD",
                use_cuda_graph=True,
                use_tensor_cores=True,
                paged_kv_indptr_buffer=self._graph_indptr[: bs + 1],
                paged_kv_indices_buffer=self._graph_indices,
                paged_kv_last_page_len_buffer=self._graph_last_page_len[:bs],
            )
            self._graph_wrappers[bs] = wrapper
        m = FlashInferMetadata(
            qo_indptr=torch.arange(bs + 1, dtype=torch.int32),
            kv_indptr=torch.arange(bs + 1, dtype=torch.int32),
            kv_indices=torch.full((bs,), PADDING_PAGE, dtype=torch.int32, device=self.device),
            kv_last_page_len=torch.ones(bs, dtype=torch.int32),
            page_size=fb.token_to_kv_pool.page_size,
            is_decode=True,
        )
        self._plan_decode(wrapper, m)
        self._decode = wrapper

    def init_forward_metadata_replay(self, fb: ForwardBatch, bs: int) -> None:
        """Plan the captured wrapper of batch size `bs` for the decode batch fb (B <= bs
        requests); rows B..bs-1 are padding: one page, the padding page, holding one token."""
        if fb.mode != ForwardMode.DECODE:
            raise ValueError("CUDA graphs replay decode batches only")
        self._set_dtype(fb)
        m = build_flashinfer_metadata(fb)
        pad, n = bs - fb.batch_size, m.kv_indices.numel()
        if n + pad > self._graph_indices.numel():
            raise ValueError(
                f"{n + pad} KV indices exceed the graph buffer's {self._graph_indices.numel()}"
            )
        if pad:
            tail = m.kv_indptr[-1] + torch.arange(1, pad + 1, dtype=torch.int32)
            self._graph_indices[n : n + pad].fill_(PADDING_PAGE)
            ones = torch.ones(pad, dtype=torch.int32)
            m = replace(
                m,
                kv_indptr=torch.cat([m.kv_indptr, tail]),
                kv_last_page_len=torch.cat([m.kv_last_page_len, ones]),
            )
        self._plan_decode(self._graph_wrappers[bs], m)
        self._decode = self._graph_wrappers[bs]

    # ---- private ------------------------------------------------------------------------

    def _set_dtype(self, fb: ForwardBatch) -> None:
        kv_dtype = fb.token_to_kv_pool.dtype
        if kv_dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(
                f"flashinfer attends over float16/bfloat16 KV only, not {kv_dtype}; "
                "use attention_backend='torch_native'"
            )
        self._dtype = kv_dtype

    def _plan_decode(self, wrapper: Any, m: FlashInferMetadata) -> None:
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
