"""The lower KV tiers end to end on a tiny Llama: spills load back with the cache-off tokens, a
restart on the same --cache-dir serves a 2k-token prefix from disk, damaged files are
recomputed (with a warning), another model's files are never read, and `kill -9` while
spilling leaves nothing that a restart would serve wrongly."""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pool_checks import assert_pool_whole
from tiny_models import make_tiny

from radixrt import Engine

GREEDY = {"temperature": 0, "max_new_tokens": 6}
BLOCK = 16


@pytest.fixture(scope="module")
def tiny_long(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    """A tiny Llama with a 4k context (the 2k-token prefix below)."""
    return make_tiny(
        tmp_path_factory.mktemp("tiny_long"), smollm2_path, "llama", max_position_embeddings=4096
    )


def _prompts(seed: int, n: int, length: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, 40000) for _ in range(length)] for _ in range(n)]


@pytest.fixture(scope="module")
def reference(tiny_long: Path):
    """Greedy output ids of the cache-off engine, memoized per prompt."""
    memo: dict[tuple[int, ...], list[int]] = {}
    with Engine(str(tiny_long), disable_radix_cache=True, max_total_tokens=4096) as eng:

        def ref(prompt: list[int]) -> list[int]:
            if tuple(prompt) not in memo:
                memo[tuple(prompt)] = eng.generate(input_ids=prompt, sampling_params=GREEDY)[
                    "output_ids"
                ]
            return memo[tuple(prompt)]

        yield ref


def _tiers(eng: Engine) -> dict[str, dict]:
    return {t["name"]: t for t in eng.get_stats()["tiers"]}


def _gen(eng: Engine, prompt: list[int]) -> dict:
    return eng.generate(input_ids=prompt, sampling_params=GREEDY)


@pytest.mark.parametrize("tier", ["host", "disk"])
def test_spills_load_back_with_cache_off_tokens(tiny_long, reference, tmp_path, tier) -> None:
    kw = {"host_cache_size": 0.002} if tier == "host" else {"cache_dir": str(tmp_path)}
    prompts = _prompts(1, 6, 200)  # 1200 distinct tokens through a 512-token pool
    with Engine(str(tiny_long), max_total_tokens=512, tier_block_size=BLOCK,
                write_through_min_tokens=0, **kw) as eng:  # fmt: skip
        for p in prompts:
            out = _gen(eng, p)
            assert out["output_ids"] == reference(p)
            assert out["meta_info"]["cached_tokens_by_tier"] == {"device": 0, tier: 0}
        assert _tiers(eng)[tier]["stored_blocks"] > 0  # evictions spilled
        for p in prompts:
            out = _gen(eng, p)
            assert out["output_ids"] == reference(p)
            by_tier = out["meta_info"]["cached_tokens_by_tier"]
            assert sum(by_tier.values()) == out["meta_info"]["cached_tokens"]
            assert by_tier.get(tier, 0) + by_tier["device"] >= 192
        info = _tiers(eng)[tier]
        assert info["hit_tokens"] > 0 and info["corrupt_blocks"] == 0
        assert out["meta_info"]["cache_load_time"] >= 0
        assert_pool_whole(eng)


def test_host_pushes_to_disk(tiny_long, reference, tmp_path) -> None:
    """A host tier too small for the working set hands its LRU blocks to the disk tier."""
    prompts = _prompts(2, 8, 200)
    with Engine(str(tiny_long), max_total_tokens=512, tier_block_size=BLOCK,
                host_cache_size=0.0003, cache_dir=str(tmp_path),
                write_through_min_tokens=0) as eng:  # fmt: skip
        for p in prompts:
            _gen(eng, p)
        for p in prompts:
            assert _gen(eng, p)["output_ids"] == reference(p)
        info = _tiers(eng)
        assert info["host"]["dropped_blocks"] > 0 and info["disk"]["stored_blocks"] > 0
        assert info["host"]["hit_tokens"] > 0 and info["disk"]["hit_tokens"] > 0
        assert eng.flush_cache()
        assert_pool_whole(eng)


def _disk_engine(model: Path, cache_dir: Path, **kw) -> Engine:
    return Engine(str(model), max_total_tokens=4096, cache_dir=str(cache_dir),
                  tier_block_size=64, **kw)  # fmt: skip


def test_restart_serves_2k_prefix_from_disk(tiny_long, reference, tmp_path) -> None:
    doc = _prompts(3, 1, 2048)[0]
    first, second = doc + _prompts(4, 1, 8)[0], doc + _prompts(5, 1, 8)[0]
    with _disk_engine(tiny_long, tmp_path) as eng:  # written through: >= 1024 tokens
        assert _gen(eng, first)["output_ids"] == reference(first)
    with _disk_engine(tiny_long, tmp_path) as eng:
        out = _gen(eng, second)
        assert out["meta_info"]["cached_tokens_by_tier"] == {"device": 0, "disk": 2048}
        assert out["output_ids"] == reference(second)
        assert _tiers(eng)["disk"]["blocks"] >= 32
        assert_pool_whole(eng)


def _block_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.kv"), key=lambda p: p.stat().st_mtime_ns)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_file_is_recomputed(tiny_long, reference, tmp_path, caplog, damage) -> None:
    doc = _prompts(6, 1, 1024 + 64)[0]
    with _disk_engine(tiny_long, tmp_path) as eng:
        _gen(eng, doc)
    files = _block_files(tmp_path)
    assert len(files) == 17
    victim = files[8]  # order of writing is block order: block 8, tokens [512, 576)
    raw = bytearray(victim.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0x10
    else:
        raw = raw[: len(raw) - 100]
    victim.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="radixrt"):
        with _disk_engine(tiny_long, tmp_path) as eng:
            out = _gen(eng, doc + [7, 8, 9])
            assert out["meta_info"]["cached_tokens_by_tier"] == {"device": 0, "disk": 512}
            assert out["output_ids"] == reference(doc + [7, 8, 9])
            assert _tiers(eng)["disk"]["corrupt_blocks"] == 1
            assert_pool_whole(eng)
    assert any("not served" in r.getMessage() for r in caplog.records)
    assert victim.read_bytes() != bytes(raw)  # deleted, then written again from the recompute


def test_other_model_never_reads_the_files(tiny_long, smollm2_path, tmp_path) -> None:
    other = make_tiny(tmp_path / "other", smollm2_path, "llama", max_position_embeddings=4096,
                       rms_norm_eps=1e-6)  # fmt: skip
    doc = _prompts(7, 1, 1100)[0]
    with _disk_engine(tiny_long, tmp_path / "kv") as eng:
        _gen(eng, doc)
    with _disk_engine(other, tmp_path / "kv") as eng:
        out = _gen(eng, doc)
        assert out["meta_info"]["cached_tokens_by_tier"] == {"device": 0, "disk": 0}
    folders = [p for p in (tmp_path / "kv").iterdir() if p.is_dir()]
    assert len(folders) == 2  # a folder per model fingerprint (beside the key file)
    with _disk_engine(tiny_long, tmp_path / "kv", dtype="bfloat16") as eng:
        assert _gen(eng, doc)["meta_info"]["cached_tokens_by_tier"]["disk"] == 0


_SPILLER = textwrap.dedent(
    """
    import random, sys
    from radixrt import Engine
    model, cache_dir = sys.argv[1], sys.argv[2]
    rng = random.Random(8)
    with Engine(model, max_total_tokens=512, cache_dir=cache_dir, tier_block_size=16,
                write_through_min_tokens=16) as eng:
        while True:
            prompt = [rng.randrange(100, 40000) for _ in range(rng.choice([64, 200, 300]))]
            eng.generate(input_ids=prompt, sampling_params={"max_new_tokens": 1})
    """
)


def test_kill_during_spill_leaves_nothing_wrong_to_serve(tiny_long, reference, tmp_path) -> None:
    script = tmp_path / "spill.py"
    script.write_text(_SPILLER)
    kv = tmp_path / "kv"
    proc = subprocess.Popen([sys.executable, str(script), str(tiny_long), str(kv)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(list(kv.rglob("*.kv"))) < 150:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the spilling process wrote too little"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    rng = random.Random(8)
    prompts = [[rng.randrange(100, 40000) for _ in range(rng.choice([64, 200, 300]))]
               for _ in range(60)]  # fmt: skip
    with Engine(str(tiny_long), max_total_tokens=512, cache_dir=str(kv),
                tier_block_size=16) as eng:  # fmt: skip
        hits = 0
        for p in prompts:
            out = _gen(eng, p)
            assert out["output_ids"] == reference(p)
            hits += out["meta_info"]["cached_tokens_by_tier"]["disk"]
        assert hits > 0
        assert _tiers(eng)["disk"]["corrupt_blocks"] == 0
        assert_pool_whole(eng)


def test_unusable_cache_dir_is_a_clear_error(tiny_long, tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ValueError, match="is not usable"):
        Engine(str(tiny_long), cache_dir=str(blocker / "kv"))
