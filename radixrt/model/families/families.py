"""The model families radixrt runs, and how each reads its config.json (torch-free).

`FAMILIES` maps a checkpoint's `architectures[0]` to its module and its config reader. A
reader turns config.json into ArchConfig's fields, taking each field's default from the
family's transformers config class when config.json leaves it out. A field the reader did not
read is refused by name when it is one that changes a decoder's math in some transformers
family (MATH_FIELDS) and is not off (null, false, 0, empty): a checkpoint is never run with
part of its architecture ignored. Other unread fields (names, notes, training settings) are
logged and left.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from radixrt.model.families.config_reader import (
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    CohereOptions,
    ConfigReader,
    GemmaOptions,
    GraniteOptions,
    MoEConfig,
    biases,
    check_layer_types,
    nope_layers,
    norm_and_tail,
    read_common,
    refuse_if,
    rope_fields,
    rope_from,
    scaling_of,
    window_all,
    window_by_types,
)


@dataclass(frozen=True, slots=True)
class Family:
    """One architecture: its nn.Module ("module:class") and its config reader, which returns
    ArchConfig's fields beyond the common ones read by `read_common`."""

    model: str
    read: Callable[[ConfigReader, dict[str, Any]], dict[str, Any]]


def parse_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """ArchConfig's fields from config.json; ValueError names an unknown architecture, a
    missing field or a field that changes the math and is not implemented."""
    archs = cfg.get("architectures") or [cfg.get("model_type", "?")]
    arch = str(archs[0])
    family = FAMILIES.get(arch)
    if family is None:
        raise ValueError(f"unsupported model architecture {arch!r}; supported: {sorted(FAMILIES)}")
    r = ConfigReader(cfg, arch)
    fields = read_common(r)
    fields.update(family.read(r, fields))
    check_layer_types(arch, fields)
    r.refuse_unread()
    return fields


# ----- the families (defaults: each family's transformers config class)


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


def _llama(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, False, 2048),
        **biases(bias, bias, bool(r.value("mlp_bias", False))),
        **window_all(r, f, None),
    }


def _mistral(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, False, 131072),
        **biases(False, False),
        **window_all(r, f, r.get("sliding_window", 4096)),
    }


def _qwen2(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, False, 32768),
        **biases(True, False),
        **_qwen_window(r, f),
    }


def _qwen3(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, False, 32768),
        **biases(bias, bias),
        **_qwen_window(r, f),
    }


def _qwen3_moe(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
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


def _mixtral(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    n = f["num_hidden_layers"]
    moe = MoEConfig(
        num_experts=int(r.value("num_local_experts", 8)),
        top_k=int(r.value("num_experts_per_tok", 2)),
        intermediate_size=f["intermediate_size"],
        norm_topk_prob=True,
        sparse_layers=(True,) * n,
    )
    return {
        **rope_fields(r, f, 1000000.0),
        **norm_and_tail(r, 1e-5, False, 131072),
        **biases(False, False),
        **window_all(r, f, r.get("sliding_window")),
        "moe": moe,
    }


def _gemma2(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    refuse_if(r, "use_bidirectional_attention", bool(r.get("use_bidirectional_attention")),
               "bidirectional attention is not implemented")  # fmt: skip
    r.get("hidden_act")  # transformers reads hidden_activation; hidden_act is a leftover
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, True, 8192, "gelu_pytorch_tanh", "hidden_activation"),
        **biases(bias, bias),
        **window_by_types(
            r,
            f,
            r.get("sliding_window", 4096),
            lambda i: SLIDING_ATTENTION if (i + 1) % 2 else FULL_ATTENTION,
        ),  # fmt: skip
        "options": GemmaOptions(
            query_pre_attn_scalar=float(r.value("query_pre_attn_scalar", 256)),
            attn_logit_softcapping=float(r.get("attn_logit_softcapping", 50.0) or 0.0),
            final_logit_softcapping=float(r.get("final_logit_softcapping", 30.0) or 0.0),
        ),
    }


def _gemma3(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    refuse_if(r, "use_bidirectional_attention", bool(r.get("use_bidirectional_attention")),
               "bidirectional attention is not implemented")  # fmt: skip
    refuse_if(r, "attn_logit_softcapping", bool(r.get("attn_logit_softcapping")),
               "Gemma 3 has no attention softcap (transformers ignores it too)")  # fmt: skip
    params = dict(r.get("rope_parameters") or {})
    full = dict(params.get(FULL_ATTENTION) or {"rope_type": "default"})
    local = dict(params.get(SLIDING_ATTENTION) or {"rope_type": "default"})
    if r.get("rope_scaling"):
        full.update(r.get("rope_scaling"))
    full.setdefault("rope_theta", r.value("rope_theta", 1000000.0))
    local.setdefault("rope_theta", r.value("rope_local_base_freq", 10000.0))
    pattern = int(r.get("sliding_window_pattern") or r.get("_sliding_window_pattern") or 6)
    r.get("hidden_act")  # transformers reads hidden_activation; hidden_act is a leftover
    return {
        **rope_from(full, f),
        **norm_and_tail(r, 1e-6, True, 131072, "gelu_pytorch_tanh", "hidden_activation"),
        **biases(bias, bias),
        **window_by_types(
            r,
            f,
            r.get("sliding_window", 4096),
            lambda i: SLIDING_ATTENTION if (i + 1) % pattern else FULL_ATTENTION,
        ),  # fmt: skip
        "options": GemmaOptions(
            query_pre_attn_scalar=float(r.value("query_pre_attn_scalar", 256)),
            attn_logit_softcapping=0.0,
            final_logit_softcapping=float(r.get("final_logit_softcapping") or 0.0),
        ),
        "local_rope_theta": float(local["rope_theta"]),
        "local_rope_scaling": scaling_of(local),
    }


def _phi3(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-5, False, 4096),
        **biases(False, False),
        **window_all(r, f, r.get("sliding_window")),
    }


def _olmo2(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-5, False, 2048),
        **biases(bias, bias),
        **window_all(r, f, None),
    }


def _granite(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
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


def _smollm3(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
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


def _glm4(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", True))
    rope = rope_fields(r, f, 10000.0)
    given = r.get("partial_rotary_factor") or (r.get("rope_parameters") or {}).get(
        "partial_rotary_factor"
    )
    if not given:  # Glm4Config's default: half of each head rotates
        rope["rotary_dim"] = f["head_dim"] // 2
    return {
        **rope,
        **norm_and_tail(r, 1.5625e-07, False, 131072),
        **biases(bias, False),
        **window_all(r, f, None),
        "rope_interleaved": True,
    }


def _cohere_common(r: ConfigReader, f: dict[str, Any], max_pos: int) -> dict[str, Any]:
    """What Cohere and Cohere 2 share: interleaved rotary pairs, a LayerNorm's eps, tied
    embeddings, the logit scale, biases on every attention projection or none."""
    bias = bool(r.value("attention_bias", False))
    tail = norm_and_tail(r, 1e-5, True, max_pos)
    tail["rms_norm_eps"] = float(r.value("layer_norm_eps", 1e-5))
    return {
        **rope_fields(r, f, 10000.0),
        **tail,
        **biases(bias, bias),
        "rope_interleaved": True,
        "options": CohereOptions(logit_scale=float(r.value("logit_scale", 0.0625))),
    }


def _cohere(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    refuse_if(r, "use_qk_norm", bool(r.get("use_qk_norm")),
              "per-head q/k LayerNorms (Command R+) are not implemented")  # fmt: skip
    return {**_cohere_common(r, f, 8192), **window_all(r, f, None)}


def _cohere2(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    pattern = int(r.value("sliding_window_pattern", 4))
    window = r.get("sliding_window", 4096)
    types = window_by_types(
        r, f, window, lambda i: SLIDING_ATTENTION if (i + 1) % pattern else FULL_ATTENTION
    )
    # Only the sliding layers rotate (none where no window is set, as transformers does).
    rotates = tuple(bool(window) and t == SLIDING_ATTENTION for t in types["layer_types"])
    return {
        **_cohere_common(r, f, 8192),
        **types,
        "rope_layers": rotates,
        "head_dim": f["hidden_size"] // f["num_attention_heads"],  # (Cohere2Config sets it so)
    }


def _olmo3(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    full, local = _ropes_by_kind(r, 500000.0)
    return {
        **rope_from(full, f),
        **norm_and_tail(r, 1e-5, False, 2048),
        **biases(bias, bias),
        **window_by_types(
            r,
            f,
            r.get("sliding_window", 4096),
            lambda i: SLIDING_ATTENTION if (i + 1) % 4 else FULL_ATTENTION,
        ),  # fmt: skip
        **_local_rope(full, local),
    }


def _ropes_by_kind(r: ConfigReader, theta: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """The full and the sliding layers' rope parameters: `rope_parameters` per layer kind
    (or one set for both), the v4 rope_scaling applying to the full layers only."""
    params = dict(r.get("rope_parameters") or {})
    if FULL_ATTENTION in params or SLIDING_ATTENTION in params:
        full = dict(params.get(FULL_ATTENTION) or {"rope_type": "default"})
        local = dict(params.get(SLIDING_ATTENTION) or {"rope_type": "default"})
    else:
        full, local = (
            dict(params or {"rope_type": "default"}),
            dict(params or {"rope_type": "default"}),
        )
    if r.get("rope_scaling"):
        full.update(r.get("rope_scaling"))
    full.setdefault("rope_theta", r.value("rope_theta", theta))
    local.setdefault("rope_theta", r.value("rope_theta", theta))
    return full, local


def _local_rope(full: dict[str, Any], local: dict[str, Any]) -> dict[str, Any]:
    """The sliding layers' own rope, where it differs from the full layers'."""
    if scaling_of(local) == scaling_of(full) and local["rope_theta"] == full["rope_theta"]:
        return {}
    return {"local_rope_theta": float(local["rope_theta"]), "local_rope_scaling": scaling_of(local)}


def _exaone4(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    window = r.get("sliding_window", 4096)
    pattern = r.value("sliding_window_pattern", 4)
    r.get("sliding_window_pattern")

    def kind(i: int) -> str:
        if not window:
            return FULL_ATTENTION
        if isinstance(pattern, str):  # e.g. "LLLG": local (sliding) or global, repeating
            return SLIDING_ATTENTION if pattern[i % len(pattern)] == "L" else FULL_ATTENTION
        return SLIDING_ATTENTION if (i + 1) % int(pattern) else FULL_ATTENTION

    types = window_by_types(r, f, window, kind)
    # With a window, the full-attention layers are NoPE (transformers: "global NoPE").
    rotates = tuple(not window or t == SLIDING_ATTENTION for t in types["layer_types"])
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-5, False, 2048),
        **biases(False, False),
        **types,
        "rope_layers": rotates,
    }


def _ernie4_5(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("use_bias", False))
    f = {**f, "head_dim": int(r.value("head_dim", 128))}  # Ernie4_5Config's default
    return {
        "head_dim": f["head_dim"],
        **rope_fields(r, f, 500000.0),
        **norm_and_tail(r, 1e-5, True, 131072),
        **biases(bias, bias, bias),
        **window_all(r, f, None),
        "rope_interleaved": True,
    }


def _seed_oss(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    f = {**f, "head_dim": int(r.value("head_dim", 128))}  # SeedOssConfig's default
    return {
        "head_dim": f["head_dim"],
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-6, False, 524288),
        **biases(
            bool(r.value("attention_bias", True)),
            bool(r.value("attention_out_bias", False)),
            bool(r.value("mlp_bias", False)),
        ),
        **window_all(r, f, None),
    }


FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family("radixrt.model.families.llama:LlamaForCausalLM", _llama),
    "MistralForCausalLM": Family("radixrt.model.families.llama:LlamaForCausalLM", _mistral),
    "Qwen2ForCausalLM": Family("radixrt.model.families.llama:LlamaForCausalLM", _qwen2),
    "Qwen3ForCausalLM": Family("radixrt.model.families.qwen3:Qwen3ForCausalLM", _qwen3),
    "Qwen3MoeForCausalLM": Family(
        "radixrt.model.families.qwen3_moe:Qwen3MoeForCausalLM", _qwen3_moe
    ),
    "MixtralForCausalLM": Family("radixrt.model.families.mixtral:MixtralForCausalLM", _mixtral),
    "Gemma2ForCausalLM": Family("radixrt.model.families.gemma2:Gemma2ForCausalLM", _gemma2),
    "Gemma3ForCausalLM": Family("radixrt.model.families.gemma3:Gemma3ForCausalLM", _gemma3),
    "Phi3ForCausalLM": Family("radixrt.model.families.phi3:Phi3ForCausalLM", _phi3),
    "Olmo2ForCausalLM": Family("radixrt.model.families.post_norm:Olmo2ForCausalLM", _olmo2),
    "GraniteForCausalLM": Family("radixrt.model.families.granite:GraniteForCausalLM", _granite),
    "SmolLM3ForCausalLM": Family("radixrt.model.families.llama:LlamaForCausalLM", _smollm3),
    "Glm4ForCausalLM": Family("radixrt.model.families.glm4:Glm4ForCausalLM", _glm4),
    "CohereForCausalLM": Family("radixrt.model.families.cohere:CohereForCausalLM", _cohere),
    "Cohere2ForCausalLM": Family("radixrt.model.families.cohere:CohereForCausalLM", _cohere2),
    "Olmo3ForCausalLM": Family("radixrt.model.families.post_norm:Olmo2ForCausalLM", _olmo3),
    "Exaone4ForCausalLM": Family("radixrt.model.families.post_norm:Exaone4ForCausalLM", _exaone4),
    "Ernie4_5ForCausalLM": Family("radixrt.model.families.llama:LlamaForCausalLM", _ernie4_5),
    "SeedOssForCausalLM": Family("radixrt.model.families.llama:LlamaForCausalLM", _seed_oss),
}
