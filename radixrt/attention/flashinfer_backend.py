"""FlashInfer attention over the token-slot KV pool, each slot being a page of size 1.

Once per batch, `init_forward_metadata` builds the page table (qo_indptr, kv_indptr,
kv_indices, last_page_len) and plans one FlashInfer wrapper: the paged prefill wrapper for
EXTEND batches (ragged q, causal, so mixed prefill + single-token rows go through it too) and
the paged decode wrapper for DECODE batches. Every layer then runs with that plan.
Written against flashinfer-python 0.6.x (plan()/run(); NHD layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch

from radixrt.attention.base import AttentionLayer, BaseAttnBackend
from radixrt.executor.forward_batch import ForwardBatch, ForwardMode
from radixrt.kernels import build_kv_indices

PAGE_SIZE = 1  # one token slot per page: kv_indices are the pool's slot indices
WORKSPACE_BYTES = 256 * 2**20  # FlashInfer's float workspace, shared by both wrappers


@dataclass(frozen=True, slots=True)
class FlashInferMetadata:
    """FlashInfer's page table for one batch of B requests (page size 1)."""

    qo_indptr: torch.Tensor  # (B+1,) int32 CPU: request b's new tokens are q[qo[b]:qo[b+1]]
    kv_indptr: torch.Tensor  # (B+1,) int32 CPU: its pages are kv_indices[kv[b]:kv[b+1]]
    kv_indices: torch.Tensor  # (sum(seq_lens),) int32 on the pool's device: KV slots, in order
    kv_last_page_len: torch.Tensor  # (B,) int32 CPU: all ones, every page holds one token
    is_decode: bool  # every request computes exactly one token after a cached prefix


@dataclass(frozen=True, slots=True)
class AttentionGeometry:
    """The head layout a plan is made for (shared by every layer of a Llama-family model)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    scaling: float


def build_flashinfer_metadata(fb: ForwardBatch) -> FlashInferMetadata:
    """Page table of `fb`: request b attends to req_to_token[row_b, :seq_lens[b]], causally."""
    req_to_token = fb.req_to_token_pool.req_to_token
    qo_indptr = _indptr(fb.extend_seq_lens_cpu)
    kv_indptr = _indptr(fb.seq_lens_cpu)
    num_indices = int(kv_indptr[-1])
    kv_indices = build_kv_indices(
        req_to_token,
        fb.req_pool_indices,
        fb.seq_lens,
        kv_indptr.to(req_to_token.device, non_blocking=True),
        num_indices,
    )
    return FlashInferMetadata(
        qo_indptr=qo_indptr,
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        kv_last_page_len=torch.ones(fb.batch_size, dtype=torch.int32),
        is_decode=fb.mode == ForwardMode.DECODE,
    )


class FlashInferAttnBackend(BaseAttnBackend):
    """Paged prefill/decode attention through FlashInfer's batch wrappers (CUDA only).

    Give the head geometry to the constructor to plan inside `init_forward_metadata`; without
    it the first batch plans at its first layer and later batches plan up front.
    `kernel_backend` is FlashInfer's prefill backend: "fa2" (default: one JIT module serves
    prefill and tensor-core decode) or "auto" (FA3 on Hopper, with a longer first compile).
    """

    def __init__(
        self,
        device: torch.device | str,
        num_heads: int | None = None,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        scaling: float | None = None,
        kernel_backend: str = "fa2",
        workspace_bytes: int = WORKSPACE_BYTES,
    ) -> None:
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"the flashinfer backend needs a CUDA device, got {self.device}")
        fi = _import_flashinfer()
        self.geometry: AttentionGeometry | None = None
        if num_heads is not None and num_kv_heads is not None and head_dim is not None:
            self.geometry = AttentionGeometry(
                num_heads,
                num_kv_heads,
                head_dim,
                scaling if scaling is not None else head_dim**-0.5,
            )
        # (workspace_bytes,) uint8; FlashInfer wants it zeroed before first use.
        self.workspace = torch.zeros(workspace_bytes, dtype=torch.uint8, device=self.device)
        self.prefill_wrapper = fi.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, "NHD", backend=kernel_backend
        )
        self.decode_wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_tensor_cores=True
        )
        self.metadata: FlashInferMetadata | None = None
        self._dtype = torch.bfloat16
        self._planned: AttentionGeometry | None = None

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        kv_dtype = fb.token_to_kv_pool.dtype
        if kv_dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(
                f"flashinfer attends over float16/bfloat16 KV only, not {kv_dtype}; "
                "use attention_backend='torch_native'"
            )
        self.metadata = build_flashinfer_metadata(fb)
        self._dtype = fb.token_to_kv_pool.dtype
        self._planned = None
        if self.geometry is not None:
            self._plan(self.geometry)

    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        self._ensure_plan(layer)
        return self.prefill_wrapper.run(q, self._paged_kv(layer, fb))

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        self._ensure_plan(layer)
        return self.decode_wrapper.run(q, self._paged_kv(layer, fb))

    # ---- private ------------------------------------------------------------------------

    def _ensure_plan(self, layer: AttentionLayer) -> None:
        g = AttentionGeometry(layer.num_heads, layer.num_kv_heads, layer.head_dim, layer.scaling)
        if g != self._planned:
            self.geometry = g
            self._plan(g)

    def _plan(self, g: AttentionGeometry) -> None:
        m = self.metadata
        assert m is not None, "forward before init_forward_metadata"
        dtypes = dict(q_data_type=self._dtype, kv_data_type=self._dtype, sm_scale=g.scaling)
        if m.is_decode:
            self.decode_wrapper.plan(
                m.kv_indptr,
                m.kv_indices,
                m.kv_last_page_len,
                g.num_heads,
                g.num_kv_heads,
                g.head_dim,
                PAGE_SIZE,
                **dtypes,
            )
        else:
            self.prefill_wrapper.plan(
                m.qo_indptr,
                m.kv_indptr,
                m.kv_indices,
                m.kv_last_page_len,
                g.num_heads,
                g.num_kv_heads,
                g.head_dim,
                PAGE_SIZE,
                causal=True,
                **dtypes,
            )
        self._planned = g

    @staticmethod
    def _paged_kv(layer: AttentionLayer, fb: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's K and V pools as FlashInfer NHD pages: each (num_slots, 1, Hkv, D)."""
        k_buf, v_buf = fb.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        return k_buf.unsqueeze(1), v_buf.unsqueeze(1)


def _indptr(lens: list[int]) -> torch.Tensor:
    """(len(lens)+1,) int32 CPU exclusive prefix sums: [0, l0, l0+l1, ...]."""
    out = torch.zeros(len(lens) + 1, dtype=torch.int32)
    if lens:
        out[1:] = torch.tensor(lens, dtype=torch.int64).cumsum(0)
    return out


def _import_flashinfer() -> ModuleType:
    try:
        import flashinfer
    except Exception as e:  # ImportError, or a CUDA/ABI error raised while importing
        raise ImportError(
            "the flashinfer attention backend needs flashinfer-python 0.6.x "
            f"({e}); install it or choose attention_backend='torch_native'"
        ) from e
    return flashinfer
