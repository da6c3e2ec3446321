"""Reading a checkpoint's config.json (torch-free): the reader that remembers which fields
were read and refuses the unread ones that change the math (MATH_FIELDS), the value types a
family's fields become (MoEConfig, the family options), and the pieces every family's reader
is made of (rope, norms, biases, windows). The families themselves are in families.py."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("radixrt")

FULL_ATTENTION, SLIDING_ATTENTION = "full_attention", "sliding_attention"

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


@dataclass(frozen=True, slots=True)
class GraniteOptions(FamilyOptions):
    embedding_multiplier: float
    residual_multiplier: float
    attention_multiplier: float  # the attention scaling itself
    logits_scaling: float  # logits are divided by it


@dataclass(frozen=True, slots=True)
class CohereOptions(FamilyOptions):
    logit_scale: float  # logits are multiplied by it


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
        unread = sorted(k for k, v in self.cfg.items() if k not in self.read and not is_off(v))
        bad = [k for k in unread if k in MATH_FIELDS]
        if unread and not bad:
            logger.debug("%s: config.json fields left unread: %s", self.architecture, unread)
        if bad:
            shown = ", ".join(f"{k}={self.cfg[k]!r}"[:80] for k in bad)
            raise ValueError(
                f"{self.architecture}: config.json sets {shown}, which radixrt does not "
                "implement for this family; refusing to run the model without it"
            )


def read_common(r: ConfigReader, head_dim: int | None = None) -> dict[str, Any]:
    """The shape every family has; rope and windows are read by the family. `head_dim`: the
    family's default where config.json leaves it out (None: hidden_size / heads)."""
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
        "head_dim": int(r.value("head_dim", head_dim or hidden // heads)),
    }


def rope_fields(r: ConfigReader, fields: dict[str, Any], default_theta: float) -> dict[str, Any]:
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


def norm_and_tail(
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


def biases(qkv: bool, o: bool, mlp: bool = False) -> dict[str, Any]:
    return {"attention_bias": qkv, "o_proj_bias": o, "mlp_bias": mlp}


def window_all(r: ConfigReader, fields: dict[str, Any], window: Any) -> dict[str, Any]:
    """Every layer slides over `window` keys (None or 0: none)."""
    n = fields["num_hidden_layers"]
    if not window:
        return {"sliding_window": 0, "layer_types": (FULL_ATTENTION,) * n}
    return {"sliding_window": int(window), "layer_types": (SLIDING_ATTENTION,) * n}


def window_by_types(
    r: ConfigReader, fields: dict[str, Any], window: Any, default_types: Callable[[int], str]
) -> dict[str, Any]:
    """config.json's `layer_types`, else `default_types(i)` per layer; the window applies
    to the sliding layers (None or 0: none, though the types may still pick a rope)."""
    n = fields["num_hidden_layers"]
    types = r.get("layer_types") or [default_types(i) for i in range(n)]
    return {"sliding_window": int(window or 0), "layer_types": tuple(str(t) for t in types)}


def nope_layers(r: ConfigReader, fields: dict[str, Any], interval: int) -> dict[str, Any]:
    """`rope_layers` from `no_rope_layers` (per layer 1: rotates, 0: NoPE; at least one entry
    per layer), else a NoPE layer every `no_rope_layer_interval` layers (the last of each)."""
    n = fields["num_hidden_layers"]
    given = r.get("no_rope_layers")
    every = int(r.value("no_rope_layer_interval", interval))
    if not given:
        if every < 1:
            raise ValueError(f"{r.architecture}: no_rope_layer_interval must be >= 1")
        given = [int((i + 1) % every != 0) for i in range(n)]
    if len(given) < n or any(x not in (0, 1) for x in given):
        raise ValueError(
            f"{r.architecture}: no_rope_layers needs a 0 or 1 for each of the {n} layers"
        )
    return {"rope_layers": tuple(bool(x) for x in given[:n])}


def check_layer_types(arch: str, fields: dict[str, Any]) -> None:
    types = fields["layer_types"]
    unknown = sorted(set(types) - {FULL_ATTENTION, SLIDING_ATTENTION})
    if unknown:
        raise ValueError(f"{arch}: layer_types {unknown} are not implemented")
    if len(types) != fields["num_hidden_layers"]:
        raise ValueError(
            f"{arch}: layer_types has {len(types)} entries for {fields['num_hidden_layers']} layers"
        )


def refuse_if(r: ConfigReader, key: str, bad: bool, why: str) -> None:
    if bad:
        raise ValueError(f"{r.architecture}: config.json field {key!r} = {r.cfg.get(key)!r}: {why}")


def rope_from(params: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
    return {
        "rope_theta": float(params["rope_theta"]),
        "rope_scaling": scaling_of(params),
        "rotary_dim": int(f["head_dim"] * float(params.get("partial_rotary_factor") or 1.0)),
    }


def scaling_of(params: dict[str, Any]) -> dict[str, Any] | None:
    if params.get("rope_type", params.get("type", "default")) == "default":
        return None
    return {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}


def is_off(value: Any) -> bool:
    return value is None or value is False or value == 0 or value in ("", [], {})
