"""The flashinfer backend's glue on CPU, over a stand-in for FlashInfer's API (fake_flashinfer):
eager extend/decode plans and CUDA-graph capture/replay with padded rows, at page sizes 1
and 4, against torch_native; models with two kinds of layers (sliding and full, soft-capped or
not) planned once per kind, each layer run with its kind's plan over its kind's page table.
The real kernels run in the `gpu` tests."""

from __future__ import annotations

import dataclasses

import fake_flashinfer
import pytest
import torch

from benchmarks.fixtures.synthetic import SyntheticPools
from radixrt.model.attention.base import AttentionLayer
from radixrt.model.attention.flashinfer_backend import (
    AttentionGeometry,
    FlashInferAttnBackend,
    LayerKind,
)
from radixrt.model.attention.torch_native import TorchNativeAttnBackend

H, HKV, D = 4, 2, 16
LAYER = AttentionLayer(layer_id=0, num_heads=H, num_kv_heads=HKV, head_dim=D, scaling=D**-0.5)
PAGE_SIZES = pytest.mark.parametrize("page_size", [1, 4], ids=["page1", "page4"])


def _backend() -> FlashInferAttnBackend:
    backend = object.__new__(FlashInferAttnBackend)
    geometry = AttentionGeometry(H, HKV, D, D**-0.5)
    backend._setup(fake_flashinfer, torch.device("cpu"), geometry, "fa2", 1024)
    return backend


def _pools(page_size: int, seed: int = 0) -> SyntheticPools:
    return SyntheticPools(num_layers=3, num_kv_heads=HKV, head_dim=D, capacity=512, max_reqs=8,
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
    assert fake_flashinfer.calls == [
        fake_flashinfer.Run(kind, page_size, -1, 0.0, tuple(fb.seq_lens_cpu))
    ]
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


# Two kinds of layers, alternating as in Gemma 3 (sliding, full, sliding) or, soft-capped, as
# in Gemma 2. The window of 8 cuts the long rows' tables (whole pages before the window).
WINDOW = 8
MODELS = {
    "gemma3": [LayerKind(WINDOW, 0.0), LayerKind(0, 0.0)],
    "gemma2": [LayerKind(WINDOW, 3.0), LayerKind(0, 3.0)],
}
BATCHES = {  # (prefix_lens, extend_lens)
    "mixed": ([0, 7, 12, 3, 0, 40], [9, 1, 5, 1, 1, 37]),
    "decode": ([4, 17, 1, 70, 30], [1, 1, 1, 1, 1]),
}


def _layers(model: str) -> list[AttentionLayer]:
    a, b = MODELS[model]
    return [dataclasses.replace(LAYER, layer_id=i, sliding_window=kind.sliding_window,
                                logit_softcap=kind.logit_softcap)
            for i, kind in enumerate([a, b, a])]  # fmt: skip


def _kv_lens(kind: LayerKind, prefix_lens: list[int], seq_lens: list[int], p: int) -> tuple:
    """Keys in each request's table for `kind`: a window leaves out the pages before it."""
    w = kind.sliding_window
    return tuple(n - (max(0, q - w + 1) // p * p if w else 0)
                 for q, n in zip(prefix_lens, seq_lens, strict=True))  # fmt: skip


@PAGE_SIZES
@pytest.mark.parametrize("model", sorted(MODELS))
def test_each_layer_kind_runs_with_its_own_plan(page_size: int, model: str) -> None:
    """A mixed batch then a decode batch through three layers of two kinds: one wrapper per
    kind, planned with its window_left and soft cap over its own page table; outputs equal
    torch_native's layer by layer."""
    torch.manual_seed(0)
    layers = _layers(model)
    pools, fi, native = _pools(page_size), _backend(), TorchNativeAttnBackend("cpu")
    for name in ("mixed", "decode"):
        pools.reset()
        fake_flashinfer.calls.clear()
        fb = pools.make_batch(*BATCHES[name], fi)
        fi.init_forward_metadata(fb)
        native.init_forward_metadata(fb)
        if name == "decode":  # kinds are known from the first batch: both planned up front
            assert set(fi._planned) == set(MODELS[model])
        for layer in layers:
            q, k, v = _qkv(fb.num_tokens)
            want = native.forward(q, k, v, layer, fb)
            _close(fi.forward(q, k, v, layer, fb), want)
        wrapper_kind = "decode" if name == "decode" else "prefill"
        expected = []
        for layer in layers:
            kind = LayerKind.of(layer)
            opts = kind.plan_options()
            kv_lens = _kv_lens(kind, fb.extend_prefix_lens_cpu, fb.seq_lens_cpu, page_size)
            expected.append(fake_flashinfer.Run(wrapper_kind, page_size, opts["window_left"],
                                                opts["logits_soft_cap"], kv_lens))  # fmt: skip
        assert fake_flashinfer.calls == expected
        assert max(expected[0].kv_lens) < max(fb.seq_lens_cpu)  # the window cut some table
    assert fi.kinds == MODELS[model]
    assert list(fi._prefill) == list(fi._decode) == MODELS[model]


@PAGE_SIZES
def test_graph_replays_plan_every_kind(page_size: int) -> None:
    """Capture at batch size 8 with a sliding and a full layer (kinds learnt in the warm-up
    run), replay for 5, 8 and 1 real rows: each kind's graph wrapper reads its own buffers
    (the window's hold at most (w - 1) // P + 2 pages a row) and every real row is right."""
    torch.manual_seed(0)
    bs = 8
    layers = _layers("gemma2")[:2]
    pools, fi, native = _pools(page_size, seed=1), _backend(), TorchNativeAttnBackend("cpu")
    fi.init_cuda_graph_state(max_bs=bs, max_num_indices=bs * 128)
    capture = dataclasses.replace(pools.make_batch([1] * bs, [1] * bs, fi),
                                  out_loc=torch.zeros(bs, dtype=torch.int64))  # fmt: skip
    fi.init_forward_metadata_capture(capture)
    for layer in layers:  # the warm-up run
        fi.forward(*_qkv(bs), layer, capture)
    assert fi._graph_tables[WINDOW].indices.numel() == bs * ((WINDOW - 1) // page_size + 2)
    assert len(fi._graph_wrappers) == 2
    for prefixes in ([11, 2, 50, 40, 7], [3, 9, 17, 64, 1, 23, 25, 5], [99]):
        pools.reset()
        b = len(prefixes)
        fb = pools.make_batch(prefixes, [1] * b, fi)
        fi.init_forward_metadata_replay(fb, bs)
        native.init_forward_metadata(fb)
        pad = bs - b
        out_loc = torch.cat([fb.out_loc, torch.zeros(pad, dtype=torch.int64)])
        for layer in layers:
            q, k, v = _qkv(b)
            want = native.forward(q, k, v, layer, fb)
            padded = [torch.cat([x, x.new_zeros(pad, x.shape[1])]) for x in (q, k, v)]
            got = fi.forward(*padded, layer, dataclasses.replace(fb, out_loc=out_loc))
            _close(got[:b], want)
            assert torch.equal(got[b:], torch.zeros_like(got[b:]))
