"""FlashInfer's page table for a batch, built from req_to_token once per batch (no host sync).

With pages of P slots (the pool's page_size; paged_allocator.py keeps token t of a request at
offset t % P of a page that holds only that request's tokens), request b of length n_b
attends to ceil(n_b / P) pages whose ids are req_to_token[row_b, j * P] // P, the last page
holding n_b - (pages - 1) * P tokens. With P == 1 the page ids are the slots themselves.
The K/V buffers are seen as (num_slots // P, P, Hkv, D) pages (NHD layout).

A table for a sliding window w drops each request's leading pages that hold no key any of its
queries sees (all before max(0, first query's position - w + 1)), so windowed layers read
O(w) pages per request; FlashInfer aligns the queries with the end of the KV they are given
and masks the rest of the window itself (`window_left`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixrt.core.forward_batch import ForwardBatch, ForwardMode
from radixrt.model.attention.base import AttentionLayer, indptr
from radixrt.model.cuda import build_kv_indices

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


def build_flashinfer_metadata(fb: ForwardBatch, window: int = 0) -> FlashInferMetadata:
    """Page table of `fb`: request b attends to req_to_token[row_b, :seq_lens[b]], causally;
    with `window` > 0, from the page of the first key its first new token sees."""
    req_to_token = fb.req_to_token_pool.req_to_token
    p = fb.token_to_kv_pool.page_size
    seq_lens = fb.seq_lens_cpu
    pages = [-(-n // p) for n in seq_lens]
    skip = [0] * len(pages)  # leading pages of each request left out
    if window:
        skip = [max(0, q - window + 1) // p for q in fb.extend_prefix_lens_cpu]
    kept = [n - s for n, s in zip(pages, skip, strict=True)]
    kv_indptr = indptr(kept)
    num_indices = int(kv_indptr[-1])
    if any(skip):
        kv_indices = _window_kv_indices(fb, skip, kept, kv_indptr, num_indices)
    else:
        kv_indices = build_kv_indices(
            req_to_token,
            fb.req_pool_indices,
            fb.seq_lens,
            kv_indptr.to(req_to_token.device, non_blocking=True),
            num_indices,
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


class PageTables:
    """One batch's page tables by sliding window (0: whole sequences), each built on first use;
    a window that drops no page shares the whole table."""

    def __init__(self, fb: ForwardBatch) -> None:
        self._fb = fb
        self._by_window: dict[int, FlashInferMetadata] = {}
        p = fb.token_to_kv_pool.page_size
        # The widest window that drops a page of some request (the one whose first new token
        # comes last): max(0, prefix - w + 1) // p > 0 needs w <= prefix - p + 1.
        self._max_cutting = max(fb.extend_prefix_lens_cpu, default=0) - p + 1

    def get(self, window: int) -> FlashInferMetadata:
        """The table for layers with this sliding window (0: none)."""
        if window > self._max_cutting:
            window = 0
        if window not in self._by_window:
            self._by_window[window] = build_flashinfer_metadata(self._fb, window)
        return self._by_window[window]


def paged_kv(layer: AttentionLayer, fb: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's K and V pools as FlashInfer NHD pages: each (num_slots // P, P, Hkv, D)."""
    p = fb.token_to_kv_pool.page_size
    k_buf, v_buf = fb.token_to_kv_pool.get_kv_buffer(layer.layer_id)
    return k_buf.view(-1, p, *k_buf.shape[1:]), v_buf.view(-1, p, *v_buf.shape[1:])


def _window_kv_indices(
    fb: ForwardBatch, skip: list[int], kept: list[int], kv_indptr: torch.Tensor, num: int
) -> torch.Tensor:
    """(num,) int32 page ids, no host sync: request b's pages skip[b] .. skip[b]+kept[b]-1, at
    kv_indptr[b] (build_kv_indices' layout, from a per-request first page)."""
    req_to_token = fb.req_to_token_pool.req_to_token
    dev, p = req_to_token.device, fb.token_to_kv_pool.page_size
    counts = torch.tensor(kept, dtype=torch.int64).to(dev, non_blocking=True)  # (B,)
    firsts = torch.tensor(skip, dtype=torch.int64).to(dev, non_blocking=True)  # (B,)
    rows = fb.req_pool_indices.to(dev, torch.int64).repeat_interleave(counts, output_size=num)
    starts = kv_indptr[:-1].to(dev, torch.int64).repeat_interleave(counts, output_size=num)
    firsts = firsts.repeat_interleave(counts, output_size=num)
    cols = (torch.arange(num, device=dev, dtype=torch.int64) - starts + firsts) * p
    slots = req_to_token.reshape(-1).index_select(0, rows * req_to_token.shape[1] + cols)
    return (slots if p == 1 else slots // p).to(torch.int32)
