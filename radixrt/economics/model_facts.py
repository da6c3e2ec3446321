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
from radixrt.models.arch import ArchConfig

# GGUF general.architecture -> the HF architecture whose config.json fields it maps onto.
GGUF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
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

    @classmethod
    def from_arch(
        cls, arch: ArchConfig, name: str, source: str, num_params: int | None = None
    ) -> ModelFacts:
        """Facts of a parsed config; `num_params` None: counted from the shapes."""
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
    return {
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
    """Parameters of a Llama-family decoder: embeddings, per-layer attention (with Qwen2's q/k/v
    biases) and gated MLP, two norms per layer, the final norm, and lm_head unless tied."""
    h = arch.hidden_size
    q_dim = arch.num_attention_heads * arch.head_dim
    kv_dim = arch.num_key_value_heads * arch.head_dim
    attn = h * q_dim + 2 * h * kv_dim + q_dim * h
    if arch.attention_bias:
        attn += q_dim + 2 * kv_dim
    if arch.o_proj_bias:
        attn += h
    mlp = 3 * h * arch.intermediate_size
    if arch.mlp_bias:
        mlp += 2 * arch.intermediate_size + h
    layer = attn + mlp + 2 * h
    embed = arch.vocab_size * h * (1 if arch.tie_word_embeddings else 2)
    return embed + arch.num_hidden_layers * layer + h


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
