"""The float32 CPU model with radixrt's C kernels on gives the tokens and logprobs it gives
with them off (torch ops), for Llama and Qwen2 (q/k/v bias), decode and mixed batches, and
requests decoding over one cached prefix (the kernel reads it once for the group)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_pool_whole

from radixrt import Engine
from radixrt.model.cpu import kernels as ck

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")

PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "def add(a, b):\n    return", "Hi"]
PARAMS = {"max_new_tokens": 12, "temperature": 0.0, "ignore_eos": True, "return_logprob": True}


# One request over 1100+ keys: decode attention splits its keys into ranges (csrc/cpu).
LONG_IDS = [256 + (i * 7919) % 40000 for i in range(1100)]
# Five requests over one 150-token prefix, then their own 3-40 tokens.
SHARED_IDS = [[300 + (i * 104729) % 30000 for i in range(150)] + [500 + j] * (3 + 9 * j)
              for j in range(5)]  # fmt: skip


def _run(path: Path, disable: bool) -> list[dict]:
    mode = "off" if disable else "on"
    with Engine(str(path), max_total_tokens=2048, cpu_kernels=mode) as e:
        runner = e.scheduler.runner
        assert runner.cpu_kernels.any is not disable
        backend = "TorchNativeAttnBackend" if disable else "CpuAttnBackend"
        assert type(runner.attn_backend).__name__ == backend
        layer = "LlamaDecoderLayer" if disable else "FusedDecodeLayer"  # one C call per decode
        assert all(type(m).__name__ == layer for m in runner.model.model.layers)
        outs = e.generate(PROMPTS, PARAMS)
        outs.append(e.generate(input_ids=LONG_IDS, sampling_params=PARAMS))
        outs += e.generate(input_ids=SHARED_IDS, sampling_params=PARAMS)
        assert sum(o["meta_info"]["cached_tokens"] >= 150 for o in outs[-5:]) >= 4
        assert_pool_whole(e)
    return outs


@pytest.mark.parametrize("fixture", ["tiny_llama_path", "tiny_qwen2_path"])
def test_kernels_on_equal_off(fixture: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(fixture)
    on, off = _run(path, disable=False), _run(path, disable=True)
    for a, b in zip(on, off):
        assert a["output_ids"] == b["output_ids"]
        la = [x[0] for x in a["meta_info"]["output_token_logprobs"]]
        lb = [x[0] for x in b["meta_info"]["output_token_logprobs"]]
        assert la == pytest.approx(lb, abs=1e-4)


@pytest.mark.parametrize("name", ["mistral", "gemma3"])
@pytest.mark.parametrize("window_kv_fraction", [None, 0.2])
def test_windowed_models_on_the_kernels_equal_torch(
    name: str, window_kv_fraction: float | None, tmp_path: Path, smollm2_path: Path
) -> None:
    """Sliding windows on the kernels (decode through per-window key views, extends with the
    window, Mistral's layers fused), with one pool and with a window pool, equal torch."""
    from tiny_families import make_family

    path = make_family(tmp_path, name, smollm2_path)
    prompts = [SHARED_IDS[j][:60] + [600 + j] * (5 + 7 * j) for j in range(4)]
    params = {**PARAMS, "max_new_tokens": 24}  # decode runs past the 16-key window
    outs = {}
    for mode in ("on", "off"):
        with Engine(str(path), max_total_tokens=3000, chunked_prefill_size=24, cpu_kernels=mode,
                    window_kv_fraction=window_kv_fraction) as e:  # fmt: skip
            runner = e.scheduler.runner
            want = "CpuAttnBackend" if mode == "on" else "TorchNativeAttnBackend"
            assert type(runner.attn_backend).__name__ == want
            fused = sum(type(m).__name__ == "FusedDecodeLayer" for m in runner.model.model.layers)
            assert fused == (3 if mode == "on" and name == "mistral" else 0)
            assert (runner.allocator.window.capacity > 0) == (window_kv_fraction is not None)
            outs[mode] = e.generate(input_ids=prompts[:2], sampling_params=params)
            outs[mode] += e.generate(input_ids=prompts[2:] + [prompts[0]], sampling_params=params)
            assert_pool_whole(e)
    for a, b in zip(outs["on"], outs["off"]):
        assert a["output_ids"] == b["output_ids"]
        la = [x[0] for x in a["meta_info"]["output_token_logprobs"]]
        lb = [x[0] for x in b["meta_info"]["output_token_logprobs"]]
        assert la == pytest.approx(lb, abs=1e-4)
