"""The tokenizer class AutoTokenizer chose for a folder is remembered (tokenizer_memo.py): a
later load builds the same tokenizer without AutoTokenizer, for the default model and every
family's config (the choice follows the model type: Qwen2's is a class of its own); a changed
file, a memo naming an unknown class and an unwritable cache all fall back to AutoTokenizer."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import transformers
from tiny_families import _COMMON, FAMILIES, TOKENIZER_FILES
from transformers import AutoTokenizer

from radixrt.model.families import tokenizer_memo

SAMPLES = ["Hello world", "<|im_start|>user\nHi<|im_end|>", " spaces  and\ttabs\n", "ünïcödé 東京"]


def _folder(tmp: Path, model_type_config: Any, tokenizer_from: Path) -> Path:
    """config.json of a family and the default model's tokenizer files: what the choice reads."""
    model_type_config.to_json_file(str(tmp / "config.json"))
    for f in TOKENIZER_FILES:
        if (tokenizer_from / f).exists():
            shutil.copy(tokenizer_from / f, tmp / f)
    return tmp


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    assert repr(a) == repr(b)  # name, sizes, special and added tokens
    assert a.get_vocab() == b.get_vocab()
    assert a.chat_template == b.chat_template
    for text in SAMPLES:
        assert a(text).input_ids == b(text).input_ids
        assert a.decode(a(text).input_ids) == b.decode(b(text).input_ids)


def _folders(tmp_path_factory: pytest.TempPathFactory, smollm2: Path) -> list[Path]:
    out = [smollm2]  # (Gemma 3's tokenizer takes 3 s a load: its family stands for it)
    for name, (cls_name, overrides) in FAMILIES.items():
        cfg = getattr(transformers, cls_name)(**{**_COMMON, **overrides})
        out.append(_folder(tmp_path_factory.mktemp(f"tok-{name}"), cfg, smollm2))
    return out


def test_a_remembered_choice_builds_the_same_tokenizer(
    tmp_path_factory: pytest.TempPathFactory,
    smollm2_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folders = _folders(tmp_path_factory, smollm2_path)
    monkeypatch.setenv("RADIXRT_CACHE", str(tmp_path_factory.mktemp("cache")))
    for folder in folders:
        want = tokenizer_memo.load_auto_tokenizer(folder)  # AutoTokenizer chooses; remembered
        memo = tokenizer_memo._memo_path(folder)
        assert memo is not None and memo.is_file(), folder
        with monkeypatch.context() as m:  # the second load must not consult AutoTokenizer
            m.setattr(AutoTokenizer, "from_pretrained", _refuse)
            second = tokenizer_memo.load_auto_tokenizer(folder)
        _same(want, second)


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("AutoTokenizer was consulted")


def test_a_changed_file_or_a_bad_memo_chooses_again(
    tmp_path: Path, smollm2_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RADIXRT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "m").mkdir()
    folder = _folder(tmp_path / "m", transformers.LlamaConfig(), smollm2_path)
    calls: list[str] = []
    original = AutoTokenizer.from_pretrained

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(str(args[0]))
        return original(*args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", counting)
    tokenizer_memo.load_auto_tokenizer(folder)
    tokenizer_memo.load_auto_tokenizer(folder)
    assert len(calls) == 1
    config = folder / "tokenizer_config.json"
    st = config.stat()
    os.utime(config, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a changed file
    tokenizer_memo.load_auto_tokenizer(folder)
    assert len(calls) == 2
    memo = tokenizer_memo._memo_path(folder)
    assert memo is not None
    memo.write_text('{"class": "NoSuchTokenizer", "module": "transformers.nowhere"}')
    _same(original(str(folder), local_files_only=True), tokenizer_memo.load_auto_tokenizer(folder))
    assert len(calls) == 3
    memo.write_text("not json")
    tokenizer_memo.load_auto_tokenizer(folder)
    assert len(calls) == 4 and "TokenizersBackend" in memo.read_text()  # written again


def test_an_unwritable_cache_still_loads(
    tmp_path: Path, smollm2_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("RADIXRT_CACHE", str(blocker))  # a file where the folder would go
    want = AutoTokenizer.from_pretrained(str(smollm2_path), local_files_only=True)
    _same(want, tokenizer_memo.load_auto_tokenizer(smollm2_path))
    _same(want, tokenizer_memo.load_auto_tokenizer(smollm2_path))
