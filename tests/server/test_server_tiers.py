"""A server with a disk tier: meta_info splits cached tokens by tier, /get_server_info and
/metrics report the tiers, /flush_cache says which tiers it cleared (disk only when asked),
and --dp merges the replicas' tier figures."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from radixrt.core.messages import TierInfoMsg
from radixrt.serve.http.dp_dispatcher import merge_tiers

from .server_proc import start_server

SP = {"max_new_tokens": 2, "temperature": 0}


@pytest.fixture(scope="module")
def tiered(tiny_llama_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("tiers_server")
    server = start_server(tiny_llama_path, tmp, "--max-total-tokens", "256", "--cache-dir",
                          str(tmp / "kv"), "--tier-block-size", "16",
                          "--enable-metrics")  # fmt: skip
    server.kv_dir = tmp / "kv"
    try:
        yield server
        server.wait_idle_and_whole()
    finally:
        server.stop()


def _gen(server: Any, ids: list[int]) -> dict:
    r = server.post("/generate", json={"input_ids": ids, "sampling_params": SP})
    assert r.status_code == 200, r.text
    return r.json()["meta_info"]


def _tier(server: Any, name: str) -> dict:
    tiers = server.get("/get_server_info").json()["tiers"]
    return next(t for t in tiers if t["name"] == name)


def test_spill_hit_info_metrics_and_flush(tiered: Any) -> None:
    rng = random.Random(0)
    prompts = [[rng.randrange(100, 40000) for _ in range(150)] for _ in range(4)]
    for p in prompts:  # 600 tokens through a 256-token pool
        assert _gen(tiered, p)["cached_tokens_by_tier"] == {"device": 0, "disk": 0}
    meta = _gen(tiered, prompts[0])
    assert meta["cached_tokens_by_tier"]["disk"] == 144 and meta["cached_tokens"] == 144
    assert meta["cache_load_time"] >= 0
    disk = _tier(tiered, "disk")
    assert disk["stored_blocks"] >= 9 and disk["hit_tokens"] == 144 and disk["blocks"] > 0
    text = tiered.get("/metrics").text
    assert 'radixrt_kv_tier_hit_tokens_total{tier="disk"} 144.0' in text
    assert 'radixrt_cached_tokens_by_tier_total{tier="disk"} 144.0' in text
    assert 'radixrt_kv_tier_blocks{tier="disk"}' in text
    tiered.wait_idle_and_whole()

    r = tiered.post("/flush_cache")
    assert r.status_code == 200 and r.json() == {"success": True, "cleared": ["device"]}
    assert _tier(tiered, "disk")["blocks"] > 0  # the files stay unless asked
    assert _gen(tiered, prompts[1])["cached_tokens_by_tier"]["disk"] == 144
    for bad in ({"params": {"disk": "maybe"}}, {"json": {"disk": "yes"}}, {"json": {"x": 1}}):
        r = tiered.post("/flush_cache", **bad)
        assert r.status_code == 400, r.text
    r = tiered.post("/flush_cache", params={"disk": "true"})
    assert r.json() == {"success": True, "cleared": ["device", "disk"]}
    assert _tier(tiered, "disk")["blocks"] == 0
    assert not list(tiered.kv_dir.rglob("*.kv"))
    assert _gen(tiered, prompts[2])["cached_tokens_by_tier"] == {"device": 0, "disk": 0}
    r = tiered.post("/flush_cache", json={"disk": True})
    assert r.json()["cleared"] == ["device", "disk"]


def _info(name: str, blocks: int, hits: int) -> TierInfoMsg:
    return TierInfoMsg(name, blocks, blocks * 16, blocks * 100, 10_000, blocks, 0, hits, 1,
                       0.5, 0, 0)  # fmt: skip


def test_dp_merges_tiers_without_counting_shared_files_twice() -> None:
    merged = merge_tiers(
        [[_info("host", 3, 10), _info("disk", 40, 5)], [_info("host", 2, 1), _info("disk", 42, 7)]]
    )
    host, disk = merged
    assert (host.name, host.blocks, host.hit_tokens, host.load_s) == ("host", 5, 11, 1.0)
    assert (disk.blocks, disk.bytes, disk.capacity_bytes) == (42, 4200, 10_000)  # one folder
    assert (disk.stored_blocks, disk.hit_tokens) == (82, 12)  # what each replica did
    assert merge_tiers([[], []]) == []
