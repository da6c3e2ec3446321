"""FlashInfer's page table for a batch, built from req_to_token once per batch (no host sync).

With pages of P slots (the pool's page_size; paged_allocator.py keeps token t of a request at
offset t % P of a page that holds only that request's tokens), request b of length n_b
attends to ceil(n_b / P) pages whose ids are req_to_token[row_b, j * P] // P, the last page
holding n_b - (pages - 1) * P tokens. With P == 1 the page ids are the slots themselves.
The K/V buffers are seen as (num_slots // P, P, Hkv, D) pages (NHD layout).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixrt.attention.base import AttentionLayer, indptr
from radixrt.forward_batch import ForwardBatch, ForwardMode
from radixrt.kernels import build_kv_indices

PADDING_PAGE = 0  # the pool's never-allocated page: padded graph rows attend to its slot 0


@dataclass(frozen=True, slots=True)
class FlashInferMetadata:
    """FlashInfer's page table for one batch of B requests."""

    qo_indptr: torch.Tensor  # (B+1,) int32 CPU: request b's new tokens are q[qo[b]:qo[b+1]]
    kv_indptr: torch.Tensor  # (B+1,) int32 CPU: its pages are kv_indices[kv[b]:kv[b+1]]
    kv_indices: torch.Tensor  # (num_pages,) int32 on the pool's device: page ids, in order
    kv_last_page_len: torch.Tensor  # (B,) int32 CPU: tokens in each request's last page
    page_size: int
    is_decode: bool  # every request computes exactly one token after a cached prefix


def build_flashinfer_metadata(fb: ForwardBatch) -> FlashInferMetadata:
    """Page table of `fb`: request b attends to req_to_token[row_b, :seq_lens[b]], causally."""
    req_to_token = fb.req_to_token_pool.req_to_token
    p = fb.token_to_kv_pool.page_size
    seq_lens = fb.seq_lens_cpu
    pages = [-(-n // p) for n in seq_lens]
    kv_indptr = indptr(pages)
    kv_indices = build_kv_indices(
        req_to_token,
        fb.req_pool_indices,
        fb.seq_lens,
        kv_indptr.to(req_to_token.device, non_blocking=True),
        int(kv_indptr[-1]),
        p,
    )
    last = [n - (k - 1) * p for n, k in zip(seq_lens, pages, strict=True)]
    return FlashInferMetadata(
        qo_indptr=indptr(fb.extend_seq_lens_cpu),
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        kv_last_page_len=torch.tensor(last, dtype=torch.int32),
        page_size=p,
        is_decode=fb.mode == ForwardMode.DECODE,
    )


def paged_kv(layer: AttentionLayer, fb: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's K and V pools as FlashInfer NHD pages: each (num_slots // P, P, Hkv, D)."""
    p = fb.token_to_kv_pool.page_size
    k_buf, v_buf = fb.token_to_kv_pool.get_kv_buffer(layer.layer_id)
    return k_buf.view(-1, p, *k_buf.shape[1:]), v_buf.view(-1, p, *v_buf.shape[1:])
