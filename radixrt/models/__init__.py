"""Model architectures, chosen by the `architectures` field of config.json."""

from __future__ import annotations

import importlib

# HF architecture name -> "module:class"; imported only when chosen.
MODEL_REGISTRY: dict[str, str] = {
    "LlamaForCausalLM": "radixrt.models.llama:LlamaForCausalLM",
    "MistralForCausalLM": "radixrt.models.llama:LlamaForCausalLM",
    "Qwen2ForCausalLM": "radixrt.models.llama:LlamaForCausalLM",
}


def get_model_cls(architecture: str) -> type:
    """Return the model class for an HF architecture name; ValueError lists the supported ones."""
    if architecture not in MODEL_REGISTRY:
        raise ValueError(
            f"unsupported model architecture {architecture!r}; supported: {sorted(MODEL_REGISTRY)}"
        )
    module_name, cls_name = MODEL_REGISTRY[architecture].split(":")
    return getattr(importlib.import_module(module_name), cls_name)
