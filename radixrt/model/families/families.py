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

from radixrt.model.families import readers_llama as llama
from radixrt.model.families import readers_own_layer as own
from radixrt.model.families.config_reader import ConfigReader, check_layer_types, read_common


@dataclass(frozen=True, slots=True)
class Family:
    """One architecture: its nn.Module ("module:class") and its config reader, which returns
    ArchConfig's fields beyond the common ones read by `read_common`."""

    model: str
    read: Callable[[ConfigReader, dict[str, Any]], dict[str, Any]]
    head_dim: int | None = None  # its config class's default (None: hidden_size / heads)


def parse_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """ArchConfig's fields from config.json; ValueError names an unknown architecture, a
    missing field or a field that changes the math and is not implemented."""
    archs = cfg.get("architectures") or [cfg.get("model_type", "?")]
    arch = str(archs[0])
    family = FAMILIES.get(arch)
    if family is None:
        raise ValueError(f"unsupported model architecture {arch!r}; supported: {sorted(FAMILIES)}")
    r = ConfigReader(cfg, arch)
    fields = read_common(r, family.head_dim)
    fields.update(family.read(r, fields))
    check_layer_types(arch, fields)
    r.refuse_unread()
    return fields


# ----- the families (their readers: readers_llama.py, readers_own_layer.py)

_LLAMA = "radixrt.model.families.llama:LlamaForCausalLM"
_POST_NORM = "radixrt.model.families.post_norm:"

FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family(_LLAMA, llama.read_llama),
    "MistralForCausalLM": Family(_LLAMA, llama.read_mistral),
    "Qwen2ForCausalLM": Family(_LLAMA, llama.read_qwen2),
    "Qwen3ForCausalLM": Family("radixrt.model.families.qwen3:Qwen3ForCausalLM", llama.read_qwen3),
    "Qwen3MoeForCausalLM": Family(
        "radixrt.model.families.qwen3_moe:Qwen3MoeForCausalLM", llama.read_qwen3_moe
    ),
    "MixtralForCausalLM": Family(
        "radixrt.model.families.mixtral:MixtralForCausalLM", llama.read_mixtral
    ),
    "Phi3ForCausalLM": Family("radixrt.model.families.phi3:Phi3ForCausalLM", llama.read_phi3),
    "GraniteForCausalLM": Family(
        "radixrt.model.families.granite:GraniteForCausalLM", llama.read_granite
    ),
    "GraniteMoeForCausalLM": Family(
        "radixrt.model.families.granite:GraniteMoeForCausalLM", llama.read_granite_moe
    ),
    "SmolLM3ForCausalLM": Family(_LLAMA, llama.read_smollm3),
    "Ernie4_5ForCausalLM": Family(_LLAMA, llama.read_ernie4_5, head_dim=128),
    "SeedOssForCausalLM": Family(_LLAMA, llama.read_seed_oss, head_dim=128),
    "HeliumForCausalLM": Family(
        "radixrt.model.families.llama:HeliumForCausalLM", llama.read_helium, head_dim=128
    ),
    "GemmaForCausalLM": Family(
        "radixrt.model.families.gemma2:GemmaForCausalLM", own.read_gemma, head_dim=256
    ),
    "Gemma2ForCausalLM": Family("radixrt.model.families.gemma2:Gemma2ForCausalLM", own.read_gemma2),
    "Gemma3ForCausalLM": Family("radixrt.model.families.gemma3:Gemma3ForCausalLM", own.read_gemma3),
    "Olmo2ForCausalLM": Family(_POST_NORM + "Olmo2ForCausalLM", own.read_olmo2),
    "Olmo3ForCausalLM": Family(_POST_NORM + "Olmo2ForCausalLM", own.read_olmo3),
    "Exaone4ForCausalLM": Family(_POST_NORM + "Exaone4ForCausalLM", own.read_exaone4),
    "Glm4ForCausalLM": Family("radixrt.model.families.glm4:Glm4ForCausalLM", own.read_glm4),
    "CohereForCausalLM": Family("radixrt.model.families.cohere:CohereForCausalLM", own.read_cohere),
    "Cohere2ForCausalLM": Family(
        "radixrt.model.families.cohere:CohereForCausalLM", own.read_cohere2
    ),
}
