"""Sliding windows and soft caps on CUDA: the triton and flashinfer backends against
torch_native in bfloat16 at Gemma 2's head layout, eager (mixed, decode and prefill batches
whose sequences run past the window) and through a CUDA graph of a model with a sliding and a
full layer, replayed for padded decode batches."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from benchmarks.fixtures.synthetic import SyntheticPools
from radixrt.model.attention.base import AttentionLayer
from radixrt.model.attention.torch_native import TorchNativeAttnBackend

pytestmark = pytest.mark.gpu

H, HKV, D = 16, 8, 256  # Gemma 2 9B's layout
LAYER = AttentionLayer(layer_id=0, num_heads=H, num_kv_heads=HKV, head_dim=D, scaling=D**-0.5)
WINDOW = 256
KINDS = {  # (sliding_window, logit_softcap); a cap of 2 bends random scores visibly
    "window": (WINDOW, 0.0),
    "window-cap": (WINDOW, 2.0),
    "cap": (0, 2.0),
}
BATCHES = {  # (prefix_lens, extend_lens)
    "mixed": ([0, 300, 1, 0, 1200, 17], [257, 1, 1, 1, 64, 1]),  # prefills, decodes, extends
    "decode": ([511, 2, 1500, 40, 7], [1, 1, 1, 1, 1]),
    "prefill": ([0, 0], [1000, 3]),
}
# (backend, page size): flashinfer also with pages, whose windowed tables drop whole pages.
BACKENDS = [("triton", 1), ("flashinfer", 1), ("flashinfer", 16)]


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def _backend(name: str) -> Any:
    """The named backend (with its CUDA-graph methods) for LAYER's head layout."""
    pytest.importorskip(name)
    if name == "triton":
        from radixrt.model.attention.triton_backend import TritonAttnBackend

        return TritonAttnBackend("cuda", num_heads=H, num_kv_heads=HKV, head_dim=D)
    from radixrt.model.attention.flashinfer_backend import FlashInferAttnBackend

    return FlashInferAttnBackend("cuda", num_heads=H, num_kv_heads=HKV, head_dim=D)


def _pools(page_size: int, capacity: int, max_reqs: int, seed: int) -> SyntheticPools:
    return SyntheticPools(num_layers=2, num_kv_heads=HKV, head_dim=D, capacity=capacity,
                          max_reqs=max_reqs, max_context_len=4096, dtype=torch.bfloat16,
                          device="cuda", seed=seed, page_size=page_size)  # fmt: skip


def _qkv(t: int) -> list[torch.Tensor]:
    return [torch.randn(t, n * D, device="cuda", dtype=torch.bfloat16) for n in (H, HKV, HKV)]


@pytest.mark.parametrize(("backend", "page_size"), BACKENDS, ids=lambda x: str(x))
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_window_and_cap_match_torch_native(
    backend: str, page_size: int, kind: str, batch: str
) -> None:
    torch.manual_seed(0)
    window, cap = KINDS[kind]
    layer = dataclasses.replace(LAYER, sliding_window=window, logit_softcap=cap)
    pools = _pools(page_size, 8192, 16, seed=1)
    attn, native = _backend(backend), TorchNativeAttnBackend("cuda")
    fb = pools.make_batch(*BATCHES[batch], attn)
    q, k, v = _qkv(fb.num_tokens)
    native.init_forward_metadata(fb)
    want = native.forward(q, k, v, layer, fb)
    attn.init_forward_metadata(fb)
    got = attn.forward(q, k, v, layer, fb)
    plain = attn.forward(q, k, v, LAYER, fb)  # the same batch without the layer's features
    assert _rel_err(got, want) < 1e-2, _rel_err(got, want)
    assert _rel_err(plain, want) > 5e-2  # the window or cap was applied, not ignored


@pytest.mark.parametrize(("backend", "page_size"), BACKENDS, ids=lambda x: str(x))
def test_graph_of_two_layer_kinds_matches_torch_native(backend: str, page_size: int) -> None:
    """A sliding and a full layer (both capped, as Gemma 2) captured at batch size 8, every
    row on the padding slot, then replayed for decode batches of 5, 8 and 1 rows over
    contexts longer than the window."""
    torch.manual_seed(0)
    bs = 8
    layers = [dataclasses.replace(LAYER, sliding_window=WINDOW, logit_softcap=2.0),
              dataclasses.replace(LAYER, layer_id=1, logit_softcap=2.0)]  # fmt: skip
    pools = _pools(page_size, 16384, bs, seed=2)
    attn, native = _backend(backend), TorchNativeAttnBackend("cuda")
    attn.init_cuda_graph_state(max_bs=bs, max_num_indices=bs * 4096)
    static = [[torch.zeros_like(x) for x in _qkv(bs)] for _ in layers]  # per layer: q, k, v
    out_loc_s = torch.zeros(bs, dtype=torch.int64, device="cuda")  # padding slot 0
    capture_fb = dataclasses.replace(pools.make_batch([1] * bs, [1] * bs, attn), out_loc=out_loc_s)
    attn.init_forward_metadata_capture(capture_fb)
    for layer, qkv in zip(layers, static, strict=True):  # warm-up: compiles, learns the kinds
        attn.forward(*qkv, layer, capture_fb)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [attn.forward(*qkv, layer, capture_fb) for layer, qkv in zip(layers, static)]

    for prefixes in ([511, 2, 1500, 40, 7], [3, 900, 17, 64, 1, 1023, 250, 5], [1999]):
        pools.reset()
        b = len(prefixes)
        fb = pools.make_batch(prefixes, [1] * b, attn)
        real = [_qkv(b) for _ in layers]
        out_loc_s.zero_()
        out_loc_s[:b] = fb.out_loc
        for s_qkv, r_qkv in zip(static, real, strict=True):
            for s, r in zip(s_qkv, r_qkv, strict=True):
                s.zero_()
                s[:b] = r
        attn.init_forward_metadata_replay(fb, bs)
        graph.replay()
        native.init_forward_metadata(fb)
        for layer, out, (q, k, v) in zip(layers, outs, real, strict=True):
            want = native.forward(q, k, v, layer, fb)  # stores the same k/v again
            err = _rel_err(out[:b], want)
            assert err < 1e-2, (layer.sliding_window, prefixes, err)
