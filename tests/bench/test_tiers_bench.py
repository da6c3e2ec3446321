"""`python -m benchmarks tiers --quick` on a tiny model: every tier is measured and
reports its hits, and the working set with tiers gives the tokens it gives without."""

from __future__ import annotations

from benchmarks.scenarios import tiers


def test_quick_run_measures_every_tier(tiny_llama_path, tmp_path) -> None:
    out = tiers.main(["--quick", "--model-path", str(tiny_llama_path), "--lengths", "128",
                      "--json", str(tmp_path / "t.json")])  # fmt: skip
    rows = {r["tier"]: r for r in out["ttft"]}
    assert list(rows) == ["recomputed", "device", "host", "disk", "disk, cold"]
    assert rows["recomputed"]["cached_by_tier"]["device"] == 0
    assert rows["device"]["cached_by_tier"]["device"] == 128
    for tier in ("host", "disk", "disk, cold"):  # the flood may share a first word on device
        got = rows[tier]["cached_by_tier"]
        assert got[tier.split(",")[0]] >= 64 and sum(got.values()) == 128, (tier, got)
    off, on = out["working_set"]
    assert off["hit_rate"] < 0.05 < on["hit_rate"] and on["same_tokens"]
    assert out["index"]["files"] > 0 and (tmp_path / "t.json").exists()
