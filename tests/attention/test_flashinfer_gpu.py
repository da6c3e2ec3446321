"""The flashinfer backend against torch_native on random bf16 q/k/v over a scattered pool."""

from __future__ import annotations

import pytest
import torch

from radixrt.attention.base import AttentionLayer
from radixrt.attention.torch_native import TorchNativeAttnBackend
from radixrt.bench.synthetic import SyntheticPools

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


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=["llama8b", "smollm2"])
@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("plan_up_front", [True, False], ids=["planned", "deferred"])
def test_flashinfer_matches_torch_native(
    geometry: tuple[int, int, int], batch: str, plan_up_front: bool
) -> None:
    pytest.importorskip("flashinfer")
    from radixrt.attention.flashinfer_backend import FlashInferAttnBackend

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
    )
    geo = dict(num_heads=h, num_kv_heads=hkv, head_dim=d) if plan_up_front else {}
    fi = FlashInferAttnBackend("cuda", **geo)
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
