"""float32 CPU attention on radixrt's C kernels (csrc/cpu): a decode batch makes one call per
layer (`rt_decode_attention_f32`, which also stores each request's new K/V; with bfloat16
products, `rt_decode_attention_bf16_kvbf16`, wherever the extend kernel has them); an extend makes
one causal flash-style call per request over its prefix and new tokens in the pool
(`rt_extend_attention_f32`; over a bfloat16 pool on the amx and avx512bf16 variants,
bfloat16 products on AMX tiles or VDPBF16PS where `kernels.bf16_extend_takes`). Decode rows
of a mixed batch, and what the runner's kernel plan (cpu/guard.py) leaves to torch
(`decode_kernel`, `extend_kernel`), run the torch_native code this backend extends.

A sliding-window layer's decode reads a `KeyView`: per request the slots of its last `window`
keys, left-aligned in a table built once per pass (and per kind of layer), read through the
window pool's slot map when the layer's K/V live there; the decode kernel then runs unchanged
over that table. Its extends pass the window to the extend kernel, with the slots from the
first key any of the request's rows sees.

A batch may hold several decode rows of one request (forward_batch.split_short_extends splits a
verified draft into decode rows), in a decode pass or a mixed one: the kernels store every
row's K/V before any row attends, so those rows, their seq_lens one apart, run on the decode
kernel (and the fused layer) unchanged."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixrt.cache.kv_layout import head_dim_of
from radixrt.core.forward_batch import ForwardBatch, ForwardMode
from radixrt.model.attention.base import AttentionLayer
from radixrt.model.attention.torch_native import TorchNativeAttnBackend
from radixrt.model.cpu import kernels as ck

# (window, read through the window pool): the kind of a layer's key view; (0, False) reads
# req_to_token itself.
ViewKey = tuple[int, bool]


@dataclass(frozen=True, slots=True)
class KeyView:
    """What a decode kernel reads for one kind of layer: request i attends over
    table[rows[i], :seq_lens[i]] and stores its new K/V at out_loc[i] (None: stored already)."""

    table: torch.Tensor  # (R, L) int32, rows `table.stride(0)` apart
    rows: torch.Tensor  # (B,) int64
    seq_lens: torch.Tensor  # (B,) int64
    out_loc: torch.Tensor | None  # (B,) int64


@dataclass(frozen=True, slots=True)
class Segments:
    """An extend pass's attention segments for the fused layer (csrc/cpu/layer_f32.c):
    `ext` (n, 4) int64 per extend request (first row in the batch, new rows, prefix, pool
    row); `dec` the decode rows' rows in the batch, pool rows and seq_lens, `decode_rows`
    each, concatenated (int64)."""

    ext: torch.Tensor
    dec: torch.Tensor
    decode_rows: int


class CpuAttnBackend(TorchNativeAttnBackend):
    """Needs the kernel library (`ck.available()`) and a KV pool on the CPU in float32,
    bfloat16 or fp8 (kernels per KV dtype; a bfloat16 pool extends with bfloat16 products on
    the amx and avx512bf16 variants, kernels.extend_attention)."""

    supports: frozenset[str] = frozenset({"sliding_window"})  # soft caps: torch_native
    reads_window_pool = True

    def __init__(
        self,
        device: torch.device | str = "cpu",
        *,
        decode_kernel: bool = True,
        extend_kernel: bool = True,
        **layout: object,
    ) -> None:
        super().__init__(device, **layout)  # type: ignore[arg-type]
        if torch.device(device).type != "cpu" or not ck.available():
            raise ValueError(
                f"the 'cpu' attention backend needs the CPU and radixrt's C kernels "
                f"(device {device}; kernels: {ck.build_error() or 'ok'})"
            )
        self._decode_kernel = decode_kernel
        # Its decode kernel is the fused layer's attention: fusing needs it on.
        self.fuses_cpu_decode_layers = decode_kernel
        self.decode_batch = False  # this pass is a pure decode batch on the kernel (per pass)
        self._use_extend_kernel = extend_kernel and ck.has_extend_attention()
        # Per extend request of the pass: (first row in the batch, new tokens, prefix, pool row).
        self._kernel_extends: list[tuple[int, int, int, int]] = []
        # The decode rows of a mixed pass on the decode kernel: their rows in the batch, then
        # their pool rows and seq_lens, each (Bd,) int64; None: no such rows.
        self._kernel_decode: tuple[torch.Tensor, ...] | None = None
        # Per pass, built on first use: key views of the decode rows, and per extend request
        # its (slots from its first visible key, the prefix before them), per kind of layer.
        self._fb: ForwardBatch | None = None
        self._views: dict[ViewKey, KeyView] = {}
        self._extend_slots: dict[ViewKey, list[tuple[torch.Tensor, int]]] = {}
        self._segments: Segments | None = None
        # Whether decode rows attend with bfloat16 products, per (pool dtype, head dim,
        # window): decided once (`_bf16_products`), the library's variant fixed for the run.
        self._bf16: dict[tuple[torch.dtype, int, int], bool] = {}

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        self._fb, self._views, self._extend_slots, self._segments = fb, {}, {}, None
        self.decode_batch = fb.mode is ForwardMode.DECODE and self._decode_kernel
        if self.decode_batch:
            return
        if fb.mode is ForwardMode.DECODE or not self._use_extend_kernel:
            super().init_forward_metadata(fb)
            return
        rows, starts = fb.req_pool_indices.tolist(), fb.extend_start_loc.tolist()
        decode_ids: list[int] = []
        self._kernel_extends = []
        self._extends, self._pieces = [], {}
        for i, (p, e) in enumerate(zip(fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu)):
            if fb.is_decode_row(i):
                decode_ids.append(i)
            else:
                self._kernel_extends.append((starts[i], e, p, rows[i]))
        self._decode = self._kernel_decode = None
        if decode_ids and self._decode_kernel:
            idx = torch.tensor(decode_ids, dtype=torch.int64)
            tok = fb.extend_start_loc[idx].long()
            self._kernel_decode = (tok, fb.req_pool_indices[idx], fb.seq_lens[idx])
        elif decode_ids:
            self._decode = self._build_decode_group(fb, decode_ids)

    def extend_segments(self) -> Segments | None:
        """This extend pass's segments as the fused layer's extend call reads them
        (cpu/fused_layer.py), built on first use; None where its attention does not run
        wholly on the kernels (a pure decode pass, the extend kernel off, or decode rows left
        to torch)."""
        if self.decode_batch or not self._use_extend_kernel or self._decode is not None:
            return None
        if self._segments is None:
            ext = torch.tensor(self._kernel_extends, dtype=torch.int64).reshape(-1, 4)
            dec = torch.empty(0, dtype=torch.int64)
            if self._kernel_decode is not None:
                dec = torch.cat([t.to(torch.int64) for t in self._kernel_decode])
            self._segments = Segments(ext, dec, dec.numel() // 3)
        return self._segments

    def decode_view(self, layer: AttentionLayer, fb: ForwardBatch) -> KeyView:
        """The key view of a pure decode pass for `layer` (also the fused layer's)."""
        slot_map = fb.token_to_kv_pool.slot_map(layer.layer_id)
        key = (layer.sliding_window, slot_map is not None)
        if key not in self._views:
            table = fb.req_to_token_pool.req_to_token
            self._views[key] = _key_view(
                table, fb.req_pool_indices, fb.seq_lens, fb.out_loc, layer.sliding_window,
                slot_map,
            )  # fmt: skip
        return self._views[key]

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        if not self.decode_batch:
            return super().forward(q, k, v, layer, fb)
        k_buf, v_buf = fb.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        if k.stride() != v.stride():  # e.g. k rotated by torch, v a view of qkv: one layout
            k, v = k.contiguous(), v.contiguous()
        view = self.decode_view(layer, fb)
        return ck.decode_attention(q, k, v, k_buf, v_buf, view.out_loc, view.table, view.rows,
                                   view.seq_lens, layer.scaling,
                                   self._bf16_products(k_buf, layer.sliding_window))  # fmt: skip

    def _bf16_products(self, k_buf: torch.Tensor, window: int) -> bool:
        """Whether decode rows attend with bfloat16 products here: where the extend kernel
        does (kernels.bf16_extend_takes), so both passes of a request share one arithmetic."""
        key = (k_buf.dtype, head_dim_of(k_buf), window)
        if key not in self._bf16:
            self._bf16[key] = ck.bf16_extend_takes(*key)
        return self._bf16[key]

    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: AttentionLayer,
        fb: ForwardBatch,
    ) -> torch.Tensor:
        if not self._use_extend_kernel:
            return super().forward_extend(q, k, v, layer, fb)
        out = torch.empty(q.shape, dtype=q.dtype)  # (T, H, D)
        k_buf, v_buf = fb.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        slot_map = fb.token_to_kv_pool.slot_map(layer.layer_id)
        window = layer.sliding_window
        slots = self._slots_of_extends(window, slot_map, fb)
        for (start, e, _, _), (keys, prefix) in zip(self._kernel_extends, slots):
            sl = slice(start, start + e)
            ck.extend_attention(q[sl], k_buf, v_buf, keys, prefix, layer.scaling, out[sl], window)
        if self._kernel_decode is not None:  # their K/V are in the pool (forward stored them)
            tok, pool_rows, seq_lens = self._kernel_decode
            bd = tok.numel()
            view = self._mixed_view(window, slot_map, fb)
            att = ck.decode_attention(
                q[tok].reshape(bd, -1), None, None, k_buf, v_buf, None, view.table, view.rows,
                view.seq_lens, layer.scaling, self._bf16_products(k_buf, window),
            )  # fmt: skip
            out[tok] = att.view(bd, *q.shape[1:])
        self._attend_decode_rows(q, out, k_buf, v_buf, layer, slot_map)
        return out

    def _slots_of_extends(
        self, window: int, slot_map: torch.Tensor | None, fb: ForwardBatch
    ) -> list[tuple[torch.Tensor, int]]:
        """Per extend request: (int32 slots of its keys from the first one any of its rows
        sees, how many of them come before its new rows)."""
        key = (window, slot_map is not None)
        if key not in self._extend_slots:
            table = fb.req_to_token_pool.req_to_token
            out = []
            for _, e, p, row in self._kernel_extends:
                first = max(p - window + 1, 0) if window else 0
                keys = table[row, first : p + e]
                if slot_map is not None:
                    keys = slot_map.index_select(0, keys.to(torch.int64)).to(torch.int32)
                out.append((keys.contiguous(), p - first))
            self._extend_slots[key] = out
        return self._extend_slots[key]

    def _mixed_view(self, window: int, slot_map: torch.Tensor | None, fb: ForwardBatch) -> KeyView:
        """The key view of a mixed pass's decode rows (their new K/V stored already)."""
        key = (-window - 1, slot_map is not None)  # apart from the pure-decode views
        if key not in self._views:
            assert self._kernel_decode is not None
            _, pool_rows, seq_lens = self._kernel_decode
            table = fb.req_to_token_pool.req_to_token
            self._views[key] = _key_view(table, pool_rows, seq_lens, None, window, slot_map)
        return self._views[key]


def _key_view(
    table: torch.Tensor,
    rows: torch.Tensor,
    seq_lens: torch.Tensor,
    out_loc: torch.Tensor | None,
    window: int,
    slot_map: torch.Tensor | None,
) -> KeyView:
    """Requests `rows` of req_to_token `table` over their last `window` keys (0: all), slots
    read through `slot_map` (None: as they are)."""
    lens = seq_lens.to(torch.int64)
    longest = int(lens.max())
    if slot_map is None and (not window or longest <= window):
        return KeyView(table, rows, seq_lens, out_loc)
    width = min(window, longest) if window else longest
    start = (lens - width).clamp_(min=0)  # (B,) first key each request reads
    pos = (start[:, None] + torch.arange(width)[None, :]).clamp_(max=table.shape[1] - 1)
    compact = table[rows.to(torch.int64)[:, None], pos]  # (B, width) int32, left-aligned
    if slot_map is not None:
        compact = slot_map[compact.to(torch.int64)].to(torch.int32)
        out_loc = None if out_loc is None else slot_map.index_select(0, out_loc)
    own = torch.arange(rows.numel(), dtype=torch.int64)
    return KeyView(compact.contiguous(), own, lens - start, out_loc)
