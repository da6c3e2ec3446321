"""The flashinfer backend's glue on CPU, over a stand-in for FlashInfer's API (fake_flashinfer):
eager extend/decode plans and CUDA-graph capture/replay with padded rows, at page sizes 1
and 4, against torch_native. The real kernels run in the `gpu` tests."""

from __future__ import annotations

import dataclasses

import fake_flashinfer
import pytest
import torch

from radixrt.attention.base import AttentionLayer
from radixrt.attention.flashinfer_backend import AttentionGeometry, FlashInferAttnBackend
from radixrt.attention.torch_native import TorchNativeAttnBackend
from radixrt.testing.synthetic import SyntheticPools

H, HKV, D = 4, 2, 16
LAYER = AttentionLayer(layer_id=0, num_heads=H, num_kv_heads=HKV, head_dim=D, scaling=D**-0.5)
PAGE_SIZES = pytest.mark.parametrize("page_size", [1, 4], ids=["page1", "page4"])


def _backend() -> FlashInferAttnBackend:
    backend = object.__new__(FlashInferAttnBackend)
    geometry = AttentionGeometry(H, HKV, D, D**-0.5)
    backend._setup(fake_flashinfer, torch.device("cpu"), geometry, "fa2", 1024)
    return backend


def _pools(page_size: int, seed: int = 0) -> SyntheticPools:
    return SyntheticPools(num_layers=1, num_kv_heads=HKV, head_dim=D, capacity=512, max_reqs=8,
                          max_context_len=128, dtype=torch.bfloat16, device="cpu", seed=seed,
                          page_size=page_size)  # fmt: skip


def _qkv(t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.randn(t, H * D, dtype=torch.bfloat16),
            torch.randn(t, HKV * D, dtype=torch.bfloat16),
            torch.randn(t, HKV * D, dtype=torch.bfloat16))  # fmt: skip


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


@PAGE_SIZES
@pytest.mark.parametrize(
    "lens", [([0, 7, 12, 3, 0], [9, 1, 5, 1, 1]), ([4, 17, 1], [1, 1, 1])], ids=["mixed", "decode"]
)
def test_eager_plans_match_torch_native(page_size: int, lens) -> None:
    torch.manual_seed(0)
    fake_flashinfer.calls.clear()
    pools, fi, native = _pools(page_size), _backend(), TorchNativeAttnBackend("cpu")
    fb = pools.make_batch(*lens, fi)
    q, k, v = _qkv(fb.num_tokens)
    native.init_forward_metadata(fb)
    want = native.forward(q, k, v, LAYER, fb)
    fi.init_forward_metadata(fb)
    got = fi.forward(q, k, v, LAYER, fb)
    kind = "decode" if lens[1] == [1, 1, 1] else "prefill"
    assert fake_flashinfer.calls == [(kind, page_size)]
    _close(got, want)


@PAGE_SIZES
def test_graph_capture_and_padded_replays_match_torch_native(page_size: int) -> None:
    """Capture at batch size 8 (every row on the padding page), replay for 5, 8 and 1 real
    rows: the padded rows' page table must be valid and the real rows' output right."""
    torch.manual_seed(0)
    bs = 8
    pools, fi, native = _pools(page_size, seed=1), _backend(), TorchNativeAttnBackend("cpu")
    fi.init_cuda_graph_state(max_bs=bs, max_num_indices=bs * 128)
    capture = dataclasses.replace(pools.make_batch([1] * bs, [1] * bs, fi),
                                  out_loc=torch.zeros(bs, dtype=torch.int64))  # fmt: skip
    fi.init_forward_metadata_capture(capture)
    fi.forward(*_qkv(bs), LAYER, capture)
    for prefixes in ([11, 2, 50, 40, 7], [3, 9, 17, 64, 1, 23, 25, 5], [99]):
        pools.reset()
        b = len(prefixes)
        fb = pools.make_batch(prefixes, [1] * b, fi)
        q, k, v = _qkv(b)
        native.init_forward_metadata(fb)
        want = native.forward(q, k, v, LAYER, fb)
        fi.init_forward_metadata_replay(fb, bs)
        pad = bs - b  # the graph's static inputs: real rows first, zeros after
        padded = [torch.cat([x, x.new_zeros(pad, x.shape[1])]) for x in (q, k, v)]
        out_loc = torch.cat([fb.out_loc, torch.zeros(pad, dtype=torch.int64)])
        got = fi.forward(*padded, LAYER, dataclasses.replace(fb, out_loc=out_loc))
        _close(got[:b], want)
        assert torch.equal(got[b:], torch.zeros_like(got[b:]))  # padding reads zero K/V
    with pytest.raises(ValueError, match="decode"):
        fi.init_forward_metadata_replay(pools.make_batch([0], [3], fi), bs)
