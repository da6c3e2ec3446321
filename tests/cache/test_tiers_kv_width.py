"""The disk tier across a restart with another KV width: the blocks written with a float32
pool are not served to a bfloat16 pool (another fingerprint, never read nor converted), the
start-up warns naming both widths and the flag that would use them, and a restart with the
first width serves them again."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest
from pool_checks import assert_pool_whole

from radixrt import Engine
from radixrt.cache.tiers.disk_layout import LAYOUT_FILE, other_widths

GREEDY = {"temperature": 0, "max_new_tokens": 4}
DOC = [random.Random(11).randrange(100, 40000) for _ in range(200)]


def _engine(model: Path, cache_dir: Path, kv: str) -> Engine:
    return Engine(str(model), max_total_tokens=1024, cache_dir=str(cache_dir),
                  tier_block_size=16, write_through_min_tokens=16,
                  kv_cache_dtype=kv)  # fmt: skip


def _disk_tokens(eng: Engine, prompt: list[int]) -> int:
    out = eng.generate(input_ids=prompt, sampling_params=GREEDY)
    return out["meta_info"]["cached_tokens_by_tier"]["disk"]  # type: ignore[index]


def test_another_width_is_named_and_never_served(
    tiny_llama_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kv_dir = tmp_path / "kv"
    with _engine(tiny_llama_path, kv_dir, "float32") as eng:
        eng.generate(input_ids=DOC, sampling_params=GREEDY)  # written through
        assert_pool_whole(eng)
    with caplog.at_level(logging.WARNING, logger="radixrt"):
        with _engine(tiny_llama_path, kv_dir, "bfloat16") as eng:
            assert _disk_tokens(eng, DOC + [5, 6]) == 0  # not served: another width
            stats = {t["name"]: t for t in eng.get_stats()["tiers"]}
            assert stats["disk"]["corrupt_blocks"] == 0  # not even read
    warned = [r.getMessage() for r in caplog.records if "disk KV cache: blocks" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "written with a float32 KV pool; this server's pool is bfloat16" in warned[0]
    assert "--kv-cache-dtype float32 to use them" in warned[0]
    folders = sorted(p for p in kv_dir.iterdir() if p.is_dir())
    assert len(folders) == 2 and all((f / LAYOUT_FILE).is_file() for f in folders)
    with _engine(tiny_llama_path, kv_dir, "float32") as eng:  # the first width: served
        assert _disk_tokens(eng, DOC + [7, 8]) >= 160
        assert_pool_whole(eng)


def test_other_widths_skips_unreadable_layouts(tmp_path: Path) -> None:
    mine, bad, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d in (mine, bad, other):
        d.mkdir()
    (bad / LAYOUT_FILE).write_text("{not json")
    (other / LAYOUT_FILE).write_text('{"model": "m1", "kv_dtype": "fp8_e4m3", "shape": [1]}')
    assert other_widths(tmp_path, mine, "m1") == [(other, "fp8_e4m3")]
    assert other_widths(tmp_path, mine, "m2") == []
