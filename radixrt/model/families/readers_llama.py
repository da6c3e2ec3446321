"""config.json readers of the families that run on the Llama layer (llama.py): Llama,
Mistral, Qwen2, Qwen3, Qwen3-MoE, Mixtral, Phi-3, Granite and Granite MoE, SmolLM3, ERNIE 4.5,
Helium and Seed-OSS. Each returns ArchConfig's fields beyond read_common's, its defaults those of
the family's transformers config class (families.py registers them)."""

from __future__ import annotations

from typing import Any

from radixrt.model.families.config_reader import (
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    ConfigReader,
    GraniteOptions,
    MoEConfig,
    biases,
    nope_layers,
    norm_and_tail,
    rope_fields,
    window_all,
    window_by_types,
)


def _qwen_window(r: ConfigReader, fields: dict[str, Any]) -> dict[str, Any]:
    window = _qwen_window_size(r)
    first = int(r.value("max_window_layers", 28))
    return window_by_types(
        r, fields, window, lambda i: SLIDING_ATTENTION if i >= first else FULL_ATTENTION
    )


def _qwen_window_size(r: ConfigReader) -> Any:
    """Qwen's window counts only with use_sliding_window (checkpoints carry one regardless)."""
    window = r.get("sliding_window")
    return window if r.value("use_sliding_window", False) else None


def read_llama(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, False, 2048),
        **biases(bias, bias, bool(r.value("mlp_bias", False))),
        **window_all(r, f, None),
    }


def read_mistral(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, False, 131072),
        **biases(False, False),
        **window_all(r, f, r.get("sliding_window", 4096)),
    }


def read_qwen2(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, False, 32768),
        **biases(True, False),
        **_qwen_window(r, f),
    }


def read_qwen3(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, False, 32768),
        **biases(bias, bias),
        **_qwen_window(r, f),
    }


def read_qwen3_moe(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    n = f["num_hidden_layers"]
    experts = int(r.value("num_experts", r.value("num_local_experts", 128)))
    step = int(r.value("decoder_sparse_step", 1))
    dense = set(r.value("mlp_only_layers", []))
    window = _qwen_window_size(r)
    r.get("max_window_layers")  # read and unused: transformers slides every layer here
    moe = MoEConfig(
        num_experts=experts,
        top_k=int(r.value("num_experts_per_tok", 8)),
        intermediate_size=int(r.value("moe_intermediate_size", 768)),
        norm_topk_prob=bool(r.value("norm_topk_prob", False)),
        sparse_layers=tuple(
            i not in dense and experts > 0 and (i + 1) % step == 0 for i in range(n)
        ),
    )
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, False, 32768),
        **biases(bias, bias),
        **window_all(r, f, window),
        "moe": moe,
    }


def _experts_everywhere(r: ConfigReader, f: dict[str, Any]) -> MoEConfig:
    """Mixtral's and Granite MoE's experts: every layer's MLP, each expert as wide as
    intermediate_size, the top k's weights summing to 1."""
    return MoEConfig(
        num_experts=int(r.value("num_local_experts", 8)),
        top_k=int(r.value("num_experts_per_tok", 2)),
        intermediate_size=f["intermediate_size"],
        norm_topk_prob=True,
        sparse_layers=(True,) * f["num_hidden_layers"],
    )


def read_mixtral(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    moe = _experts_everywhere(r, f)
    return {
        **rope_fields(r, f, 1000000.0),
        **norm_and_tail(r, 1e-5, False, 131072),
        **biases(False, False),
        **window_all(r, f, r.get("sliding_window")),
        "moe": moe,
    }


def read_phi3(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-5, False, 4096),
        **biases(False, False),
        **window_all(r, f, r.get("sliding_window")),
    }


def read_granite(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, False, 2048),
        **biases(bias, bias, bool(r.value("mlp_bias", False))),
        **window_all(r, f, None),
        "options": GraniteOptions(
            embedding_multiplier=float(r.value("embedding_multiplier", 1.0)),
            residual_multiplier=float(r.value("residual_multiplier", 1.0)),
            attention_multiplier=float(r.value("attention_multiplier", 1.0)),
            logits_scaling=float(r.value("logits_scaling", 1.0)),
        ),
    }


def read_granite_moe(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    # (its router softmaxes the top k's logits: the same weights)
    return {**read_granite(r, f), "moe": _experts_everywhere(r, f)}


def read_smollm3(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    rotates = nope_layers(r, f, 4)
    window = _qwen_window_size(r)  # (with use_sliding_window only, on the NoPE layers)
    r.get("max_window_layers")  # a Qwen2 field SmolLM3's checkpoints carry; transformers ignores it
    return {
        **rope_fields(r, f, 2000000.0),
        **norm_and_tail(r, 1e-6, True, 32768),
        **biases(bias, bias, bool(r.value("mlp_bias", False))),
        **window_by_types(
            r,
            f,
            window,
            lambda i: (
                SLIDING_ATTENTION if window and not rotates["rope_layers"][i] else FULL_ATTENTION
            ),
        ),  # fmt: skip
        **rotates,
    }


def read_ernie4_5(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("use_bias", False))
    return {
        **rope_fields(r, f, 500000.0),
        **norm_and_tail(r, 1e-5, True, 131072),
        **biases(bias, bias, bias),
        **window_all(r, f, None),
        "rope_interleaved": True,
    }


def read_helium(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    return {
        **rope_fields(r, f, 100000.0),
        **norm_and_tail(r, 1e-8, False, 4096),
        **biases(bool(r.value("attention_bias", False)), False, bool(r.value("mlp_bias", False))),
        **window_all(r, f, None),
        "rope_interleaved": True,
    }


def read_seed_oss(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, False, 524288),
        **biases(
            bool(r.value("attention_bias", True)),
            bool(r.value("attention_out_bias", False)),
            bool(r.value("mlp_bias", False)),
        ),
        **window_all(r, f, None),
    }
