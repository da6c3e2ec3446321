"""Tiny random Llama/Qwen2 checkpoints with the default model's tokenizer, for tests (the
session fixtures in conftest.py, and tests that need other shapes)."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from tiny_families import TOKENIZER_FILES

_TOKENIZER_FILES = (*TOKENIZER_FILES, "chat_template.jinja")  # chat tests need the template


def make_tiny(tmp: Path, smollm2: Path, kind: str, **overrides: object) -> Path:
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    common = dict(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        eos_token_id=2,
        bos_token_id=1,
    )
    common.update(overrides)
    cfg = LlamaConfig(**common) if kind == "llama" else Qwen2Config(**common)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.float32)
    with torch.no_grad():  # larger weights so random models give peaked, stable argmaxes
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08)
    model.save_pretrained(tmp, safe_serialization=True)
    for name in _TOKENIZER_FILES:
        if (smollm2 / name).exists():
            shutil.copy(smollm2 / name, tmp / name)
    return tmp
