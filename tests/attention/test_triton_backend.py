"""The triton backend against torch_native on random inputs, run by Triton's interpreter on CPU
(or compiled on CUDA when present): mixed batches with cached prefixes, GQA, several head dims,
scattered slots, shared prefixes, sliding windows and soft caps; and greedy tokens through the
Engine equal torch_native's.

The interpreter's tl.dot is wrong for bfloat16, so CPU runs cover float32 and float16 only;
test_triton_gpu.py covers bfloat16 on CUDA.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

# Without CUDA tests/conftest.py sets TRITON_INTERPRET before any module defines a kernel.
pytest.importorskip("triton")

from conftest import assert_pool_whole  # noqa: E402

from benchmarks.fixtures.synthetic import SyntheticPools  # noqa: E402
from radixrt.model.attention.base import AttentionLayer  # noqa: E402
from radixrt.model.attention.torch_native import TorchNativeAttnBackend  # noqa: E402
from radixrt.model.attention.triton_backend import TritonAttnBackend  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # masked rows' 0/0 in numpy

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# (num_heads, num_kv_heads, head_dim): GQA 2:1, a head dim that is no power of two, MHA, 8:1.
GEOMETRIES = [(4, 2, 16), (6, 2, 24), (4, 4, 64), (8, 1, 32)]
BATCHES = {  # (prefix_lens, extend_lens)
    "mixed": ([0, 7, 12, 3, 0, 40], [9, 1, 5, 1, 1, 37]),  # prefills, decodes, extends
    "decode": ([4, 17, 1, 70, 300], [1, 1, 1, 1, 1]),  # 300: five decode splits
    "prefill": ([0, 0], [70, 3]),  # several query blocks, causal from 0
}


def _pools(h_kv: int, d: int, dtype: torch.dtype, seed: int = 1) -> SyntheticPools:
    return SyntheticPools(
        num_layers=2,
        num_kv_heads=h_kv,
        head_dim=d,
        capacity=1024,
        max_reqs=8,
        max_context_len=512,
        dtype=dtype,
        device=DEVICE,
        seed=seed,
    )


def _run_both(
    geometry: tuple[int, int, int],
    prefix_lens: list[int],
    extend_lens: list[int],
    dtype: torch.dtype,
    share_prefix: int = 0,
    window: int = 0,
    softcap: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(triton output, triton output of a second layer on the same plan, torch_native output);
    with share_prefix, every request's first share_prefix slots are request 0's; the layer has
    the given sliding window and soft cap."""
    torch.manual_seed(0)
    h, hkv, d = geometry
    layer = AttentionLayer(layer_id=1, num_heads=h, num_kv_heads=hkv, head_dim=d, scaling=d**-0.5,
                           sliding_window=window, logit_softcap=softcap)  # fmt: skip
    pools = _pools(hkv, d, dtype)
    tri = TritonAttnBackend(DEVICE, num_heads=h, num_kv_heads=hkv, head_dim=d)
    native = TorchNativeAttnBackend(DEVICE)
    fb = pools.make_batch(prefix_lens, extend_lens, tri)
    if share_prefix:
        table = pools.req_to_token.req_to_token
        rows = fb.req_pool_indices.tolist()
        table[rows[1:], :share_prefix] = table[rows[0], :share_prefix]
    t = fb.num_tokens
    q, k, v = (torch.randn(t, n * d, dtype=dtype, device=DEVICE) for n in (h, hkv, hkv))
    native.init_forward_metadata(fb)
    want = native.forward(q, k, v, layer, fb)
    tri.init_forward_metadata(fb)
    got = tri.forward(q, k, v, layer, fb)
    again = tri.forward(q, k, v, layer, fb)
    assert got.shape == want.shape == (t, h * d) and got.dtype == dtype
    return got, again, want


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "h{}kv{}d{}".format(*g))
@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_triton_matches_torch_native_float32(geometry: tuple[int, int, int], batch: str) -> None:
    got, again, want = _run_both(geometry, *BATCHES[batch], torch.float32)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(got, again)


@pytest.mark.parametrize("batch", ["mixed", "decode"])
def test_triton_matches_torch_native_float16(batch: str) -> None:
    got, _, want = _run_both((8, 2, 32), *BATCHES[batch], torch.float16)
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)


def test_decode_over_a_shared_prefix() -> None:
    """Rows that list the same prefix slots (torch_native attends them as one cascade group)."""
    got, _, want = _run_both((4, 2, 16), [60, 45, 50, 3], [1, 1, 1, 1], torch.float32, 40)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


# name -> (geometry, batch, sliding window, soft cap). With window 8 the mixed batch holds a
# prefill longer than the window (9 from 0), a decode row as long as it (8), an extend after a
# prefix (12 + 5), a short row (4) and a chunk with p > 0 and e > w (40 + 37, two query blocks);
# window 40 cuts the decode rows of 71 and 301 keys (several splits) and leaves 5, 18 and 2 whole.
WINDOWED = {
    "mixed-w8": ((4, 2, 16), "mixed", 8, 0.0),
    "mixed-w1000": ((4, 2, 16), "mixed", 1000, 0.0),  # longer than every sequence
    "prefill-w20-gqa8": ((8, 1, 32), "prefill", 20, 0.0),  # from 0, e = 70 > w
    "decode-w40": ((6, 2, 24), "decode", 40, 0.0),
    "mixed-cap": ((4, 2, 16), "mixed", 0, 2.0),
    "decode-w40-cap": ((4, 2, 16), "decode", 40, 2.0),
    "mixed-w8-cap": ((4, 4, 64), "mixed", 8, 2.0),
}


@pytest.mark.parametrize("case", sorted(WINDOWED))
def test_windows_and_soft_caps_match_torch_native(case: str) -> None:
    geometry, batch, window, cap = WINDOWED[case]
    got, again, want = _run_both(geometry, *BATCHES[batch], torch.float32, 0, window, cap)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(got, again)


def test_window_and_soft_cap_float16() -> None:
    got, _, want = _run_both((8, 2, 32), *BATCHES["mixed"], torch.float16, 0, 8, 2.0)
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)


PLAIN = AttentionLayer(layer_id=0, num_heads=4, num_kv_heads=2, head_dim=16, scaling=0.25)


@pytest.mark.parametrize(
    "layer",
    [PLAIN, dataclasses.replace(PLAIN, sliding_window=16, logit_softcap=2.0)],
    ids=["full", "window16-cap"],
)
def test_graph_metadata_pads_rows_to_the_padding_slot(layer: AttentionLayer) -> None:
    """The CUDA-graph path's buffers, run eagerly: a decode batch of 3 planned into size 4,
    forwarded through the static batch of the capture; real rows match torch_native (a
    windowed layer reads the same whole table, cut by the kernel)."""
    torch.manual_seed(0)
    h, hkv, d, bs = layer.num_heads, layer.num_kv_heads, layer.head_dim, 4
    pools = _pools(hkv, d, torch.float32)
    tri = TritonAttnBackend(DEVICE, num_heads=h, num_kv_heads=hkv, head_dim=d)
    tri.init_cuda_graph_state(max_bs=bs, max_num_indices=bs * 512)
    static = pools.make_batch([1] * bs, [1] * bs, tri)  # stands in for the runner's buffers
    static.out_loc.zero_()  # padding slot 0, as the graph runner's padded rows
    tri.init_forward_metadata_capture(static)
    pools.reset()
    fb = pools.make_batch([33, 2, 70], [1, 1, 1], tri)
    q, k, v = (torch.randn(3, n * d, device=DEVICE) for n in (h, hkv, hkv))
    native = TorchNativeAttnBackend(DEVICE)
    native.init_forward_metadata(fb)
    want = native.forward(q, k, v, layer, fb)  # stores k/v at fb.out_loc
    tri.init_forward_metadata_replay(fb, bs)
    assert tri.metadata.kv_indptr.tolist() == [0, 34, 37, 108, 109]
    static.out_loc[:3] = fb.out_loc
    pad = torch.zeros(1, h * d, device=DEVICE)
    got = tri.forward(
        torch.cat([q, pad]),
        torch.cat([k, pad[:, : hkv * d]]),
        torch.cat([v, pad[:, : hkv * d]]),
        layer,
        static,
    )
    torch.testing.assert_close(got[:3], want, rtol=1e-4, atol=1e-4)


def test_engine_greedy_equals_torch_native(tiny_llama_path) -> None:
    """A tiny Llama through the Engine (shared prefixes hit the radix cache): same tokens."""
    from radixrt import Engine

    prompts = [
        list(range(10, 40)),
        list(range(10, 30)) + [7, 8, 9],  # shares 20 tokens with the first
        [5, 6, 7, 8],
    ]
    params = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}
    outs: dict[str, list[list[int]]] = {}
    for backend in ("torch_native", "triton"):
        kwargs = dict(attention_backend=backend, max_total_tokens=512, device=DEVICE)
        with Engine(str(tiny_llama_path), **kwargs) as engine:
            first = engine.generate(input_ids=prompts[0], sampling_params=params)
            rest = engine.generate(input_ids=prompts[1:], sampling_params=params)
            outs[backend] = [o["output_ids"] for o in [first, *rest]]
            assert rest[0]["meta_info"]["cached_tokens"] >= 20
            assert_pool_whole(engine)
    assert outs["triton"] == outs["torch_native"]
