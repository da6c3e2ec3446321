"""A CPU stand-in for the part of flashinfer-python 0.6.x's API the flashinfer backend uses.

It follows FlashInfer's documented contract, so the backend's glue (plan arguments, page
tables, CUDA-graph buffers and their padding) runs without a GPU:
- paged KV in NHD layout: k and v pages (num_pages, page_size, Hkv, D); request b reads pages
  indices[indptr[b]:indptr[b+1]], all full but the last, which holds last_page_len[b] tokens;
- causal masks align the queries with the end of each request's KV;
- a decode wrapper made with use_cuda_graph=True keeps fixed indptr/indices/last_page_len
  buffers: `plan` copies the page table into them (its batch size must equal the buffers'),
  and `run` reads the buffers, not the tensors `plan` was given (so indices may cover only
  the first entries of indptr's range when the caller wrote the rest into the buffer).
Each `run` is recorded in `calls` with the page size of its plan.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

calls: list[tuple[str, int]] = []  # (wrapper kind, page_size) of every run


def paged_attention(q, kv, qo_indptr, kv_indptr, kv_indices, last_page_len, page_size,
                    causal, scale) -> torch.Tensor:  # fmt: skip
    """q (T, H, D); kv = (k_pages, v_pages) each (N, P, Hkv, D); returns (T, H, D)."""
    k_pages, v_pages = kv
    assert k_pages.shape[1] == page_size, "pages viewed with another page size than planned"
    out = torch.empty_like(q)
    qo, kvp = qo_indptr.tolist(), kv_indptr.tolist()
    for b in range(len(qo) - 1):
        pages = kv_indices[kvp[b] : kvp[b + 1]].long().cpu()
        n = (len(pages) - 1) * page_size + int(last_page_len[b])
        k = k_pages[pages].flatten(0, 1)[:n]  # (n, Hkv, D)
        v = v_pages[pages].flatten(0, 1)[:n]
        qb = q[qo[b] : qo[b + 1]]
        mask = None
        if causal:
            pos = torch.arange(n - qb.shape[0], n)
            mask = torch.arange(n)[None, :] <= pos[:, None]
        out[qo[b] : qo[b + 1]] = F.scaled_dot_product_attention(
            qb.transpose(0, 1).float(), k.transpose(0, 1).float(), v.transpose(0, 1).float(),
            attn_mask=mask, scale=scale, enable_gqa=True,
        ).transpose(0, 1).to(q.dtype)  # fmt: skip
    return out


class BatchPrefillWithPagedKVCacheWrapper:
    def __init__(self, workspace: torch.Tensor, kv_layout: str, backend: str = "auto") -> None:
        assert kv_layout == "NHD"
        self._plan: dict[str, Any] | None = None

    def plan(self, qo_indptr, kv_indptr, kv_indices, last_page_len, num_qo_heads, num_kv_heads,
             head_dim, page_size, *, causal=False, q_data_type=None, kv_data_type=None,
             sm_scale=None) -> None:  # fmt: skip
        assert len(qo_indptr) == len(kv_indptr) == len(last_page_len) + 1
        assert int(kv_indptr[-1]) == kv_indices.numel()
        self._plan = dict(qo_indptr=qo_indptr.clone(), kv_indptr=kv_indptr.clone(),
                          kv_indices=kv_indices.clone(), last_page_len=last_page_len.clone(),
                          page_size=page_size, causal=causal, scale=sm_scale)  # fmt: skip

    def run(self, q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        assert self._plan is not None, "run before plan"
        calls.append(("prefill", self._plan["page_size"]))
        return paged_attention(q, kv, **self._plan)


class BatchDecodeWithPagedKVCacheWrapper:
    def __init__(self, workspace, kv_layout, use_cuda_graph=False, use_tensor_cores=False,
                 paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None,
                 paged_kv_last_page_len_buffer=None) -> None:  # fmt: skip
        assert kv_layout == "NHD"
        self.graph = use_cuda_graph
        self._indptr = paged_kv_indptr_buffer
        self._indices = paged_kv_indices_buffer
        self._last = paged_kv_last_page_len_buffer
        self._plan: dict[str, Any] | None = None

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size, *, q_data_type=None, kv_data_type=None, sm_scale=None) -> None:  # fmt: skip
        if self.graph:  # indices may stop short of indptr[-1]: the rest is already in place
            if len(indptr) != len(self._indptr):
                raise ValueError("batch size differs from the captured one")
            if max(len(indices), int(indptr[-1])) > len(self._indices):
                raise ValueError("indices exceed the buffer")
            self._indptr.copy_(indptr)
            self._last.copy_(last_page_len)
            self._indices[: len(indices)].copy_(indices)
        else:
            assert int(indptr[-1]) == indices.numel()
            self._indptr, self._indices, self._last = indptr, indices, last_page_len
        self._plan = dict(page_size=page_size, scale=sm_scale)

    def run(self, q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        assert self._plan is not None, "run before plan"
        calls.append(("decode", self._plan["page_size"]))
        qo = torch.arange(q.shape[0] + 1, dtype=torch.int32)
        return paged_attention(q, kv, qo, self._indptr, self._indices, self._last,
                               self._plan["page_size"], False, self._plan["scale"])  # fmt: skip
