"""ModelFacts: the shape numbers that size a model's weights and KV cache, from a Hugging Face
folder (config.json, plus safetensors headers for the exact parameter count), a .gguf file's
header, or a bundled preset (presets/*.json, each naming the config.json it copies)."""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from radixrt.economics.data import PRESET_DIR, preset_names, read_data
from radixrt.economics.gguf_header import read_gguf_header
from radixrt.model.families.arch import ArchConfig

# What a family's decoder layer holds beyond the Llama layer (radixrt/model/families/<family>.py):
# its norms of hidden size (Llama's two: before attention and before the MLP), and its q/k
# norms: "head" (head_dim weights each, shared by the heads) or "full" (over the whole q and k
# projections). A test counts every family's parameters against transformers'.
_HIDDEN_NORMS = {
    "Gemma2ForCausalLM": 4,
    "Gemma3ForCausalLM": 4,
    "Glm4ForCausalLM": 4,
    "CohereForCausalLM": 1,
    "Cohere2ForCausalLM": 1,
}
_QK_NORMS = {
    "Qwen3ForCausalLM": "head",
    "Qwen3MoeForCausalLM": "head",
    "Gemma3ForCausalLM": "head",
    "Olmo2ForCausalLM": "full",
    "Olmo3ForCausalLM": "full",
    "Exaone4ForCausalLM": "head",
}

# GGUF general.architecture -> the HF architecture whose config.json fields it maps onto.
GGUF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
}
# GGUF `<arch>.*` keys -> config.json fields, where a header has them (the window; Gemma's
# layers then alternate as the family's transformers config lays them out by default).
_GGUF_OPTIONAL = {
    "attention.sliding_window": "sliding_window",
    "attn_logit_softcapping": "attn_logit_softcapping",
    "final_logit_softcapping": "final_logit_softcapping",
}


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What sizing needs to know about a model; `source` says where the numbers came from."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    num_params: int
    source: str
    sliding_window: int = 0  # keys a window layer's query sees; 0: no window layers
    num_window_layers: int = 0  # layers that see only the last `sliding_window` keys

    @property
    def num_full_layers(self) -> int:
        """Layers that keep every token's K/V."""
        return self.num_layers - self.num_window_layers

    @classmethod
    def from_arch(
        cls, arch: ArchConfig, name: str, source: str, num_params: int | None = None
    ) -> ModelFacts:
        """Facts of a parsed config; `num_params` None: counted from the shapes."""
        num_window_layers = sum(1 for w in arch.layer_windows if w)
        return cls(
            name=name,
            num_layers=arch.num_hidden_layers,
            hidden_size=arch.hidden_size,
            num_heads=arch.num_attention_heads,
            num_kv_heads=arch.num_key_value_heads,
            head_dim=arch.head_dim,
            vocab_size=arch.vocab_size,
            num_params=count_params(arch) if num_params is None else num_params,
            source=source,
            sliding_window=arch.sliding_window if num_window_layers else 0,
            num_window_layers=num_window_layers,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_facts(model_path: str | None = None, preset: str | None = None) -> ModelFacts:
    """Facts from exactly one of a model folder, a .gguf file or a preset name."""
    if (model_path is None) == (preset is None):
        raise ValueError("give exactly one of a model path and a preset")
    if preset is not None:
        return facts_from_preset(preset)
    path = Path(model_path).expanduser()  # type: ignore[arg-type]
    if path.is_dir():
        return facts_from_folder(path)
    if path.suffix == ".gguf" and path.is_file():
        return facts_from_gguf(path)
    raise ValueError(f"{model_path}: expected a folder with config.json or a .gguf file")


def facts_from_preset(name: str) -> ModelFacts:
    """A bundled preset (presets/<name>.json); ValueError lists the known names."""
    names = preset_names()
    if name not in names:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(names)}")
    data = read_data(f"{PRESET_DIR}/{name}.json")
    arch = ArchConfig.from_hf(data["config"])
    return ModelFacts.from_arch(arch, name, f"preset ({data['source']})", int(data["num_params"]))


def facts_from_folder(folder: Path, exact_params: bool = True) -> ModelFacts:
    """config.json of a Hugging Face folder; parameters counted from its safetensors headers
    when it has any and `exact_params` (else from the config's shapes: KV sizes do not need
    them, and a server's start-up need not open every shard)."""
    config = folder / "config.json"
    if not config.is_file():
        raise ValueError(f"{folder} has no config.json")
    arch = ArchConfig.from_hf(json.loads(config.read_text()))
    shards = sorted(folder.glob("*.safetensors")) if exact_params else []
    num_params = sum(safetensors_num_params(p) for p in shards) if shards else None
    how = "safetensors headers" if shards else "counted from config.json"
    return ModelFacts.from_arch(arch, folder.name, f"{config} (parameters: {how})", num_params)


def facts_from_gguf(path: Path) -> ModelFacts:
    """A .gguf file's metadata; parameters are its tensors' element counts."""
    header = read_gguf_header(path)
    arch = ArchConfig.from_hf(gguf_to_hf_config(header.metadata))
    return ModelFacts.from_arch(arch, path.stem, f"{path} (GGUF header)", header.num_params)


def gguf_to_hf_config(md: dict[str, Any]) -> dict[str, Any]:
    """The config.json fields a GGUF header's `<arch>.*` keys stand for."""
    arch = str(md.get("general.architecture", ""))
    if arch not in GGUF_ARCHITECTURES:
        raise ValueError(
            f"GGUF architecture {arch!r} is not supported; supported: {sorted(GGUF_ARCHITECTURES)}"
        )

    def key(name: str, default: Any = None) -> Any:
        value = md.get(f"{arch}.{name}", default)
        if value is None:
            raise ValueError(f"GGUF header lacks {arch}.{name}")
        return max(value) if isinstance(value, list) else value  # per-layer lists: the largest

    heads = key("attention.head_count")
    hidden = key("embedding_length")
    vocab = md.get(f"{arch}.vocab_size") or len(md.get("tokenizer.ggml.tokens") or [])
    optional = {
        field: md[f"{arch}.{k}"] for k, field in _GGUF_OPTIONAL.items() if f"{arch}.{k}" in md
    }
    if arch == "mistral" and "sliding_window" not in optional:
        optional["sliding_window"] = None  # a GGUF without one has none
    return {
        **optional,
        "architectures": [GGUF_ARCHITECTURES[arch]],
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": key("feed_forward_length"),
        "num_hidden_layers": key("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": key("attention.head_count_kv", heads),
        "head_dim": key("attention.key_length", hidden // heads),
        "max_position_embeddings": key("context_length", 4096),
    }


def count_params(arch: ArchConfig) -> int:
    """Parameters of a decoder of any family radixrt runs: embeddings; per layer the attention
    (with its biases and q/k norms), the MLP (dense, or every expert plus the router) and the
    family's norms; the final norm; lm_head unless tied."""
    h = arch.hidden_size
    per_layer = _attention_params(arch) + h * _HIDDEN_NORMS.get(arch.architecture, 2)
    mlps = sum(_mlp_params(arch, i) for i in range(arch.num_hidden_layers))
    embed = arch.vocab_size * h * (1 if arch.tie_word_embeddings else 2)
    return embed + arch.num_hidden_layers * per_layer + mlps + h


def _attention_params(arch: ArchConfig) -> int:
    """q, k, v, o projections with their biases, and the q/k norms."""
    h, d = arch.hidden_size, arch.head_dim
    q_dim, kv_dim = arch.num_attention_heads * d, arch.num_key_value_heads * d
    n = 2 * h * q_dim + 2 * h * kv_dim
    if arch.attention_bias:
        n += q_dim + 2 * kv_dim
    if arch.o_proj_bias:
        n += h
    qk_norm = _QK_NORMS.get(arch.architecture)
    if qk_norm == "head":
        n += 2 * d
    elif qk_norm == "full":
        n += q_dim + kv_dim
    return n


def _mlp_params(arch: ArchConfig, layer_idx: int) -> int:
    """Layer `layer_idx`'s gated MLP, or its experts (no biases) and their router."""
    h, moe = arch.hidden_size, arch.moe
    if moe is not None and moe.sparse_layers[layer_idx]:
        return moe.num_experts * (3 * h * moe.intermediate_size + h)
    n = 3 * h * arch.intermediate_size
    if arch.mlp_bias:
        n += 2 * arch.intermediate_size + h
    return n


def safetensors_num_params(path: Path) -> int:
    """Elements over the tensors of one .safetensors file, from its JSON header only."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    total = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        n = 1
        for d in info["shape"]:
            n *= int(d)
        total += n
    return total
