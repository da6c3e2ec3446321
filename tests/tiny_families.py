"""Tiny random checkpoints of every family, built from transformers' own config classes and
saved with save_pretrained (nothing downloaded). Windows are 16 keys, so the tests' prompts of
40-70 tokens run past them; weights are drawn wide enough that greedy output varies."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
WINDOW = 16

_COMMON: dict[str, Any] = dict(
    vocab_size=49152,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    eos_token_id=2,
    bos_token_id=1,
    pad_token_id=0,
)
_S, _F = "sliding_attention", "full_attention"

# name -> (transformers config class name, overrides of _COMMON)
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "mistral": ("MistralConfig", {"sliding_window": WINDOW}),
    "qwen2-window": ("Qwen2Config", {"use_sliding_window": True, "sliding_window": WINDOW,
                                     "max_window_layers": 1}),
    "qwen3": ("Qwen3Config", {"attention_bias": True, "tie_word_embeddings": True}),
    "qwen3-moe": ("Qwen3MoeConfig", {"num_experts": 8, "num_experts_per_tok": 2,
                                     "moe_intermediate_size": 32, "norm_topk_prob": True,
                                     "mlp_only_layers": [1]}),
    "mixtral": ("MixtralConfig", {"num_local_experts": 4, "num_experts_per_tok": 2,
                                  "sliding_window": WINDOW}),
    "gemma": ("GemmaConfig", {"tie_word_embeddings": True}),
    "gemma2": ("Gemma2Config", {"sliding_window": WINDOW, "query_pre_attn_scalar": 24,
                                "attn_logit_softcapping": 3.0, "final_logit_softcapping": 8.0,
                                "tie_word_embeddings": True}),
    "gemma3": ("Gemma3TextConfig", {"sliding_window": WINDOW, "query_pre_attn_scalar": 16,
                                    "layer_types": [_S, _S, _F], "tie_word_embeddings": True,
                                    "rope_parameters": {
                                        _S: {"rope_type": "default", "rope_theta": 10000.0},
                                        _F: {"rope_type": "linear", "factor": 2.0,
                                             "rope_theta": 1000000.0}}}),
    "phi3": ("Phi3Config", {"sliding_window": WINDOW, "original_max_position_embeddings": 32,
                            "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0,
                                                "partial_rotary_factor": 0.5,
                                                "short_factor": [1.0, 1.5, 2.0, 3.0],
                                                "long_factor": [1.0, 2.0, 4.0, 8.0],
                                                "original_max_position_embeddings": 32}}),
    "olmo2": ("Olmo2Config", {"attention_bias": True}),
    "granite": ("GraniteConfig", {"embedding_multiplier": 3.0, "residual_multiplier": 0.5,
                                  "attention_multiplier": 0.2, "logits_scaling": 2.0}),
    # NoPE on layers 1 and 3 (every 2nd): layer 1 slides, layer 3 sees every key, as do the
    # rotating layers 0 and 2 (SmolLM3-3B itself: NoPE every 4th layer, no window).
    "smollm3": ("SmolLM3Config", {"num_hidden_layers": 4, "no_rope_layer_interval": 2,
                                  "use_sliding_window": True, "sliding_window": WINDOW,
                                  "layer_types": [_F, _S, _F, _F], "tie_word_embeddings": True}),
    # Rotary pairs of adjacent dims over half of each head, q/k/v biases, four norms a layer.
    "glm4": ("Glm4Config", {"attention_bias": True}),
    # Attention and MLP in parallel off a LayerNorm, interleaved rotary pairs, a logit scale;
    # Cohere 2 rotates only its sliding layers.
    "cohere": ("CohereConfig", {"logit_scale": 0.5, "tie_word_embeddings": True}),
    "cohere2": ("Cohere2Config", {"logit_scale": 0.5, "sliding_window": WINDOW,
                                  "layer_types": [_S, _F, _S], "tie_word_embeddings": True}),
    # OLMo 2's layer, a window on layers 0 and 1 with a rope of their own.
    "olmo3": ("Olmo3Config", {"sliding_window": WINDOW, "layer_types": [_S, _S, _F],
                              "rope_parameters": {
                                  _S: {"rope_type": "default", "rope_theta": 10000.0},
                                  _F: {"rope_type": "linear", "factor": 2.0,
                                       "rope_theta": 500000.0}}}),
    # Post-norms, per-head q/k norms, a window on layers 0 and 2; layer 1 is NoPE.
    "exaone4": ("Exaone4Config", {"sliding_window": WINDOW, "layer_types": [_S, _F, _S]}),
    # Interleaved rotary pairs over the whole head, a bias on every projection.
    "ernie4_5": ("Ernie4_5Config", {"use_bias": True, "tie_word_embeddings": True}),
    # q/k/v and o biases set apart.
    "seed-oss": ("SeedOssConfig", {"attention_bias": True, "attention_out_bias": True}),
    # Granite's multipliers with every MLP a mixture of experts (router.layer, input_linear,
    # output_linear in the checkpoint).
    "granite-moe": ("GraniteMoeConfig", {"num_local_experts": 4, "num_experts_per_tok": 2,
                                         "intermediate_size": 32, "embedding_multiplier": 3.0,
                                         "residual_multiplier": 0.5,
                                         "attention_multiplier": 0.2, "logits_scaling": 2.0}),
    # OLMo 2's norms on the Llama layer, interleaved rotary pairs, q/k/v biases.
    "helium": ("HeliumConfig", {"attention_bias": True}),
    "llama-yarn": ("LlamaConfig", {"rope_parameters": {
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 128}}),
}  # fmt: skip


# Weight scales (embedding, other matrices) where the defaults (0.08, 0.08) let the residual
# stream repeat the last token: tied embeddings, Gemma's sqrt(hidden) embedding scale,
# OLMo 2's post-norms.
_STD: dict[str, tuple[float, float]] = {
    "qwen3": (0.03, 0.12),
    "gemma": (0.02, 0.12),
    "gemma2": (0.02, 0.12),
    "gemma3": (0.02, 0.12),
    "olmo2": (0.3, 0.3),
    "cohere": (0.03, 0.12),
    "ernie4_5": (0.03, 0.12),
    "cohere2": (0.03, 0.12),
    "smollm3": (0.03, 0.12),
}


def make_family(folder: Path, name: str, tokenizer_from: Path, **overrides: Any) -> Path:
    """Save family `name` as a float32 safetensors folder with the tokenizer of `tokenizer_from`."""
    import transformers
    from transformers import AutoModelForCausalLM

    cls_name, family = FAMILIES[name]
    cfg = getattr(transformers, cls_name)(**{**_COMMON, **family, **overrides})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.float32)
    embed_std, std = _STD.get(name, (0.08, 0.08))
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, embed_std if "embed_tokens" in pname else std)
            elif "norm" in pname:  # Gemma's norms are offsets from 1; the others scale from 1
                p.normal_(0.0 if "gemma" in name else 1.0, 0.1)
            else:  # biases
                p.normal_(0, 0.05)
    model.save_pretrained(folder, safe_serialization=True)
    for f in TOKENIZER_FILES:
        if (tokenizer_from / f).exists():
            shutil.copy(tokenizer_from / f, folder / f)
    return folder
