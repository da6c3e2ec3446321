"""The tiers one by one: the block file format's checks, DiskTier's bound, index, sharing and
atomic writes, HostTier's LRU and path checks, and the block hashes."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest
import torch

from radixrt.cache.blocks import blocks_ending_in, chain_hashes, root_hash
from radixrt.cache.tiers.base import Block
from radixrt.cache.tiers.disk import DiskTier
from radixrt.cache.tiers.disk_format import (
    BlockFileError,
    BlockMismatch,
    BlockSpec,
    decode,
    encode,
)
from radixrt.cache.tiers.host import HostTier

B = 4
SHAPE = (2, 2, B, 1, 3)  # (layers, K/V, B, kv heads, head dim)
SPEC = BlockSpec("ab" * 32, B, torch.float32, SHAPE)
KEY = bytes(range(32))  # a MAC key


def _block(path: list[int], index: int, ns: str | None = None, fill: float | None = None):
    keys = chain_hashes(path, B, root_hash(b"salt", ns))
    arr = np.asarray(path, dtype=np.uint32)
    data = torch.full(SHAPE, float(index) if fill is None else fill)
    data += torch.arange(int(np.prod(SHAPE)), dtype=torch.float32).view(SHAPE) / 100
    return Block(keys[index], index, arr, data, ns)


PATH = list(range(100, 124))  # 6 blocks


def test_hashes_chain_namespaces_and_ownership() -> None:
    a = chain_hashes(PATH, B, root_hash(b"s", None))
    assert len(a) == 6 and len(set(a)) == 6
    assert chain_hashes(PATH[:9], B, root_hash(b"s", None)) == a[:2]
    assert chain_hashes(PATH, B, root_hash(b"s", "t"))[0] != a[0]
    assert chain_hashes(PATH, B, root_hash(b"s", ""))[0] != a[0]  # "" is not None
    assert chain_hashes(PATH, B, root_hash(b"other", None))[0] != a[0]
    changed = PATH[:5] + [7] + PATH[6:]
    b = chain_hashes(changed, B, root_hash(b"s", None))
    assert b[0] == a[0] and all(x != y for x, y in zip(a[1:], b[1:]))
    # a node [start, end) owns the blocks whose last token it holds
    assert list(blocks_ending_in(0, 8, B)) == [0, 1]
    assert list(blocks_ending_in(3, 9, B)) == [0, 1]
    assert list(blocks_ending_in(4, 7, B)) == []
    assert list(blocks_ending_in(4, 8, B)) == [1]


def test_format_round_trip_and_every_check() -> None:
    blk = _block(PATH, 2)
    raw = b"".join(bytes(p) for p in encode(SPEC, None, 2, blk.path, blk.data, KEY))
    assert torch.equal(decode(bytearray(raw), SPEC, None, 2, blk.path, KEY), blk.data)
    bad = {
        "truncated": raw[:-9],
        "extended": raw + b"\x00",
        "empty": b"",
        "magic": b"X" + raw[1:],
    }
    for pos in (10, 40, len(raw) - 60, len(raw) - 20, len(raw) - 2):  # header..payload, MAC
        flipped = bytearray(raw)
        flipped[pos] ^= 1
        bad[f"flip@{pos}"] = bytes(flipped)
    for name, data in bad.items():  # damage: BlockFileError, never a mere mismatch
        with pytest.raises(BlockFileError) as info:
            decode(data, SPEC, None, 2, blk.path, KEY)
            pytest.fail(name)
        assert not isinstance(info.value, BlockMismatch), name
    # Whole files of another block: BlockMismatch (kept on disk, not served).
    with pytest.raises(BlockMismatch, match="another block"):
        decode(raw, SPEC, "tenant", 2, blk.path, KEY)
    with pytest.raises(BlockMismatch, match="another block"):
        decode(raw, BlockSpec("cd" * 32, B, torch.float32, SHAPE), None, 2, blk.path, KEY)
    with pytest.raises(BlockMismatch, match="another block"):
        decode(raw, SPEC, None, 1, blk.path, KEY)
    other = blk.path.copy()
    other[3] += 1  # a colliding hash over other tokens is refused by the stored path
    with pytest.raises(BlockMismatch, match="token path"):
        decode(raw, SPEC, None, 2, other, KEY)
    with pytest.raises(BlockFileError, match="another layout"):
        decode(raw, BlockSpec("ab" * 32, B, torch.float16, SHAPE), None, 2, blk.path, KEY)


def _disk(tmp_path, blocks: int) -> DiskTier:
    probe = _block(PATH, 5)
    size = len(b"".join(bytes(p) for p in encode(SPEC, None, 5, probe.path, probe.data, KEY)))
    return DiskTier(tmp_path, SPEC, blocks * size)


def test_disk_bound_lru_and_restart(tmp_path) -> None:
    tier = _disk(tmp_path, 3)
    blocks = [_block(PATH, i) for i in range(6)]
    for b in blocks[:3]:
        tier.put(b)
    assert tier.get(blocks[0].key, 0, blocks[0].path, None) is not None  # 0 is now recent
    for b in blocks[3:5]:
        tier.put(b)
    tier.flush()
    assert [tier.contains(b.key) for b in blocks[:5]] == [True, False, False, True, True]
    assert tier.used_bytes <= tier.capacity_bytes
    assert tier.counters.dropped_blocks == 2
    assert len(list(tmp_path.rglob("*.kv"))) == 3
    tier.close()
    again = _disk(tmp_path, 3)  # a restart indexes the folder without reading a file
    assert again.num_blocks == 3 and again.used_bytes == tier.used_bytes
    got = again.get(blocks[4].key, 4, blocks[4].path, None)
    assert got is not None and torch.equal(got, blocks[4].data)
    again.clear()
    assert again.num_blocks == 0 and not list(tmp_path.rglob("*.kv"))
    again.close()


def test_disk_pending_blocks_are_readable_and_writes_are_atomic(tmp_path) -> None:
    tier = _disk(tmp_path, 8)
    blk = _block(PATH, 1)
    tier.put(blk)
    got = tier.get(blk.key, 1, blk.path, None)  # from memory or from its file
    assert got is not None and torch.equal(got, blk.data)
    assert tier.get(blk.key, 1, blk.path, "other namespace") is None
    tier.flush()  # written: another namespace's lookup reads the file, refuses it, keeps it
    assert tier.get(blk.key, 1, blk.path, "other namespace") is None
    assert tier.contains(blk.key) and tier.counters.corrupt_blocks == 0
    tier.close()
    names = [p.name for p in tmp_path.rglob("*") if p.is_file()]
    assert sorted(names) == sorted([blk.key.hex() + ".kv", "block.key"])  # no temporary left
    assert oct(next(tmp_path.rglob("*.kv")).stat().st_mode & 0o777) == "0o600"


def test_disk_folder_removed_under_a_running_tier_is_made_again(tmp_path, caplog) -> None:
    tier = _disk(tmp_path, 8)
    tier.put(_block(PATH, 0))
    tier.flush()
    shutil.rmtree(tmp_path)  # a user clearing the cache while the server runs
    blk = _block(PATH, 1)
    with caplog.at_level("WARNING", logger="radixrt"):
        tier.put(blk)
        tier.flush()
    assert tier.counters.write_errors == 0 and not caplog.records
    got = tier.get(blk.key, 1, blk.path, None)
    assert got is not None and torch.equal(got, blk.data)
    tier.close()


def test_disk_write_failures_are_logged_once_a_minute(tmp_path, caplog) -> None:
    tier = _disk(tmp_path, 8)
    blocks = [_block(PATH, i) for i in range(4)]
    for b in blocks:  # a plain file where each block's subfolder goes: every write fails
        folder = tier._file(b.key).parent
        if folder.is_dir():
            shutil.rmtree(folder)
        folder.write_bytes(b"")
    with caplog.at_level("WARNING", logger="radixrt"):
        for b in blocks:
            tier.put(b)
        tier.flush()
    assert tier.counters.write_errors == 4
    assert len([r for r in caplog.records if "could not write" in r.getMessage()]) == 1
    assert not any(tier.contains(b.key) for b in blocks) and tier.used_bytes == 0
    tier.close()


def test_disk_shared_by_two_processes_view(tmp_path) -> None:
    a, b = _disk(tmp_path, 8), _disk(tmp_path, 8)
    blk = _block(PATH, 3)
    assert not b.contains(blk.key)
    a.put(blk)
    a.flush()
    assert b.contains(blk.key)  # found by name after b's start
    got = b.get(blk.key, 3, blk.path, None)
    assert got is not None and torch.equal(got, blk.data)
    a.clear()  # a flush with disk=True deletes the files for everyone
    assert b.get(blk.key, 3, blk.path, None) is None and b.counters.corrupt_blocks == 0
    a.close()
    b.close()


def test_disk_start_removes_stale_temporaries_and_skips_strangers(tmp_path) -> None:
    root = tmp_path / SPEC.fingerprint[:16] / "ab"
    root.mkdir(parents=True)
    stale, fresh = root / ("ab" * 32 + ".kv.1.1.tmp"), root / ("ab" * 32 + ".kv.2.1.tmp")
    for p in (stale, fresh, root / "notes.txt"):
        p.write_bytes(b"x")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    tier = _disk(tmp_path, 4)
    assert tier.num_blocks == 0
    assert not stale.exists() and fresh.exists()  # another live writer's file is left alone
    tier.close()


def test_disk_damaged_file_is_dropped_not_served(tmp_path) -> None:
    tier = _disk(tmp_path, 8)
    blk = _block(PATH, 0)
    tier.put(blk)
    tier.flush()
    file = next(tmp_path.rglob("*.kv"))
    file.write_bytes(file.read_bytes()[:-1])
    assert tier.get(blk.key, 0, blk.path, None) is None
    assert tier.counters.corrupt_blocks == 1 and not file.exists() and tier.num_blocks == 0
    tier.close()


def test_host_lru_pushes_out_and_checks_paths() -> None:
    nbytes = int(np.prod(SHAPE)) * 4
    tier = HostTier(SHAPE, torch.float32, 2 * nbytes)
    blocks = [_block(PATH, i) for i in range(3)]
    assert tier.put(blocks[0]) == [] and tier.put(blocks[1]) == []
    assert tier.get(blocks[0].key, 0, blocks[0].path, None) is not None  # 1 is now the LRU
    pushed = tier.put(blocks[2])
    assert [p.key for p in pushed] == [blocks[1].key] and pushed[0].index == 1
    assert torch.equal(pushed[0].data, blocks[1].data)
    assert np.array_equal(pushed[0].path, blocks[1].path[:8])
    assert tier.num_blocks == 2 and tier.used_bytes == 2 * nbytes
    other = blocks[2].path.copy()
    other[0] += 1
    assert tier.get(blocks[2].key, 2, other, None) is None  # a collision is never served
    assert tier.counters.corrupt_blocks == 1 and not tier.contains(blocks[2].key)
    with pytest.raises(ValueError, match="holds no block"):
        HostTier(SHAPE, torch.float32, nbytes - 1)


def test_host_tier_larger_than_memory_is_refused_before_any_allocation() -> None:
    # Committing the buffer would get the process killed by the OOM killer with no message.
    if not os.path.exists("/proc/meminfo"):
        pytest.skip("no /proc/meminfo")
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with pytest.raises(ValueError, match="--host-cache-size asks for .* GB is available"):
        HostTier(SHAPE, torch.float32, 2 * total)


def test_config_refuses_what_cannot_work() -> None:
    from radixrt.core.config import CacheConfig

    for bad, match in (
        ({"cache_dir": "kv", "disk_cache_size": 0}, "disk_cache_size"),
        ({"host_cache_size": -1.0}, "host_cache_size"),
        ({"host_cache_size": float("nan")}, "host_cache_size"),
        ({"cache_dir": ""}, "cache_dir"),
        ({"cache_dir": "kv", "page_size": 16, "tier_block_size": 24}, "multiple of page_size"),
        ({"cache_dir": "kv", "disable_radix_cache": True}, "radix cache"),
        ({"write_through_min_tokens": -1}, "write_through_min_tokens"),
        ({"disk_drain_timeout_s": -1.0}, "disk_drain_timeout_s"),
        ({"disk_drain_timeout_s": float("inf")}, "disk_drain_timeout_s"),
    ):
        with pytest.raises(ValueError, match=match):
            CacheConfig(**bad)
    assert not CacheConfig().tiers_enabled and CacheConfig(cache_dir="kv").tiers_enabled
