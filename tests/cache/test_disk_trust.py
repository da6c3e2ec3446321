"""The disk tier does not trust its folder: links, FIFOs and oversized files under a block's
name are misses (logged, never a hang or a crash), the folder must be private, and a block is
served only with a MAC made under the folder's key."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from radixrt.cache.tiers.disk import DiskTier
from radixrt.cache.tiers.disk_folder import KEY_FILE
from radixrt.cache.tiers.disk_format import encode
from tests.cache.test_tiers_units import PATH, SPEC, _block, _disk


def _written(tmp_path, index: int = 1):
    """A tier holding block `index` in its file, the block, and the file."""
    tier = _disk(tmp_path, 8)
    blk = _block(PATH, index)
    tier.put(blk)
    tier.flush()
    return tier, blk, tier._file(blk.key)


def _refused(tier: DiskTier, blk, caplog) -> None:
    with caplog.at_level("WARNING", logger="radixrt"):
        assert tier.get(blk.key, blk.index, blk.path, None) is None
    assert tier.counters.corrupt_blocks == 1 and not tier.contains(blk.key)
    assert any("not served" in r.getMessage() for r in caplog.records)


def test_a_link_under_a_block_name_is_not_followed(tmp_path, caplog) -> None:
    tier, blk, file = _written(tmp_path / "kv")
    target = tmp_path / "elsewhere.kv"  # a whole, valid file, reached through a link
    os.replace(file, target)
    os.symlink(target, file)
    _refused(tier, blk, caplog)
    assert target.exists() and not os.path.lexists(file)  # the link goes, not its target
    os.symlink(target, file)
    assert DiskTier(tmp_path / "kv", SPEC, tier.capacity_bytes).num_blocks == 0  # not indexed
    tier.close()


def test_a_fifo_under_a_block_name_does_not_block_the_reader(tmp_path, caplog) -> None:
    tier, blk, file = _written(tmp_path)
    file.unlink()
    os.mkfifo(file)
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(_refused(tier, blk, caplog)))
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # release it: open the write end once
        os.close(os.open(file, os.O_WRONLY | os.O_NONBLOCK))
        reader.join()
        pytest.fail("reading a FIFO named like a block blocked the reader")
    assert result == [None]
    tier.close()


def test_a_sparse_huge_file_is_refused_before_allocating_it(tmp_path, caplog) -> None:
    tier, blk, file = _written(tmp_path)
    with open(file, "r+b") as f:
        f.truncate(1 << 40)  # 1 TiB, sparse: reading it whole would raise MemoryError
    _refused(tier, blk, caplog)
    assert not file.exists()
    other = _block(PATH, 2)
    tier.put(other)
    tier.flush()
    with open(file, "wb") as f:  # back, under another process's name: never indexed, and
        f.truncate(1 << 40)  # never makes room for itself by deleting the real blocks
    assert not tier.contains(blk.key) and tier.contains(other.key)
    tier.close()
    again = _disk(tmp_path, 8)
    assert again.num_blocks == 1 and again.contains(other.key) and not again.contains(blk.key)
    again.close()


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702], ids=oct)
def test_a_folder_others_can_write_is_refused_at_start(tmp_path, mode: int) -> None:
    folder = tmp_path / "kv"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(ValueError, match=f"{folder} is writable by group or others"):
        _disk(folder, 4)
    folder.chmod(0o700)
    _disk(folder, 4).close()


def test_a_model_folder_others_can_write_is_refused_too(tmp_path) -> None:
    root = tmp_path / SPEC.fingerprint[:16]
    root.mkdir(mode=0o700)
    root.chmod(0o777)
    with pytest.raises(ValueError, match=str(root)):
        _disk(tmp_path, 4)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_a_folder_of_another_user_is_refused(tmp_path) -> None:
    folder = tmp_path / "kv"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    with pytest.raises(ValueError, match=f"{folder} belongs to uid 65534"):
        _disk(folder, 4)


def test_the_key_is_private_kept_across_restarts_and_checked(tmp_path) -> None:
    tier, blk, _ = _written(tmp_path)
    tier.close()
    key_file = tmp_path / KEY_FILE
    assert oct(key_file.stat().st_mode & 0o777) == "0o600" and len(key_file.read_bytes()) == 32
    again = _disk(tmp_path, 8)  # the same key: the block is served after a restart
    got = again.get(blk.key, blk.index, blk.path, None)
    assert got is not None and torch.equal(got, blk.data)
    again.close()
    key_file.chmod(0o644)
    with pytest.raises(ValueError, match="mode 0600"):
        _disk(tmp_path, 8)
    key_file.chmod(0o600)
    key_file.write_bytes(b"")
    with pytest.raises(ValueError, match="holds 0 bytes"):
        _disk(tmp_path, 8)
    key_file.unlink()
    os.symlink(tmp_path / "elsewhere", key_file)
    with pytest.raises(ValueError, match="link"):
        _disk(tmp_path, 8)


def test_a_forged_block_without_the_key_is_a_miss(tmp_path, caplog) -> None:
    tier, blk, file = _written(tmp_path)
    forged = _block(PATH, blk.index, fill=42.0)  # well formed, right path, another MAC key
    file.write_bytes(b"".join(bytes(p) for p in encode(SPEC, None, blk.index, forged.path,
                                                       forged.data, b"\x07" * 32)))  # fmt: skip
    _refused(tier, blk, caplog)
    assert any("MAC mismatch" in r.getMessage() for r in caplog.records)
    tier.close()
