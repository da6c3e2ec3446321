"""A CPU stand-in for the part of flashinfer-python 0.6.x's API the flashinfer backend uses.

It follows FlashInfer's documented contract, so the backend's glue (plan arguments, page
tables, CUDA-graph buffers and their padding) runs without a GPU:
- paged KV in NHD layout: k and v pages (num_pages, page_size, Hkv, D); request b reads pages
  indices[indptr[b]:indptr[b+1]], all full but the last, which holds last_page_len[b] tokens;
- causal masks align the queries with the end of each request's KV (decode's one query is
  the last position), and `window_left` w >= 0 lets the query at position i see keys
  i - w .. i only (plan argument; -1: all);
- `logits_soft_cap` c > 0 (plan argument) turns the scaled scores s into c * tanh(s / c);
- a decode wrapper made with use_cuda_graph=True keeps fixed indptr/indices/last_page_len
  buffers: `plan` copies the page table into them (its batch size must equal the buffers'),
  and `run` reads the buffers, not the tensors `plan` was given (so indices may cover only
  the first entries of indptr's range when the caller wrote the rest into the buffer).
Each `run` is recorded in `calls` (a Run: which wrapper, its plan, the KV lengths it read).
A plan's window_left and logits_soft_cap must be given as keywords, as 0.6.x deprecates them
positionally.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Run:
    kind: str  # "prefill" or "decode"
    page_size: int
    window_left: int
    soft_cap: float
    kv_lens: tuple[int, ...]  # keys each request's table held


calls: list[Run] = []


def paged_attention(q, kv, qo_indptr, kv_indptr, kv_indices, last_page_len, page_size,
                    causal, scale, window_left=-1, soft_cap=0.0,
                    kind="prefill") -> torch.Tensor:  # fmt: skip
    """q (T, H, D); kv = (k_pages, v_pages) each (N, P, Hkv, D); returns (T, H, D) and records
    the run in `calls`."""
    k_pages, v_pages = kv
    assert k_pages.shape[1] == page_size, "pages viewed with another page size than planned"
    out = torch.empty_like(q)
    qo, kvp = qo_indptr.tolist(), kv_indptr.tolist()
    kv_lens = []
    for b in range(len(qo) - 1):
        pages = kv_indices[kvp[b] : kvp[b + 1]].long().cpu()
        assert 1 <= int(last_page_len[b]) <= page_size
        n = (len(pages) - 1) * page_size + int(last_page_len[b])
        kv_lens.append(n)
        k = k_pages[pages].flatten(0, 1)[:n].float()  # (n, Hkv, D)
        v = v_pages[pages].flatten(0, 1)[:n].float()
        qb = q[qo[b] : qo[b + 1]].float()  # (m, H, D)
        m, h = qb.shape[0], qb.shape[1]
        assert m <= n, "fewer keys than queries"
        pos = torch.arange(n - m, n)[:, None]  # (m, 1) each query's position, end-aligned
        keys = torch.arange(n)[None, :]
        mask = keys <= pos if causal else torch.ones(m, n, dtype=torch.bool)
        if window_left >= 0:
            mask &= keys >= pos - window_left
        g = h // k.shape[1]
        kh, vh = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # (n, H, D)
        scores = torch.einsum("mhd,nhd->hmn", qb, kh) * scale
        if soft_cap > 0:
            scores = soft_cap * torch.tanh(scores / soft_cap)
        probs = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)
        out[qo[b] : qo[b + 1]] = torch.einsum("hmn,nhd->mhd", probs, vh).to(q.dtype)
    calls.append(Run(kind, page_size, window_left, soft_cap, tuple(kv_lens)))
    return out


class BatchPrefillWithPagedKVCacheWrapper:
    def __init__(self, workspace: torch.Tensor, kv_layout: str, backend: str = "auto") -> None:
        assert kv_layout == "NHD"
        self._plan: dict[str, Any] | None = None

    def plan(self, qo_indptr, kv_indptr, kv_indices, last_page_len, num_qo_heads, num_kv_heads,
             head_dim, page_size, *, causal=False, q_data_type=None, kv_data_type=None,
             sm_scale=None, window_left=-1, logits_soft_cap=None) -> None:  # fmt: skip
        assert len(qo_indptr) == len(kv_indptr) == len(last_page_len) + 1
        assert int(kv_indptr[-1]) == kv_indices.numel()
        self._plan = dict(qo_indptr=qo_indptr.clone(), kv_indptr=kv_indptr.clone(),
                          kv_indices=kv_indices.clone(), last_page_len=last_page_len.clone(),
                          page_size=page_size, causal=causal, scale=sm_scale,
                          window_left=window_left, soft_cap=logits_soft_cap or 0.0)  # fmt: skip

    def run(self, q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        assert self._plan is not None, "run before plan"
        return paged_attention(q, kv, **self._plan, kind="prefill")


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
             page_size, *, q_data_type=None, kv_data_type=None, sm_scale=None, window_left=-1,
             logits_soft_cap=None) -> None:  # fmt: skip
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
        self._plan = dict(page_size=page_size, scale=sm_scale, window_left=window_left,
                          soft_cap=logits_soft_cap or 0.0)  # fmt: skip

    def run(self, q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        assert self._plan is not None, "run before plan"
        qo = torch.arange(q.shape[0] + 1, dtype=torch.int32)
        return paged_attention(q, kv, qo, self._indptr, self._indices, self._last,
                               causal=False, kind="decode", **self._plan)  # fmt: skip
