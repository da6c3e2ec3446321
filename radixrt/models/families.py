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

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("radixrt")

FULL_ATTENTION, SLIDING_ATTENTION = "full_attention", "sliding_attention"

# Fields that change a decoder's math in the transformers families radixrt runs or their
# close relatives. A family that does not read one refuses it unless it is off.
MATH_FIELDS = frozenset({
    # shape, norms, activations, biases
    "head_dim", "hidden_act", "hidden_activation", "rms_norm_eps", "layer_norm_eps",
    "layer_norm_epsilon", "norm_eps", "attention_bias", "mlp_bias", "bias", "qkv_bias",
    "tie_word_embeddings", "parallel_attn", "use_parallel_residual", "use_post_norm",
    "norm_type", "clip_qkv", "qk_layernorm", "use_qk_norm", "qk_norm",
    # positions and attention
    "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor", "rotary_pct",
    "rotary_emb_base", "rope_local_base_freq", "position_embedding_type", "alibi",
    "no_rope_layers", "no_rope_layer_interval", "use_mrope", "mrope_section",
    "sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
    "attention_chunk_size", "use_bidirectional_attention", "attn_logit_softcapping",
    "final_logit_softcapping", "query_pre_attn_scalar", "attention_multiplier",
    "attention_sink", "sinks", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
    "qk_nope_head_dim", "v_head_dim", "num_kv_shared_layers",
    # scales
    "embedding_multiplier", "residual_multiplier", "logits_scaling", "logit_scale",
    "scale_embedding", "embed_scale", "mup_width_multiplier", "scale_depth", "dim_model_base",
    # mixture of experts
    "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "n_shared_experts", "norm_topk_prob",
    "decoder_sparse_step", "mlp_only_layers", "first_k_dense_replace", "moe_layer_freq",
    "routed_scaling_factor", "scoring_func", "topk_method", "n_group", "topk_group",
    "swiglu_limit",
    # weights stored other than dense
    "quantization_config", "compression_config",
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class MoEConfig:
    """A sparse MLP: each token's hidden state goes to `top_k` of `num_experts` gated MLPs of
    width `intermediate_size`, weighted by the router's softmax (renormalised over the top k
    when `norm_topk_prob`). `sparse_layers[i]`: layer i has this block (else a dense MLP)."""

    num_experts: int
    top_k: int
    intermediate_size: int
    norm_topk_prob: bool
    sparse_layers: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class FamilyOptions:
    """A family's own config fields; families with none use this empty base."""


@dataclass(frozen=True, slots=True)
class GemmaOptions(FamilyOptions):
    query_pre_attn_scalar: float  # attention scaling is its -0.5 power
    attn_logit_softcapping: float  # 0: off
    final_logit_softcapping: float  # 0: off
    # The sliding layers' rope (Gemma 3); theta 0: the same rope as the full layers.
    local_rope_theta: float = 0.0
    local_rope_scaling: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class GraniteOptions(FamilyOptions):
    embedding_multiplier: float
    residual_multiplier: float
    attention_multiplier: float  # the attention scaling itself
    logits_scaling: float  # logits are divided by it


class ConfigReader:
    """config.json of one checkpoint; remembers which fields were read."""

    def __init__(self, cfg: dict[str, Any], architecture: str) -> None:
        self.cfg, self.architecture = cfg, architecture
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        """The field's value (null included), or `default` when config.json leaves it out."""
        self.read.add(key)
        return self.cfg.get(key, default)

    def value(self, key: str, default: Any = None) -> Any:
        """The field's value, `default` when left out or null."""
        value = self.get(key)
        return default if value is None else value

    def need(self, key: str) -> Any:
        self.read.add(key)
        if self.cfg.get(key) is None:
            raise ValueError(f"config.json of {self.architecture} lacks the field {key!r}")
        return self.cfg[key]

    def refuse_unread(self) -> None:
        """ValueError naming every unread MATH_FIELDS field that is not off."""
        unread = sorted(k for k, v in self.cfg.items() if k not in self.read and not _is_off(v))
        bad = [k for k in unread if k in MATH_FIELDS]
        if unread and not bad:
            logger.debug("%s: config.json fields left unread: %s", self.architecture, unread)
        if bad:
            shown = ", ".join(f"{k}={self.cfg[k]!r}"[:80] for k in bad)
            raise ValueError(
                f"{self.architecture}: config.json sets {shown}, which radixrt does not "
                "implement for this family; refusing to run the model without it"
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
    _check_layer_types(arch, fields)
    r.refuse_unread()
    return fields


def read_common(r: ConfigReader) -> dict[str, Any]:
    """The shape every family has; rope and windows are read by the family."""
    heads = int(r.need("num_attention_heads"))
    hidden = int(r.need("hidden_size"))
    return {
        "architecture": r.architecture,
        "vocab_size": int(r.need("vocab_size")),
        "hidden_size": hidden,
        "intermediate_size": int(r.need("intermediate_size")),
        "num_hidden_layers": int(r.need("num_hidden_layers")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(r.value("num_key_value_heads", heads)),
        "head_dim": int(r.value("head_dim", hidden // heads)),
    }


# ----- pieces the families share


def _rope(r: ConfigReader, fields: dict[str, Any], default_theta: float) -> dict[str, Any]:
    """rope_theta, rope_scaling and rotary_dim from the v4 fields (rope_theta, rope_scaling,
    partial_rotary_factor) or the v5 `rope_parameters`."""
    params = dict(r.get("rope_parameters") or {})
    scaling = r.get("rope_scaling")
    theta = float(r.get("rope_theta") or params.get("rope_theta") or default_theta)
    merged = dict(scaling) if scaling else (
        params if params.get("rope_type", "default") != "default" else None
    )  # fmt: skip
    factor = float(r.get("partial_rotary_factor") or params.get("partial_rotary_factor") or 1.0)
    old = r.get("original_max_position_embeddings")  # Phi-3 keeps it beside the rope fields
    if merged is not None:
        merged.pop("rope_theta", None)
        merged.pop("partial_rotary_factor", None)
        if old is not None:
            merged.setdefault("original_max_position_embeddings", old)
    return {
        "rope_theta": theta,
        "rope_scaling": merged,
        "rotary_dim": int(fields["head_dim"] * factor),
    }


def _norm_and_tail(
    r: ConfigReader,
    eps: float,
    tie: bool,
    max_pos: int,
    act: str = "silu",
    act_key: str = "hidden_act",
) -> dict[str, Any]:
    return {
        "rms_norm_eps": float(r.value("rms_norm_eps", eps)),
        "tie_word_embeddings": bool(r.value("tie_word_embeddings", tie)),
        "max_position_embeddings": int(r.value("max_position_embeddings", max_pos)),
        "hidden_act": str(r.value(act_key, act)),
    }


def _biases(qkv: bool, o: bool, mlp: bool = False) -> dict[str, Any]:
    return {"attention_bias": qkv, "o_proj_bias": o, "mlp_bias": mlp}


def _window_all(r: ConfigReader, fields: dict[str, Any], window: Any) -> dict[str, Any]:
    """Every layer slides over `window` keys (None or 0: none)."""
    n = fields["num_hidden_layers"]
    if not window:
        return {"sliding_window": 0, "layer_types": (FULL_ATTENTION,) * n}
    return {"sliding_window": int(window), "layer_types": (SLIDING_ATTENTION,) * n}


def _window_by_types(
    r: ConfigReader, fields: dict[str, Any], window: Any, default_types: Callable[[int], str]
) -> dict[str, Any]:
    """config.json's `layer_types`, else `default_types(i)` per layer; the window applies
    to the sliding layers (None or 0: none, though the types may still pick a rope)."""
    n = fields["num_hidden_layers"]
    types = r.get("layer_types") or [default_types(i) for i in range(n)]
    return {"sliding_window": int(window or 0), "layer_types": tuple(str(t) for t in types)}


def _qwen_window(r: ConfigReader, fields: dict[str, Any]) -> dict[str, Any]:
    window = _qwen_window_size(r)
    first = int(r.value("max_window_layers", 28))
    return _window_by_types(
        r, fields, window, lambda i: SLIDING_ATTENTION if i >= first else FULL_ATTENTION
    )


def _qwen_window_size(r: ConfigReader) -> Any:
    """Qwen's window counts only with use_sliding_window (checkpoints carry one regardless)."""
    window = r.get("sliding_window")
    return window if r.value("use_sliding_window", False) else None


def _check_layer_types(arch: str, fields: dict[str, Any]) -> None:
    types = fields["layer_types"]
    unknown = sorted(set(types) - {FULL_ATTENTION, SLIDING_ATTENTION})
    if unknown:
        raise ValueError(f"{arch}: layer_types {unknown} are not implemented")
    if len(types) != fields["num_hidden_layers"]:
        raise ValueError(
            f"{arch}: layer_types has {len(types)} entries for {fields['num_hidden_layers']} layers"
        )


def _refuse_if(r: ConfigReader, key: str, bad: bool, why: str) -> None:
    if bad:
        raise ValueError(f"{r.architecture}: config.json field {key!r} = {r.cfg.get(key)!r}: {why}")


# ----- the families (defaults: each family's transformers config class)


def _llama(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    return {
        **_rope(r, f, 10000.0),
        **_norm_and_tail(r, 1e-6, False, 2048),
        **_biases(bias, bias, bool(r.value("mlp_bias", False))),
        **_window_all(r, f, None),
    }


def _mistral(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    return {
        **_rope(r, f, 10000.0),
        **_norm_and_tail(r, 1e-6, False, 131072),
        **_biases(False, False),
        **_window_all(r, f, r.get("sliding_window", 4096)),
    }


def _qwen2(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    return {
        **_rope(r, f, 10000.0),
        **_norm_and_tail(r, 1e-6, False, 32768),
        **_biases(True, False),
        **_qwen_window(r, f),
    }


def _qwen3(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    return {
        **_rope(r, f, 10000.0),
        **_norm_and_tail(r, 1e-6, False, 32768),
        **_biases(bias, bias),
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
        **_rope(r, f, 10000.0),
        **_norm_and_tail(r, 1e-6, False, 32768),
        **_biases(bias, bias),
        **_window_all(r, f, window),
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
        **_rope(r, f, 1000000.0),
        **_norm_and_tail(r, 1e-5, False, 131072),
        **_biases(False, False),
        **_window_all(r, f, r.get("sliding_window")),
        "moe": moe,
    }


def _gemma2(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    _refuse_if(r, "use_bidirectional_attention", bool(r.get("use_bidirectional_attention")),
               "bidirectional attention is not implemented")  # fmt: skip
    r.get("hidden_act")  # transformers reads hidden_activation; hidden_act is a leftover
    return {
        **_rope(r, f, 10000.0),
        **_norm_and_tail(r, 1e-6, True, 8192, "gelu_pytorch_tanh", "hidden_activation"),
        **_biases(bias, bias),
        **_window_by_types(
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
    _refuse_if(r, "use_bidirectional_attention", bool(r.get("use_bidirectional_attention")),
               "bidirectional attention is not implemented")  # fmt: skip
    _refuse_if(r, "attn_logit_softcapping", bool(r.get("attn_logit_softcapping")),
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
        **_rope_from(full, f),
        **_norm_and_tail(r, 1e-6, True, 131072, "gelu_pytorch_tanh", "hidden_activation"),
        **_biases(bias, bias),
        **_window_by_types(
            r,
            f,
            r.get("sliding_window", 4096),
            lambda i: SLIDING_ATTENTION if (i + 1) % pattern else FULL_ATTENTION,
        ),  # fmt: skip
        "options": GemmaOptions(
            query_pre_attn_scalar=float(r.value("query_pre_attn_scalar", 256)),
            attn_logit_softcapping=0.0,
            final_logit_softcapping=float(r.get("final_logit_softcapping") or 0.0),
            local_rope_theta=float(local["rope_theta"]),
            local_rope_scaling=_scaling_of(local),
        ),
    }


def _rope_from(params: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
    return {
        "rope_theta": float(params["rope_theta"]),
        "rope_scaling": _scaling_of(params),
        "rotary_dim": int(f["head_dim"] * float(params.get("partial_rotary_factor") or 1.0)),
    }


def _scaling_of(params: dict[str, Any]) -> dict[str, Any] | None:
    if params.get("rope_type", params.get("type", "default")) == "default":
        return None
    return {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}


def _phi3(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    return {
        **_rope(r, f, 10000.0),
        **_norm_and_tail(r, 1e-5, False, 4096),
        **_biases(False, False),
        **_window_all(r, f, r.get("sliding_window")),
    }


def _olmo2(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    return {
        **_rope(r, f, 10000.0),
        **_norm_and_tail(r, 1e-5, False, 2048),
        **_biases(bias, bias),
        **_window_all(r, f, None),
    }


def _granite(r: ConfigReader, f: dict[str, Any]) -> dict[str, Any]:
    bias = bool(r.value("attention_bias", False))
    return {
        **_rope(r, f, 10000.0),
        **_norm_and_tail(r, 1e-6, False, 2048),
        **_biases(bias, bias, bool(r.value("mlp_bias", False))),
        **_window_all(r, f, None),
        "options": GraniteOptions(
            embedding_multiplier=float(r.value("embedding_multiplier", 1.0)),
            residual_multiplier=float(r.value("residual_multiplier", 1.0)),
            attention_multiplier=float(r.value("attention_multiplier", 1.0)),
            logits_scaling=float(r.value("logits_scaling", 1.0)),
        ),
    }


FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family("radixrt.models.llama:LlamaForCausalLM", _llama),
    "MistralForCausalLM": Family("radixrt.models.llama:LlamaForCausalLM", _mistral),
    "Qwen2ForCausalLM": Family("radixrt.models.llama:LlamaForCausalLM", _qwen2),
    "Qwen3ForCausalLM": Family("radixrt.models.qwen3:Qwen3ForCausalLM", _qwen3),
    "Qwen3MoeForCausalLM": Family("radixrt.models.qwen3_moe:Qwen3MoeForCausalLM", _qwen3_moe),
    "MixtralForCausalLM": Family("radixrt.models.mixtral:MixtralForCausalLM", _mixtral),
    "Gemma2ForCausalLM": Family("radixrt.models.gemma2:Gemma2ForCausalLM", _gemma2),
    "Gemma3ForCausalLM": Family("radixrt.models.gemma3:Gemma3ForCausalLM", _gemma3),
    "Phi3ForCausalLM": Family("radixrt.models.phi3:Phi3ForCausalLM", _phi3),
    "Olmo2ForCausalLM": Family("radixrt.models.olmo2:Olmo2ForCausalLM", _olmo2),
    "GraniteForCausalLM": Family("radixrt.models.granite:GraniteForCausalLM", _granite),
}


def _is_off(value: Any) -> bool:
    return value is None or value is False or value == 0 or value in ("", [], {})
