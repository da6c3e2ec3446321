"""Reading config.json per family: unknown architectures and fields that change the math but
are not implemented are refused by name, at parse and at load; defaults follow each family's
transformers config class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_families import FAMILIES, make_family

from radixrt import Engine
from radixrt.model.families.arch import ArchConfig

BASE = {"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32,
        "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}  # fmt: skip


def test_unknown_architecture_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'FooForCausalLM'.*supported"):
        ArchConfig.from_hf({**BASE, "architectures": ["FooForCausalLM"]})


@pytest.mark.parametrize(
    "arch, field, value",
    [
        ("LlamaForCausalLM", "attention_chunk_size", 8),
        ("LlamaForCausalLM", "qk_layernorm", True),
        ("LlamaForCausalLM", "quantization_config", {"quant_method": "awq"}),
        ("Qwen2ForCausalLM", "final_logit_softcapping", 30.0),
        ("Gemma3ForCausalLM", "use_bidirectional_attention", True),
        ("Gemma3ForCausalLM", "attn_logit_softcapping", 50.0),
        ("MistralForCausalLM", "num_local_experts", 8),
        ("CohereForCausalLM", "use_qk_norm", True),
    ],
)
def test_an_unimplemented_math_field_is_refused_by_name(arch: str, field: str, value) -> None:
    with pytest.raises(ValueError, match=field):
        ArchConfig.from_hf({**BASE, "architectures": [arch], field: value})


def test_off_and_metadata_fields_pass() -> None:
    cfg = {**BASE, "attention_chunk_size": None, "qk_layernorm": False, "_model_name": "x",
           "unsloth_fixed": True}  # fmt: skip
    assert ArchConfig.from_hf(cfg).num_hidden_layers == 2


def test_windows_follow_transformers() -> None:
    mistral = ArchConfig.from_hf({**BASE, "architectures": ["MistralForCausalLM"]})
    assert mistral.layer_windows == (4096, 4096)  # MistralConfig's default window
    off = ArchConfig.from_hf(
        {**BASE, "architectures": ["MistralForCausalLM"], "sliding_window": None}
    )
    assert off.layer_windows == (0, 0)
    qwen = {**BASE, "architectures": ["Qwen2ForCausalLM"], "sliding_window": 32}
    assert ArchConfig.from_hf(qwen).layer_windows == (0, 0)  # use_sliding_window is false
    qwen |= {"use_sliding_window": True, "max_window_layers": 1}
    assert ArchConfig.from_hf(qwen).layer_windows == (0, 32)
    gemma2 = ArchConfig.from_hf(
        {**BASE, "architectures": ["Gemma2ForCausalLM"], "num_hidden_layers": 4}
    )
    assert gemma2.layer_windows == (4096, 0, 4096, 0)
    gemma3 = {**BASE, "architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 7,
              "sliding_window": 512}  # fmt: skip
    assert ArchConfig.from_hf(gemma3).layer_windows == (512,) * 5 + (0, 512)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_tiny_family_parses_what_transformers_saved(name: str, tmp_path: Path,
                                                          smollm2_path: Path) -> None:  # fmt: skip
    folder = make_family(tmp_path, name, smollm2_path)
    arch = ArchConfig.from_hf(json.loads((folder / "config.json").read_text()))
    assert arch.num_hidden_layers == FAMILIES[name][1].get("num_hidden_layers", 3)
    assert arch.head_dim == 16


def test_glm4_rotates_adjacent_pairs_over_half_of_each_head() -> None:
    """GLM-4: interleaved rotary pairs; half of each head rotates where config.json names no
    partial_rotary_factor (Glm4Config's default), as much as it names otherwise; q/k/v
    biases by default, none on o_proj."""
    glm = {**BASE, "architectures": ["Glm4ForCausalLM"], "head_dim": 16}
    arch = ArchConfig.from_hf(glm)
    assert arch.rope_interleaved and arch.rotary_width == 8
    assert arch.attention_bias and not arch.o_proj_bias
    assert ArchConfig.from_hf({**glm, "partial_rotary_factor": 1.0}).rotary_width == 16
    assert not ArchConfig.from_hf(BASE).rope_interleaved


def test_cohere2_rotates_its_sliding_layers_only() -> None:
    """Cohere 2: a window on 3 of every 4 layers, which alone rotate (in adjacent pairs);
    without a window no layer rotates, as in transformers; LayerNorm eps and logit scale
    read from their own fields."""
    cohere2 = {**BASE, "architectures": ["Cohere2ForCausalLM"], "num_hidden_layers": 8,
               "sliding_window": 32, "layer_norm_eps": 1e-3, "logit_scale": 0.25}  # fmt: skip
    arch = ArchConfig.from_hf(cohere2)
    assert arch.layer_windows == (32, 32, 32, 0) * 2 and arch.rope_interleaved
    assert arch.rope_layers == (True, True, True, False) * 2
    assert arch.rms_norm_eps == 1e-3 and arch.options.logit_scale == 0.25  # type: ignore[attr-defined]
    assert not any(ArchConfig.from_hf({**cohere2, "sliding_window": None}).rope_layers)


def test_olmo3_exaone4_ernie_and_seed_oss_follow_their_config_classes() -> None:
    """OLMo 3: a window on 3 of every 4 layers, a rope per layer kind (rope_parameters by
    kind, or one set for both; rope_scaling for the full layers only). EXAONE 4: its pattern
    as a number or as letters (L local, G global), the global layers NoPE where a window is
    set. Gemma (1): the first releases' hidden_act "gelu" meant as tanh's, head_dim 256 by
    default. ERNIE 4.5 and Seed-OSS: head_dim 128 where config.json leaves it out."""
    olmo3 = {**BASE, "architectures": ["Olmo3ForCausalLM"], "num_hidden_layers": 4,
             "sliding_window": 32, "rope_theta": 10000.0,
             "rope_scaling": {"rope_type": "linear", "factor": 2.0}}  # fmt: skip
    arch = ArchConfig.from_hf(olmo3)
    assert arch.layer_windows == (32, 32, 32, 0)
    assert arch.rope_scaling == {"rope_type": "linear", "factor": 2.0}
    assert (arch.local_rope_theta, arch.local_rope_scaling) == (10000.0, None)
    same = {k: v for k, v in olmo3.items() if k != "rope_scaling"}
    assert ArchConfig.from_hf(same).local_rope_theta == 0.0  # one rope for both kinds
    exaone = {**BASE, "architectures": ["Exaone4ForCausalLM"], "num_hidden_layers": 4,
              "sliding_window": 32, "sliding_window_pattern": "LLLG"}  # fmt: skip
    arch = ArchConfig.from_hf(exaone)
    assert arch.layer_windows == (32, 32, 32, 0)
    assert arch.rope_layers == (True, True, True, False)
    plain = ArchConfig.from_hf({**exaone, "sliding_window": None})
    assert plain.layer_windows == (0,) * 4 and all(plain.rope_layers)
    gemma = ArchConfig.from_hf({**BASE, "architectures": ["GemmaForCausalLM"],
                                "hidden_act": "gelu", "hidden_activation": None})  # fmt: skip
    assert gemma.hidden_act == "gelu_pytorch_tanh" and gemma.head_dim == 256  # (as transformers)
    ernie = ArchConfig.from_hf({**BASE, "architectures": ["Ernie4_5ForCausalLM"]})
    assert ernie.head_dim == 128 and ernie.rotary_width == 128 and ernie.rope_interleaved
    seed = ArchConfig.from_hf({**BASE, "architectures": ["SeedOssForCausalLM"],
                               "attention_out_bias": True})  # fmt: skip
    assert seed.head_dim == 128 and seed.attention_bias and seed.o_proj_bias


def test_smollm3_nope_layers_follow_transformers() -> None:
    """SmolLM3-3B's config.json shape: NoPE every 4th layer as its no_rope_layers says (or
    its interval, where the list is left out), no window without use_sliding_window, and the
    Qwen2 leftover max_window_layers read past as transformers does; a list that does not
    name every layer is refused."""
    real = {**BASE, "architectures": ["SmolLM3ForCausalLM"], "num_hidden_layers": 8,
            "no_rope_layers": [1, 1, 1, 0] * 2, "no_rope_layer_interval": 4,
            "max_window_layers": 28, "pretraining_tp": 2, "use_sliding_window": False,
            "sliding_window": None, "rope_theta": 5000000.0}  # fmt: skip
    arch = ArchConfig.from_hf(real)
    assert arch.rope_layers == (True, True, True, False) * 2
    assert [arch.rotates(i) for i in (0, 3, 7)] == [True, False, False]
    assert arch.layer_windows == (0,) * 8 and arch.tie_word_embeddings
    assert arch.rope_theta == 5000000.0
    derived = {k: v for k, v in real.items() if k != "no_rope_layers"}
    derived["no_rope_layer_interval"] = 2
    assert ArchConfig.from_hf(derived).rope_layers == (True, False) * 4
    windowed = {**real, "use_sliding_window": True, "sliding_window": 64}
    assert ArchConfig.from_hf(windowed).layer_windows == (0, 0, 0, 64) * 2
    with pytest.raises(ValueError, match="no_rope_layers needs a 0 or 1"):
        ArchConfig.from_hf({**real, "no_rope_layers": [1, 0]})
    assert ArchConfig.from_hf(BASE).rope_layers == () and ArchConfig.from_hf(BASE).rotates(1)


def test_the_engine_refuses_at_load(tmp_path: Path, smollm2_path: Path) -> None:
    folder = make_family(tmp_path, "mistral", smollm2_path)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "attention_chunk_size": 8}))
    with pytest.raises(ValueError, match="attention_chunk_size"):
        Engine(str(folder), max_total_tokens=256)
    (folder / "config.json").write_text(json.dumps({**cfg, "rope_scaling": {"rope_type": "foo"}}))
    with pytest.raises(ValueError, match="rope type 'foo'"):
        Engine(str(folder), max_total_tokens=256)
