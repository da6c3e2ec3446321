"""float32 CPU attention: decode batches run radixrt's C kernel (csrc/cpu/ops_f32.c), which
stores each request's new K/V and attends over its slots in one call per layer; extend and
mixed batches run the torch_native backend it extends."""

from __future__ import annotations

import torch

from radixrt.attention.base import AttentionLayer
from radixrt.attention.torch_native import TorchNativeAttnBackend
from radixrt.executor.forward_batch import ForwardBatch
from radixrt.kernels import cpu as ck


class CpuAttnBackend(TorchNativeAttnBackend):
    """Needs a float32 KV pool on the CPU and the kernel library (`ck.available()`)."""

    def __init__(self, device: torch.device | str = "cpu", **layout: object) -> None:
        super().__init__(device, **layout)  # type: ignore[arg-type]
        if torch.device(device).type != "cpu" or not ck.available():
            raise ValueError(
                f"the 'cpu' attention backend needs the CPU and radixrt's C kernels "
                f"(device {device}; kernels: {ck.build_error() or 'ok'})"
            )
        self.decode_batch = False  # this pass is a pure decode batch (set per pass)

    def init_forward_metadata(self, fb: ForwardBatch) -> None:
        self.decode_batch = fb.mode.value == "decode"
        if not self.decode_batch:
            super().init_forward_metadata(fb)

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
        return ck.decode_attention(
            q, k, v, k_buf, v_buf, fb.out_loc, fb.req_to_token_pool.req_to_token,
            fb.req_pool_indices, fb.seq_lens, layer.scaling,
        )
