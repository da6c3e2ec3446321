"""The flashinfer backend against torch_native on random bf16 q/k/v over a scattered pool."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benchmarks.fixtures.synthetic import SyntheticPools
from radixrt.model.attention.base import AttentionLayer
from radixrt.model.attention.torch_native import TorchNativeAttnBackend

pytestmark = pytest.mark.gpu

# (num_heads, num_kv_heads, head_dim): Llama-3-8B's layout and SmolLM2's.
GEOMETRIES = [(32, 8, 128), (9, 3, 64)]
BATCHES = {
    "mixed": ([0, 300, 1, 0, 1200, 17], [257, 1, 1, 1, 64, 1]),  # prefills, decodes, extends
    "decode": ([511, 2, 1500, 40, 7], [1, 1, 1, 1, 1]),
    "prefill": ([0, 0], [1000, 3]),
}


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


@pytest.mark.parametrize("page_size", [1, 16], ids=["page1", "page16"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=["llama8b", "smollm2"])
@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_flashinfer_matches_torch_native(
    geometry: tuple[int, int, int], batch: str, page_size: int
) -> None:
    pytest.importorskip("flashinfer")
    from radixrt.model.attention.flashinfer_backend import FlashInferAttnBackend

    torch.manual_seed(0)
    h, hkv, d = geometry
    layer = AttentionLayer(layer_id=1, num_heads=h, num_kv_heads=hkv, head_dim=d, scaling=d**-0.5)
    pools = SyntheticPools(
        num_layers=2,
        num_kv_heads=hkv,
        head_dim=d,
        capacity=8192,
        max_reqs=16,
        max_context_len=4096,
        dtype=torch.bfloat16,
        device="cuda",
        seed=1,
        page_size=page_size,
    )
    fi = FlashInferAttnBackend("cuda", num_heads=h, num_kv_heads=hkv, head_dim=d)
    native = TorchNativeAttnBackend("cuda")
    fb = pools.make_batch(*BATCHES[batch], fi)
    t = fb.num_tokens
    q = torch.randn(t, h * d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(t, hkv * d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(t, hkv * d, device="cuda", dtype=torch.bfloat16)

    native.init_forward_metadata(fb)
    want = native.forward(q, k, v, layer, fb)
    fi.init_forward_metadata(fb)
    got = fi.forward(q, k, v, layer, fb)
    got_again = fi.forward(q, k, v, layer, fb)  # a second layer reuses the same plan

    assert got.shape == want.shape == (t, h * d) and got.dtype == torch.bfloat16
    assert _rel_err(got, want) < 1e-2
    assert torch.equal(got, got_again)


@pytest.mark.parametrize("page_size", [1, 16], ids=["page1", "page16"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=["llama8b", "smollm2"])
def test_graph_decode_wrapper_matches_torch_native(
    geometry: tuple[int, int, int], page_size: int
) -> None:
    """One attention layer captured at batch size 8 (every row on the padding slot), then
    replayed for real decode batches of 5, 8 and 1 rows over long, scattered contexts."""
    pytest.importorskip("flashinfer")
    from radixrt.model.attention.flashinfer_backend import FlashInferAttnBackend

    torch.manual_seed(0)
    h, hkv, d = geometry
    bs = 8
    layer = AttentionLayer(layer_id=0, num_heads=h, num_kv_heads=hkv, head_dim=d, scaling=d**-0.5)
    pools = SyntheticPools(
        num_layers=1,
        num_kv_heads=hkv,
        head_dim=d,
        capacity=16384,
        max_reqs=bs,
        max_context_len=2048,
        dtype=torch.bfloat16,
        device="cuda",
        seed=2,
        page_size=page_size,
    )
    fi = FlashInferAttnBackend("cuda", num_heads=h, num_kv_heads=hkv, head_dim=d)
    native = TorchNativeAttnBackend("cuda")
    fi.init_cuda_graph_state(max_bs=bs, max_num_indices=bs * 2048)
    # Static inputs of the captured call: q (bs, H*D), k and v (bs, Hkv*D), out_loc (bs,).
    q_s = torch.zeros(bs, h * d, device="cuda", dtype=torch.bfloat16)
    k_s = torch.zeros(bs, hkv * d, device="cuda", dtype=torch.bfloat16)
    v_s = torch.zeros_like(k_s)
    out_loc_s = torch.zeros(bs, dtype=torch.int64, device="cuda")  # padding slot 0
    capture_fb = dataclasses.replace(pools.make_batch([1] * bs, [1] * bs, fi), out_loc=out_loc_s)
    fi.init_forward_metadata_capture(capture_fb)
    fi.forward(q_s, k_s, v_s, layer, capture_fb)  # warm-up outside the graph
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_s = fi.forward(q_s, k_s, v_s, layer, capture_fb)

    for prefixes in ([511, 2, 1500, 40, 7], [3, 900, 17, 64, 1, 1023, 250, 5], [1999]):
        pools.reset()
        b = len(prefixes)
        fb = pools.make_batch(prefixes, [1] * b, fi)
        q = torch.randn(b, h * d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, hkv * d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, hkv * d, device="cuda", dtype=torch.bfloat16)
        for static, real in ((q_s, q), (k_s, k), (v_s, v), (out_loc_s, fb.out_loc)):
            static.zero_()
            static[:b] = real
        fi.init_forward_metadata_replay(fb, bs)
        graph.replay()
        got = out_s[:b].clone()
        native.init_forward_metadata(fb)
        want = native.forward(q, k, v, layer, fb)  # stores the same k/v again
        assert _rel_err(got, want) < 1e-2, (prefixes, _rel_err(got, want))
