"""The triton backend against torch_native on CUDA in bfloat16: random q/k/v over a scattered
pool, eager and replayed through a CUDA graph."""

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


def _setup(geometry: tuple[int, int, int], capacity: int, max_reqs: int, seed: int) -> tuple:
    pytest.importorskip("triton")
    from radixrt.model.attention.triton_backend import TritonAttnBackend

    torch.manual_seed(0)
    h, hkv, d = geometry
    layer = AttentionLayer(layer_id=0, num_heads=h, num_kv_heads=hkv, head_dim=d, scaling=d**-0.5)
    pools = SyntheticPools(
        num_layers=1,
        num_kv_heads=hkv,
        head_dim=d,
        capacity=capacity,
        max_reqs=max_reqs,
        max_context_len=4096,
        dtype=torch.bfloat16,
        device="cuda",
        seed=seed,
    )
    tri = TritonAttnBackend("cuda", num_heads=h, num_kv_heads=hkv, head_dim=d)
    return layer, pools, tri, TorchNativeAttnBackend("cuda")


def _qkv(t: int, geometry: tuple[int, int, int]) -> list[torch.Tensor]:
    h, hkv, d = geometry
    return [torch.randn(t, n * d, device="cuda", dtype=torch.bfloat16) for n in (h, hkv, hkv)]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=["llama8b", "smollm2"])
@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_triton_matches_torch_native_bf16(geometry: tuple[int, int, int], batch: str) -> None:
    layer, pools, tri, native = _setup(geometry, 8192, 16, seed=1)
    fb = pools.make_batch(*BATCHES[batch], tri)
    q, k, v = _qkv(fb.num_tokens, geometry)
    native.init_forward_metadata(fb)
    want = native.forward(q, k, v, layer, fb)
    tri.init_forward_metadata(fb)
    got = tri.forward(q, k, v, layer, fb)
    again = tri.forward(q, k, v, layer, fb)  # a second layer reuses the same metadata
    assert got.shape == want.shape and got.dtype == torch.bfloat16
    assert _rel_err(got, want) < 1e-2
    assert torch.equal(got, again)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=["llama8b", "smollm2"])
def test_graph_decode_matches_torch_native(geometry: tuple[int, int, int]) -> None:
    """One layer captured at batch size 8 (every row on the padding slot), then replayed for
    decode batches of 5, 8 and 1 rows over long, scattered contexts."""
    bs = 8
    layer, pools, tri, native = _setup(geometry, 16384, bs, seed=2)
    h, hkv, d = geometry
    tri.init_cuda_graph_state(max_bs=bs, max_num_indices=bs * 4096)
    q_s, k_s, v_s = (torch.zeros_like(x) for x in _qkv(bs, geometry))  # static inputs
    out_loc_s = torch.zeros(bs, dtype=torch.int64, device="cuda")  # padding slot 0
    capture_fb = dataclasses.replace(pools.make_batch([1] * bs, [1] * bs, tri), out_loc=out_loc_s)
    tri.init_forward_metadata_capture(capture_fb)
    tri.forward(q_s, k_s, v_s, layer, capture_fb)  # compiles the kernels outside the graph
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_s = tri.forward(q_s, k_s, v_s, layer, capture_fb)

    for prefixes in ([511, 2, 1500, 40, 7], [3, 900, 17, 64, 1, 1023, 250, 5], [1999]):
        pools.reset()
        b = len(prefixes)
        fb = pools.make_batch(prefixes, [1] * b, tri)
        q, k, v = _qkv(b, geometry)
        for static, real in ((q_s, q), (k_s, k), (v_s, v), (out_loc_s, fb.out_loc)):
            static.zero_()
            static[:b] = real
        tri.init_forward_metadata_replay(fb, bs)
        graph.replay()
        got = out_s[:b].clone()
        native.init_forward_metadata(fb)
        want = native.forward(q, k, v, layer, fb)  # stores the same k/v again
        assert _rel_err(got, want) < 1e-2, (prefixes, _rel_err(got, want))
