"""float32 CPU attention on radixrt's C kernels (csrc/cpu): a decode batch makes one call per
layer (`rt_decode_attention_f32`, which also stores each request's new K/V); an extend makes
one causal flash-style call per request over its prefix and new tokens in the pool
(`rt_extend_attention_f32`). Decode rows of a mixed batch, and what the runner's kernel plan
(cpu/guard.py) leaves to torch (`decode_kernel`, `extend_kernel`), run the torch_native code
this backend extends."""

from __future__ import annotations

import torch

from radixrt.attention.base import AttentionLayer
from radixrt.attention.torch_native import TorchNativeAttnBackend
from radixrt.cpu import kernels as ck
from radixrt.forward_batch import ForwardBatch, ForwardMode


class CpuAttnBackend(TorchNativeAttnBackend):
    """Needs a float32 KV pool on the CPU and the kernel library (`ck.available()`)."""

    supports: frozenset[str] = frozenset()  # the kernels attend over every key, uncapped
    reads_window_pool = False  # the kernels index every layer's buffers by slot

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

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        self.decode_batch = fb.mode is ForwardMode.DECODE and self._decode_kernel
        if self.decode_batch:
            return
        if fb.mode is ForwardMode.DECODE or not self._use_extend_kernel:
            super().init_forward_metadata(fb)
            return
        rows, starts = fb.req_pool_indices.tolist(), fb.extend_start_loc.tolist()
        decode_ids: list[int] = []
        self._kernel_extends = []
        self._extends = []
        for i, (p, e) in enumerate(zip(fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu)):
            if e == 1 and p > 0:
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
        return ck.decode_attention(
            q,
            k,
            v,
            k_buf,
            v_buf,
            fb.out_loc,
            fb.req_to_token_pool.req_to_token,
            fb.req_pool_indices,
            fb.seq_lens,
            layer.scaling,
        )

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
        table = fb.req_to_token_pool.req_to_token
        for start, e, p, row in self._kernel_extends:
            sl = slice(start, start + e)
            ck.extend_attention(q[sl], k_buf, v_buf, table[row], p, layer.scaling, out[sl])
        if self._kernel_decode is not None:  # their K/V are in the pool (forward stored them)
            tok, pool_rows, seq_lens = self._kernel_decode
            bd = tok.numel()
            att = ck.decode_attention(q[tok].reshape(bd, -1), None, None, k_buf, v_buf, None,
                                      table, pool_rows, seq_lens, layer.scaling)  # fmt: skip
            out[tok] = att.view(bd, *q.shape[1:])
        self._attend_decode_rows(q, out, k_buf, v_buf, layer)
        return out
