"""tp 2 equals transformers for the families whose sharding differs from Llama's: experts
(Qwen3-MoE, Mixtral), q/k norms per head (Gemma 3) and over the whole projection (OLMo 2),
a checkpoint with fused qkv/gate_up (Phi-3), soft caps (Gemma 2), rotary pairs permuted at
load within each rank's heads (GLM-4), attention and MLP side by side (Cohere 2), experts
under Granite's multipliers (Granite MoE)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from hf_reference import hf_greedy_nocache, load_hf
from pool_checks import assert_pool_whole
from tiny_families import make_family

from radixrt.serve.engine import Engine

PROMPT = [random.Random(5).randrange(3, 49000) for _ in range(50)]
PARAMS = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True, "return_logprob": True,
          "logprob_start_len": 0}  # fmt: skip


@pytest.mark.parametrize(
    "name",
    ["qwen3-moe", "mixtral", "gemma3", "olmo2", "phi3", "gemma2", "glm4", "cohere2", "granite-moe"],
)
def test_tp2_equals_transformers(name: str, tmp_path: Path, smollm2_path: Path) -> None:
    path = make_family(tmp_path, name, smollm2_path)
    hf = load_hf(path)
    with torch.inference_mode():
        lp = torch.log_softmax(hf(torch.tensor([PROMPT])).logits[0].float(), -1)
    want_prompt = [lp[i - 1, PROMPT[i]].item() for i in range(1, len(PROMPT))]
    tokens, _ = hf_greedy_nocache(hf, PROMPT, PARAMS["max_new_tokens"])
    with Engine(str(path), tp_size=2, max_total_tokens=1024, context_length=256,
                chunked_prefill_size=24) as engine:  # fmt: skip
        out = engine.generate(input_ids=PROMPT, sampling_params=PARAMS)
        assert_pool_whole(engine)
    assert out["output_ids"] == tokens
    got = [x[0] for x in out["meta_info"]["input_token_logprobs"][1:]]
    assert got == pytest.approx(want_prompt, abs=5e-3)
