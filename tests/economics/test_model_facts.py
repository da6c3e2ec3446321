"""Model facts from presets, Hugging Face folders and GGUF headers."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from radixrt.economics.data import preset_names, read_data
from radixrt.economics.gguf_header import read_gguf_header
from radixrt.economics.model_facts import (
    ModelFacts,
    count_params,
    facts_from_folder,
    facts_from_gguf,
    facts_from_preset,
    load_facts,
)
from radixrt.model.families.arch import ArchConfig

PRESETS = {
    "llama-3-8b", "llama-3-70b", "llama-3-405b", "qwen2-7b", "qwen2-72b", "mistral-7b",
    "smollm2-135m", "smollm2-360m", "smollm2-1.7b", "gemma3-270m",
}  # fmt: skip


def test_every_preset_names_its_source_and_counts_its_parameters() -> None:
    assert set(preset_names()) == PRESETS
    for name in PRESETS:
        data = read_data(f"presets/{name}.json")
        assert data["source"].startswith("https://huggingface.co/") and data["checked"]
        assert data["note"]
        # the stored count is the one the config's shapes give
        assert count_params(ArchConfig.from_hf(data["config"])) == data["num_params"], name


def test_published_parameter_counts() -> None:
    billions = {n: round(facts_from_preset(n).num_params / 1e9, 2) for n in PRESETS}
    assert billions["llama-3-8b"] == 8.03 and billions["llama-3-70b"] == 70.55
    assert billions["llama-3-405b"] == 405.85 and billions["qwen2-72b"] == 72.71
    assert facts_from_preset("smollm2-135m").num_params == 134_515_008
    # Gemma 3 270M: 262,144 x 640 tied embeddings and 18 layers of 5.57 M
    assert facts_from_preset("gemma3-270m").num_params == 262144 * 640 + 18 * 5_573_632 + 640


def _tiny_configs() -> list[tuple[str, object]]:
    """Every tiny family's transformers config, and variants with the biases it may carry."""
    import transformers
    from tiny_families import _COMMON, FAMILIES

    variants = {
        **FAMILIES,
        "llama-biases": ("LlamaConfig", {"attention_bias": True, "mlp_bias": True}),
        "granite-biases": ("GraniteConfig", {"attention_bias": True, "mlp_bias": True}),
        "gemma3-bias": ("Gemma3TextConfig", {**FAMILIES["gemma3"][1], "attention_bias": True}),
        "qwen3-moe-step": ("Qwen3MoeConfig", {**FAMILIES["qwen3-moe"][1],
                                              "decoder_sparse_step": 2, "mlp_only_layers": []}),
    }  # fmt: skip
    return [
        (name, getattr(transformers, cls)(**{**_COMMON, **overrides}))
        for name, (cls, overrides) in variants.items()
    ]


def test_count_params_matches_transformers_for_every_family() -> None:
    """count_params of each tiny family's config.json equals the parameters of transformers'
    own model of it (tied embeddings counted once)."""
    import torch
    from transformers import AutoModelForCausalLM

    from radixrt.model.families.families import FAMILIES

    seen = set()
    for name, cfg in _tiny_configs():
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        config = json.loads(cfg.to_json_string())  # what save_pretrained writes
        config["architectures"] = [type(model).__name__]
        arch = ArchConfig.from_hf(config)
        want = sum(p.numel() for p in model.parameters())
        assert count_params(arch) == want, name
        seen.add(arch.architecture)
    assert seen == set(FAMILIES)


def test_facts_carry_the_sliding_window_and_the_layers_that_slide() -> None:
    gemma = facts_from_preset("gemma3-270m")
    assert (gemma.sliding_window, gemma.num_window_layers, gemma.num_full_layers) == (512, 15, 3)
    llama = facts_from_preset("llama-3-8b")
    assert (llama.sliding_window, llama.num_window_layers, llama.num_full_layers) == (0, 0, 32)
    base = {"architectures": ["Qwen2ForCausalLM"], "vocab_size": 64, "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
            "sliding_window": 32}  # fmt: skip
    qwen = ModelFacts.from_arch(ArchConfig.from_hf(base), "q", "test")
    assert (qwen.sliding_window, qwen.num_window_layers) == (0, 0)  # use_sliding_window off
    base |= {"use_sliding_window": True, "max_window_layers": 1}
    qwen = ModelFacts.from_arch(ArchConfig.from_hf(base), "q", "test")
    assert (qwen.sliding_window, qwen.num_window_layers) == (32, 3)


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="llama-3-8b"):
        facts_from_preset("llama-9")
    with pytest.raises(ValueError, match="exactly one"):
        load_facts()


def _write_safetensors(path: Path, shapes: dict[str, list[int]]) -> None:
    header = {k: {"dtype": "F32", "shape": s, "data_offsets": [0, 0]} for k, s in shapes.items()}
    header["__metadata__"] = {"format": "pt"}  # type: ignore[assignment]
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def test_folder_counts_parameters_from_safetensors_headers(tmp_path: Path) -> None:
    config = read_data("presets/smollm2-135m.json")["config"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    counted = facts_from_folder(tmp_path)
    assert counted.num_params == 134_515_008 and "counted from config.json" in counted.source
    _write_safetensors(tmp_path / "model-1.safetensors", {"a": [3, 4], "b": [5]})
    _write_safetensors(tmp_path / "model-2.safetensors", {"c": [2, 2, 2]})
    exact = load_facts(str(tmp_path))
    assert exact.num_params == 12 + 5 + 8 and "safetensors headers" in exact.source
    assert (exact.num_layers, exact.num_kv_heads, exact.head_dim) == (30, 3, 64)


def _write_gguf(path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    import numpy as np

    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_block_count(4)
    w.add_context_length(2048)
    w.add_embedding_length(256)
    w.add_feed_forward_length(512)
    w.add_head_count(8)
    w.add_head_count_kv(2)
    w.add_vocab_size(1000)
    w.add_float32("qwen2.rope.freq_base", 1e6)
    w.add_bool("test.flag", True)
    w.add_array("tokenizer.ggml.tokens", ["a", "bc", "déf"])
    w.add_array("test.ints", [1, 2, 3])
    w.add_tensor("token_embd.weight", np.zeros((1000, 256), dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight", np.zeros((256, 256), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_header_reader_agrees_with_the_gguf_package(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    _write_gguf(path)
    header = read_gguf_header(path)
    md = header.metadata
    assert md["general.architecture"] == "qwen2" and md["qwen2.block_count"] == 4
    assert md["qwen2.rope.freq_base"] == pytest.approx(1e6) and md["test.flag"] is True
    assert md["tokenizer.ggml.tokens"] == ["a", "bc", "déf"] and md["test.ints"] == [1, 2, 3]
    assert header.num_params == 1000 * 256 + 256 * 256
    import gguf

    reference = gguf.GGUFReader(str(path))
    assert header.num_params == sum(int(t.n_elements) for t in reference.tensors)
    assert reference.fields["qwen2.block_count"].contents() == 4
    facts = facts_from_gguf(path)
    assert (facts.num_layers, facts.num_heads, facts.num_kv_heads, facts.head_dim) == (4, 8, 2, 32)
    assert facts.vocab_size == 1000 and facts.num_params == header.num_params


def test_not_a_gguf_file(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"NOPE" + bytes(20))
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_gguf_header(path)


def test_default_model_gguf_matches_its_preset() -> None:
    from radixrt.model.families.loader import ModelNotFoundError, default_gguf_path

    try:
        path = default_gguf_path()
    except ModelNotFoundError:
        pytest.skip("the default model is not installed")
    facts, preset = facts_from_gguf(path), facts_from_preset("smollm2-135m")
    assert facts.num_params == preset.num_params
    shape = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "vocab_size")
    assert [getattr(facts, k) for k in shape] == [getattr(preset, k) for k in shape]
