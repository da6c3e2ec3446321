"""A clean stop drains the disk tier's write queue within its bound: what is written is
announced (indexed, found by a restart), what is not is dropped from the index, and the
counts are logged."""

from __future__ import annotations

import time

import torch

from radixrt.cache.tiers import disk_writer
from radixrt.cache.tiers.disk import DiskTier
from tests.cache.test_tiers_units import PATH, SPEC, _block, _disk


def _slow_writes(monkeypatch, seconds: float) -> None:
    real = disk_writer.encode

    def slow(*args: object):
        time.sleep(seconds)
        return real(*args)

    monkeypatch.setattr(disk_writer, "encode", slow)


def test_close_writes_every_queued_block(tmp_path, monkeypatch, caplog) -> None:
    _slow_writes(monkeypatch, 0.05)
    tier = _disk(tmp_path, 8)
    blocks = [_block(PATH, i) for i in range(6)]
    for b in blocks:
        tier.put(b)
    with caplog.at_level("INFO", logger="radixrt"):
        tier.close()
    assert "6 queued block(s) written at shutdown" in caplog.text
    again = _disk(tmp_path, 8)
    assert again.num_blocks == 6
    got = again.get(blocks[5].key, 5, blocks[5].path, None)
    assert got is not None and torch.equal(got, blocks[5].data)
    again.close()


def test_close_past_its_bound_drops_the_rest_unannounced(tmp_path, monkeypatch, caplog) -> None:
    _slow_writes(monkeypatch, 0.4)
    probe = _disk(tmp_path, 8)
    tier = DiskTier(tmp_path, SPEC, probe.capacity_bytes, drain_timeout_s=0.6)
    probe.close()
    blocks = [_block(PATH, i) for i in range(6)]
    for b in blocks:
        tier.put(b)
    t0 = time.monotonic()
    with caplog.at_level("INFO", logger="radixrt"):
        tier.close()
    assert time.monotonic() - t0 < 3.0  # bounded, not 6 x 0.4 s
    files = {p.name[:64] for p in tmp_path.rglob("*.kv")}
    written = [b for b in blocks if b.key.hex() in files]
    assert 1 <= len(written) < 6
    assert tier.num_blocks == len(written)  # the index holds what is on disk, nothing more
    assert not any(tier.contains(b.key) for b in blocks if b not in written)
    assert "dropped (not written within 0.6 s)" in caplog.text
    assert f"of 6 queued block(s) written at shutdown, {6 - len(written)} dropped" in caplog.text
    again = _disk(tmp_path, 8)  # a restart finds exactly the written ones, whole
    assert again.num_blocks == len(written)
    for b in written:
        got = again.get(b.key, b.index, b.path, None)
        assert got is not None and torch.equal(got, b.data)
    again.close()
