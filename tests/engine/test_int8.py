"""Weight-only int8 (`--quantization int8`): every linear layer quantized at load from the
float checkpoint (one scale per output column) and run by the int8 CPU kernels, decode layers
fused as in float32; the default model's perplexity on a fixed text stays within 2% of
float32's, and bad combinations are refused with a message."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import assert_pool_whole

from benchmarks.micro.perplexity import TEXT, perplexity
from radixrt import Engine
from radixrt.core.config import ModelConfig
from radixrt.model.cpu import kernels as ck
from radixrt.model.cpu.layers import PackedLinear

pytestmark = pytest.mark.skipif(not ck.available(), reason=f"no CPU kernels: {ck.build_error()}")

PARAMS = {"max_new_tokens": 10, "temperature": 0.0, "ignore_eos": True, "return_logprob": True}


@pytest.mark.parametrize("fixture", ["tiny_llama_path", "tiny_qwen2_path"])
def test_int8_model_runs_every_path(fixture: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(fixture)
    with Engine(str(path), max_total_tokens=2048, cpu_kernels="on") as e:
        ref = e.generate(["The capital of France is", "1, 2, 3,"], PARAMS)
        float_bytes = e.scheduler.runner.weight_bytes
    with Engine(str(path), max_total_tokens=2048, quantization="int8") as e:
        runner = e.scheduler.runner
        linears = [m for m in runner.model.modules() if isinstance(m, PackedLinear)]
        assert linears and all(m.packed.dtype == torch.int8 and m.weight is None for m in linears)
        assert not any(type(m) is torch.nn.Linear for m in runner.model.modules())
        assert all(type(m).__name__ == "FusedDecodeLayer" for m in runner.model.model.layers)
        assert runner.weight_bytes < float_bytes / 2
        # decode batches (fused), a prefill with a cached prefix, a mixed batch
        outs = e.generate(["The capital of France is", "1, 2, 3,"], PARAMS)
        again = e.generate("The capital of France is the", PARAMS)
        assert_pool_whole(e)
    assert len(again["output_ids"]) == 10
    for a, b in zip(outs, ref):  # same model, quantized: the logprobs stay close
        assert len(a["output_ids"]) == 10
        la = torch.tensor([x[0] for x in a["meta_info"]["output_token_logprobs"]])
        lb = torch.tensor([x[0] for x in b["meta_info"]["output_token_logprobs"]])
        if a["output_ids"] == b["output_ids"]:
            assert torch.allclose(la, lb, atol=0.2)


def test_int8_perplexity_within_two_percent_of_float32(smollm2_path: Path) -> None:
    text = TEXT.read_text()
    with Engine(str(smollm2_path), max_total_tokens=2048) as e:
        ppl_float, n = perplexity(e, text)
    with Engine(str(smollm2_path), max_total_tokens=2048, quantization="int8") as e:
        ppl_int8, n8 = perplexity(e, text)
        assert e.generate(
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
            {"max_new_tokens": 12, "temperature": 0},
        )["text"].startswith("The capital of France is Paris")
    assert n == n8 > 300
    assert 5 < ppl_float < 100  # the text is plain English: the model is not lost on it
    assert ppl_int8 <= ppl_float * 1.02, (ppl_int8, ppl_float)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"quantization": "int4"}, "quantization must be one of"),
        ({"quantization": "int8", "device": "cuda"}, "needs the CPU"),
        ({"quantization": "int8", "dtype": "bfloat16"}, "float32 activations"),
        ({"quantization": "int8", "cpu_kernels": "off"}, "not with cpu_kernels='off'"),
    ],
)
def test_bad_int8_settings_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ModelConfig(**kwargs)
