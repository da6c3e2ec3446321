"""Reference attention backend in plain torch (CPU or any device).

Decode-like requests (one new token) are attended in one padded batched call; longer extends
run one request at a time, so a mixed batch costs one batched call plus one call per prefill.
Every layer feature is implemented here (LAYER_FEATURES): sliding windows read only each
query's last `sliding_window` keys, and soft-capped layers compute their scores explicitly
(SDPA has no cap). A layer in the pool's window pool is read through its `slot_map`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from radixrt.cache.kv_layout import as_stored, from_rows
from radixrt.core.forward_batch import ForwardBatch
from radixrt.model.attention.base import LAYER_FEATURES, AttentionLayer, BaseAttnBackend
from radixrt.model.attention.decode_cascade import (
    DecodePlan,
    attend_decode,
    build_decode_plan,
    cap_scores,
)

# Decode batches with more (request, key) pairs than this and no shared prefix use SDPA.
_SMALL_DECODE_TOKENS = 4096


@dataclass(slots=True)
class _Piece:
    """Some query rows of one request and the keys they attend to."""

    q: slice  # rows of the packed batch
    kv_idx: torch.Tensor | None  # (Lk,) int64 pool slots; None: the rows' own k/v, causal
    mask: torch.Tensor | None  # (Lq, Lk) bool, True = attend; None: causal from key 0


@dataclass(slots=True)
class _ExtendReq:
    q_start: int  # first row in the packed batch
    q_len: int  # new tokens
    prefix_len: int  # tokens before them (their KV already in the pool)
    row: int  # req_to_token row


@dataclass(slots=True)
class _DecodeGroup:
    rows: torch.Tensor  # (Bd,) int64 rows of the packed batch that decode
    plan: DecodePlan  # shared-prefix groups and per-row suffix slots
    table: torch.Tensor  # (Bd, Lmax) int64 every decode row's slots, padded
    seq_lens: list[int]
    # (window, read through the window pool) -> plan over each row's last `window` keys
    windowed: dict[tuple[int, bool], DecodePlan] = field(default_factory=dict)


class TorchNativeAttnBackend(BaseAttnBackend):
    """Gathers each request's K/V from the pool by req_to_token and calls SDPA."""

    supports = frozenset(LAYER_FEATURES)
    reads_window_pool = True
    reads_other_kv_dtypes = True  # gathers widen to the activations' dtype
    # Decode rows are gathered per row (req_to_token row, seq_len), after `forward` stored
    # the whole batch's K/V: rows of one request need nothing more.
    decodes_request_rows = True

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
        # Per pass: the extends' pieces for each window (0: full attention) and whether they
        # are read through the window pool, built on first use.
        self._pieces: dict[tuple[int, bool], list[_Piece]] = {}
        self._req_to_token: torch.Tensor | None = None

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        self._req_to_token = fb.req_to_token_pool.req_to_token
        rows = fb.req_pool_indices.tolist()
        starts = fb.extend_start_loc.tolist()
        decode_ids: list[int] = []
        self._extends, self._pieces = [], {}
        for i, (row, p, e) in enumerate(
            zip(rows, fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu)
        ):
            if fb.is_decode_row(i):
                decode_ids.append(i)
            else:
                self._extends.append(_ExtendReq(starts[i], e, p, row))
        self._decode = self._build_decode_group(fb, decode_ids) if decode_ids else None

    def _build_decode_group(self, fb: ForwardBatch, ids: list[int]) -> _DecodeGroup:
        self._req_to_token = fb.req_to_token_pool.req_to_token
        dev = fb.req_to_token_pool.req_to_token.device
        idx = torch.tensor(ids, dtype=torch.int64, device=dev)
        lens = [fb.seq_lens_cpu[i] for i in ids]
        table = fb.req_to_token_pool.req_to_token[fb.req_pool_indices[idx], : max(lens)].to(
            torch.int64
        )
        return _DecodeGroup(fb.extend_start_loc[idx], build_decode_plan(table, lens), table, lens)

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
        slot_map = fb.token_to_kv_pool.slot_map(layer.layer_id)
        for piece in self._extend_pieces(layer.sliding_window, slot_map):
            if piece.kv_idx is None:  # as the pool holds them: a later hit reads the same
                kk, vv = as_stored(k[piece.q], k_buf.dtype), as_stored(v[piece.q], v_buf.dtype)
            else:
                kk = from_rows(k_buf.index_select(0, piece.kv_idx), q.dtype)
                vv = from_rows(v_buf.index_select(0, piece.kv_idx), q.dtype)
            out[piece.q] = _attend(q[piece.q], kk, vv, piece.mask, layer)
        self._attend_decode_rows(q, out, k_buf, v_buf, layer, slot_map)
        return out

    def _extend_pieces(self, window: int, slot_map: torch.Tensor | None = None) -> list[_Piece]:
        key = (window, slot_map is not None)
        if key not in self._pieces:
            assert self._req_to_token is not None, "extend without metadata"
            table = self._req_to_token
            pieces = [piece for r in self._extends for piece in _pieces_of(r, window, table)]
            if slot_map is not None:
                pieces = [_translated(p, slot_map) for p in pieces]
            self._pieces[key] = pieces
        return self._pieces[key]

    def _attend_decode_rows(
        self,
        q: torch.Tensor,
        out: torch.Tensor,
        k_buf: torch.Tensor,
        v_buf: torch.Tensor,
        layer: AttentionLayer,
        slot_map: torch.Tensor | None = None,
    ) -> None:
        """Fill out's rows of the batch's decoding requests (a mixed batch), if any."""
        if self._decode is not None:
            g = self._decode
            out[g.rows] = self._attend_decode(q[g.rows], g, k_buf, v_buf, layer, slot_map)

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
        slot_map = fb.token_to_kv_pool.slot_map(layer.layer_id)
        return self._attend_decode(q, self._decode, k_buf, v_buf, layer, slot_map)

    @staticmethod
    def _attend_decode(
        q: torch.Tensor,
        g: _DecodeGroup,
        k_buf: torch.Tensor,
        v_buf: torch.Tensor,
        layer: AttentionLayer,
        slot_map: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # q (Bd, H, D); gathered k/v (Bd, Lmax, Hkv, D) -> (Bd, Hkv, Lmax, D). index_select,
        # not buf[idx]: advanced indexing into a large CPU buffer is orders of magnitude slower.
        plan = _decode_plan(g, layer.sliding_window, slot_map)
        small = plan.kv_idx.numel() <= _SMALL_DECODE_TOKENS
        if plan.groups or small or layer.logit_softcap:
            return attend_decode(
                q, plan, k_buf, v_buf, layer.num_kv_heads, layer.scaling, layer.logit_softcap
            )
        shape = (*plan.kv_idx.shape, k_buf.shape[1], q.shape[-1])
        flat = plan.kv_idx.flatten()  # a narrower pool widened (fp8: times its scales)
        kk = from_rows(k_buf.index_select(0, flat), q.dtype).view(shape).transpose(1, 2)
        vv = from_rows(v_buf.index_select(0, flat), q.dtype).view(shape).transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q.unsqueeze(2),
            kk,
            vv,
            attn_mask=plan.mask,
            scale=layer.scaling,
            enable_gqa=layer.num_heads != layer.num_kv_heads,
        )
        return out.squeeze(2)  # (Bd, H, D)


def _decode_plan(g: _DecodeGroup, window: int, slot_map: torch.Tensor | None) -> DecodePlan:
    """The group's plan over each row's last `window` keys (0: all of them), through the
    window pool's `slot_map` when given."""
    if slot_map is None and (not window or max(g.seq_lens) <= window):
        return g.plan
    key = (window, slot_map is not None)
    if key not in g.windowed:
        window = window or g.table.shape[1]
        dev = g.table.device
        lens = torch.tensor(g.seq_lens, dtype=torch.int64, device=dev)
        start = (lens - window).clamp_(min=0)  # (Bd,) first key each row sees
        width = min(window, g.table.shape[1])
        pos = (start[:, None] + torch.arange(width, device=dev)[None, :]).clamp_(
            max=g.table.shape[1] - 1
        )
        table = g.table.gather(1, pos)  # (Bd, width) each row's window, left-aligned
        if slot_map is not None:
            table = slot_map[table]
        g.windowed[key] = build_decode_plan(table, (lens - start).tolist())
    return g.windowed[key]


def _translated(piece: _Piece, slot_map: torch.Tensor) -> _Piece:
    """The piece with its key slots read through the window pool."""
    if piece.kv_idx is None:
        return piece
    return _Piece(piece.q, slot_map.index_select(0, piece.kv_idx), piece.mask)


def _pieces_of(r: _ExtendReq, window: int, table: torch.Tensor) -> list[_Piece]:
    """The pieces one extend request attends in: one for full attention; for a window w,
    query blocks of w rows, each over the keys its rows can see."""
    p, e = r.prefix_len, r.q_len
    if not window or p + e <= window:
        if p == 0:
            return [_Piece(slice(r.q_start, r.q_start + e), None, None)]
        return [_Piece(slice(r.q_start, r.q_start + e), *_keys(table, r, 0, e, 0, window))]
    return [
        _Piece(slice(r.q_start + a, r.q_start + min(a + window, e)),
               *_keys(table, r, a, min(a + window, e), max(0, p + a - window + 1), window))
        for a in range(0, e, window)
    ]  # fmt: skip


def _keys(
    table: torch.Tensor, r: _ExtendReq, a: int, b: int, key_start: int, window: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Slots of keys key_start .. p+b-1 (Lk,) int64 and the (b-a, Lk) mask of new rows a..b-1
    (positions p+a .. p+b-1): causal, and within the window when there is one."""
    p = r.prefix_len
    dev = table.device
    kv_idx = table[r.row, key_start : p + b].to(torch.int64)
    q_pos = torch.arange(p + a, p + b, device=dev)[:, None]
    kv_pos = torch.arange(key_start, p + b, device=dev)[None, :]
    mask = kv_pos <= q_pos
    if window:
        mask &= kv_pos > q_pos - window
    return kv_idx, mask


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    layer: AttentionLayer,
) -> torch.Tensor:
    """One request: q (Lq, H, D), k/v (Lk, Hkv, D), mask (Lq, Lk) or causal -> (Lq, H, D)."""
    qh, kh, vh = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # (heads, L, D)
    if layer.logit_softcap:
        return _attend_capped(qh, kh, vh, mask, layer).transpose(0, 1)
    out = F.scaled_dot_product_attention(
        qh.unsqueeze(0),
        kh.unsqueeze(0),
        vh.unsqueeze(0),
        attn_mask=mask,
        is_causal=mask is None,
        scale=layer.scaling,
        enable_gqa=layer.num_heads != layer.num_kv_heads,
    )
    return out.squeeze(0).transpose(0, 1)


def _attend_capped(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    layer: AttentionLayer,
) -> torch.Tensor:
    """Soft-capped attention, explicit: q (H, Lq, D), k/v (Hkv, Lk, D) -> (H, Lq, D)."""
    h, lq, d = q.shape
    hkv, lk = k.shape[0], k.shape[1]
    qg = q.reshape(hkv, h // hkv * lq, d)  # a KV head's query heads as one batch of rows
    scores = cap_scores((torch.matmul(qg, k.transpose(1, 2)) * layer.scaling).float(),
                        layer.logit_softcap).view(hkv, h // hkv, lq, lk)  # fmt: skip
    if mask is None:
        mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril(lk - lq)
    probs = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1).to(v.dtype)
    out = torch.matmul(probs.view(hkv, h // hkv * lq, lk), v)  # (Hkv, g*Lq, D)
    return out.view(h, lq, d)
