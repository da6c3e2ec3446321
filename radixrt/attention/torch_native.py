"""Reference attention backend in plain torch (CPU or any device).

Decode-like requests (one new token) are attended in one padded batched call; longer extends
run one request at a time, so a mixed batch costs one batched call plus one call per prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from radixrt.attention.base import AttentionLayer, BaseAttnBackend
from radixrt.attention.decode_cascade import DecodePlan, attend_decode, build_decode_plan
from radixrt.forward_batch import ForwardBatch

# Decode batches with more (request, key) pairs than this and no shared prefix use SDPA.
_SMALL_DECODE_TOKENS = 4096


@dataclass(slots=True)
class _ExtendReq:
    q_start: int
    q_len: int
    kv_idx: torch.Tensor | None  # (seq_len,) int64 pool slots, None when there is no prefix
    mask: torch.Tensor | None  # (q_len, seq_len) bool, True = attend; None when causal from 0


@dataclass(slots=True)
class _DecodeGroup:
    rows: torch.Tensor  # (Bd,) int64 rows of the packed batch that decode
    plan: DecodePlan  # shared-prefix groups and per-row suffix slots


class TorchNativeAttnBackend(BaseAttnBackend):
    """Gathers each request's K/V from the pool by req_to_token and calls SDPA."""

    def __init__(
        self,
        device: torch.device | str = "cpu",
        *,
        num_heads: int | None = None,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        scaling: float | None = None,
    ) -> None:
        # The head layout is part of the registry's constructor protocol; this backend reads
        # it from each layer instead, so it is accepted and ignored.
        del num_heads, num_kv_heads, head_dim, scaling
        self.device = torch.device(device)
        self._extends: list[_ExtendReq] = []
        self._decode: _DecodeGroup | None = None

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        req_to_token = fb.req_to_token_pool.req_to_token
        rows = fb.req_pool_indices.tolist()
        starts = fb.extend_start_loc.tolist()
        decode_ids: list[int] = []
        self._extends = []
        for i, (row, p, e) in enumerate(
            zip(rows, fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu)
        ):
            if e == 1 and p > 0:
                decode_ids.append(i)
                continue
            if p == 0:
                self._extends.append(_ExtendReq(starts[i], e, None, None))
                continue
            kv_idx = req_to_token[row, : p + e].to(torch.int64)
            q_pos = torch.arange(p, p + e, device=req_to_token.device)
            kv_pos = torch.arange(p + e, device=req_to_token.device)
            self._extends.append(
                _ExtendReq(starts[i], e, kv_idx, kv_pos[None, :] <= q_pos[:, None])
            )
        self._decode = self._build_decode_group(fb, decode_ids) if decode_ids else None

    def _build_decode_group(self, fb: ForwardBatch, ids: list[int]) -> _DecodeGroup:
        dev = fb.req_to_token_pool.req_to_token.device
        idx = torch.tensor(ids, dtype=torch.int64, device=dev)
        max_len = max(fb.seq_lens_cpu[i] for i in ids)
        table = fb.req_to_token_pool.req_to_token[fb.req_pool_indices[idx], :max_len].to(
            torch.int64
        )
        plan = build_decode_plan(table, [fb.seq_lens_cpu[i] for i in ids])
        return _DecodeGroup(fb.extend_start_loc[idx], plan)

    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        out = torch.empty_like(q)
        k_buf, v_buf = fb.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        for r in self._extends:
            sl = slice(r.q_start, r.q_start + r.q_len)
            if r.kv_idx is None:
                kk, vv = k[sl], v[sl]
            else:
                kk, vv = k_buf.index_select(0, r.kv_idx), v_buf.index_select(0, r.kv_idx)
            out[sl] = _sdpa(q[sl], kk, vv, r.mask, layer, causal=r.mask is None)
        self._attend_decode_rows(q, out, k_buf, v_buf, layer)
        return out

    def _attend_decode_rows(
        self,
        q: torch.Tensor,
        out: torch.Tensor,
        k_buf: torch.Tensor,
        v_buf: torch.Tensor,
        layer: AttentionLayer,
    ) -> None:
        """Fill out's rows of the batch's decoding requests (a mixed batch), if any."""
        if self._decode is not None:
            g = self._decode
            out[g.rows] = self._attend_decode(q[g.rows], g, k_buf, v_buf, layer)

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        assert self._decode is not None, "decode batch without decode metadata"
        k_buf, v_buf = fb.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        return self._attend_decode(q, self._decode, k_buf, v_buf, layer)

    @staticmethod
    def _attend_decode(
        q: torch.Tensor,
        g: _DecodeGroup,
        k_buf: torch.Tensor,
        v_buf: torch.Tensor,
        layer: AttentionLayer,
    ) -> torch.Tensor:
        # q (Bd, H, D); gathered k/v (Bd, Lmax, Hkv, D) -> (Bd, Hkv, Lmax, D). index_select,
        # not buf[idx]: advanced indexing into a large CPU buffer is orders of magnitude slower.
        plan = g.plan
        if plan.groups or plan.kv_idx.numel() <= _SMALL_DECODE_TOKENS:
            return attend_decode(q, plan, k_buf, v_buf, layer.num_kv_heads, layer.scaling)
        shape = (*plan.kv_idx.shape, *k_buf.shape[1:])
        kk = k_buf.index_select(0, plan.kv_idx.flatten()).view(shape).transpose(1, 2)
        vv = v_buf.index_select(0, plan.kv_idx.flatten()).view(shape).transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q.unsqueeze(2),
            kk,
            vv,
            attn_mask=plan.mask,
            scale=layer.scaling,
            enable_gqa=layer.num_heads != layer.num_kv_heads,
        )
        return out.squeeze(2)  # (Bd, H, D)


def _sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    layer: AttentionLayer,
    causal: bool,
) -> torch.Tensor:
    """One request: q (Lq, H, D), k/v (Lk, Hkv, D), mask (Lq, Lk) or causal -> (Lq, H, D)."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0),
        k.transpose(0, 1).unsqueeze(0),
        v.transpose(0, 1).unsqueeze(0),
        attn_mask=mask,
        is_causal=causal,
        scale=layer.scaling,
        enable_gqa=layer.num_heads != layer.num_kv_heads,
    )
    return out.squeeze(0).transpose(0, 1)
