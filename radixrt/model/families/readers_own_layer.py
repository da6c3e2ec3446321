"""config.json readers of the families with decoder layers of their own: Gemma 1, 2 and 3,
OLMo 2 and 3, EXAONE 4, GLM-4, Cohere and Cohere 2. Each returns ArchConfig's fields beyond
read_common's, its defaults those of the family's transformers config class (families.py
registers them)."""

from __future__ import annotations

from typing import Any

from radixrt.model.families.config_reader import (
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    CohereOptions,
    ConfigReader,
    GemmaOptions,
    biases,
    norm_and_tail,
    refuse_if,
    rope_fields,
    rope_from,
    scaling_of,
    window_all,
    window_by_types,
)


def _ropes_by_kind(
    r: ConfigReader, theta: float, local_theta: float | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The full and the sliding layers' rope parameters: `rope_parameters` per layer kind
    (or one set for both), the v4 rope_scaling applying to the full layers only; the v4
    rope_theta (`theta` where unset) for both, or `local_theta` for the sliding layers."""
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
    local.setdefault("rope_theta", full["rope_theta"] if local_theta is None else local_theta)
    return full, local


def _local_rope(full: dict[str, Any], local: dict[str, Any]) -> dict[str, Any]:
    """The sliding layers' own rope, where it differs from the full layers'."""
    if scaling_of(local) == scaling_of(full) and local["rope_theta"] == full["rope_theta"]:
        return {}
    return {"local_rope_theta": float(local["rope_theta"]), "local_rope_scaling": scaling_of(local)}


def read_gemma(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    refuse_if(r, "use_bidirectional_attention", bool(r.get("use_bidirectional_attention")),
               "bidirectional attention is not implemented")  # fmt: skip
    tail = norm_and_tail(r, 1e-6, True, 8192, "gelu_pytorch_tanh")
    if tail["hidden_act"] == "gelu":  # the first releases' legacy value, meant as tanh's
        tail["hidden_act"] = "gelu_pytorch_tanh"
    r.get("hidden_activation")  # a leftover of those releases; transformers reads hidden_act
    return {
        **rope_fields(r, f, 10000.0),
        **tail,
        **biases(bias, bias),
        **window_all(r, f, None),
    }


def read_gemma2(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
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


def read_gemma3(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    refuse_if(r, "use_bidirectional_attention", bool(r.get("use_bidirectional_attention")),
               "bidirectional attention is not implemented")  # fmt: skip
    refuse_if(r, "attn_logit_softcapping", bool(r.get("attn_logit_softcapping")),
               "Gemma 3 has no attention softcap (transformers ignores it too)")  # fmt: skip
    full, local = _ropes_by_kind(r, 1000000.0, r.value("rope_local_base_freq", 10000.0))
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
        **_local_rope(full, local),
    }


def read_olmo2(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    return {
        **rope_fields(r, f, 10000.0),
        **norm_and_tail(r, 1e-5, False, 2048),
        **biases(bias, bias),
        **window_all(r, f, None),
    }


def read_glm4(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
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


def read_cohere(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    refuse_if(r, "use_qk_norm", bool(r.get("use_qk_norm")),
              "per-head q/k LayerNorms (Command R+) are not implemented")  # fmt: skip
    return {**_cohere_common(r, f, 8192), **window_all(r, f, None)}


def read_cohere2(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
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


def read_olmo3(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
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


def read_exaone4(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    window = r.get("sliding_window", 4096)
    pattern = r.value("sliding_window_pattern", 4)

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
