"""The self-hosted side: what a request costs on a rented GPU at a measured throughput, with
radixrt's radix cache on and off.

Cost per request = GPU-hour price / (requests per second x 3600). That prices busy GPU time
only: a GPU kept for traffic that does not fill it costs the same per hour.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from radixrt.economics.rules.base import HOUR_S


@dataclass(frozen=True, slots=True)
class Throughput:
    """Requests per second (and mean time to first token) with the radix cache on and off."""

    requests_per_s_cached: float
    requests_per_s_uncached: float
    ttft_s_cached: float | None = None
    ttft_s_uncached: float | None = None
    source: str = "given on the command line"
    # The measured server's KV pool: its element type (its --kv-cache-dtype as resolved, e.g.
    # bfloat16 where `auto` chose it) and bytes per token at that width (fp8: with scales).
    kv_dtype: str | None = None
    kv_bytes_per_token: int | None = None

    def __post_init__(self) -> None:
        if self.requests_per_s_cached <= 0 or self.requests_per_s_uncached <= 0:
            raise ValueError("requests per second must be > 0")


@dataclass(frozen=True, slots=True)
class SelfHostedRow:
    label: str  # "radix cache on" / "radix cache off"
    requests_per_s: float
    usd_per_million_requests: float
    gpu_hours: float  # busy GPU-hours for the workload's requests
    cost_usd: float
    ttft_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def self_hosted_rows(gpu_hour_usd: float, tp: Throughput, num_requests: int) -> list[SelfHostedRow]:
    """Cost of `num_requests` at each throughput."""
    if gpu_hour_usd < 0:
        raise ValueError("gpu_hour_usd must be >= 0")
    rows = []
    for label, rps, ttft in (
        ("radix cache on", tp.requests_per_s_cached, tp.ttft_s_cached),
        ("radix cache off", tp.requests_per_s_uncached, tp.ttft_s_uncached),
    ):
        hours = num_requests / rps / HOUR_S
        per_million = gpu_hour_usd / (rps * HOUR_S) * 1e6
        rows.append(SelfHostedRow(label, rps, per_million, hours, hours * gpu_hour_usd, ttft))
    return rows


def load_bench_json(path: str | Path) -> Throughput:
    """Throughput from a benchmark's JSON: `python -m benchmarks shared_prefix
    --json` (results labelled "radix cache on"/"off", with req_s and mean_ttft_s, and the
    pool's kv_dtype and kv_bytes_per_token), or an object with requests_per_second_cached /
    requests_per_second_uncached (and optionally kv_dtype, kv_bytes_per_token)."""
    data = json.loads(Path(path).read_text())
    if "requests_per_second_cached" in data:
        return Throughput(
            float(data["requests_per_second_cached"]),
            float(data["requests_per_second_uncached"]),
            data.get("ttft_s_cached"),
            data.get("ttft_s_uncached"),
            str(path),
            *_kv_figures(data),
        )
    runs: dict[str, dict[str, Any]] = {}
    for r in data.get("results", []):
        label = str(r.get("label", ""))
        for state in ("on", "off"):
            if label.endswith(f"radix cache {state}"):
                runs[state] = r
    if set(runs) != {"on", "off"}:
        raise ValueError(
            f"{path}: no radix cache on/off results (expected shared_prefix --json output or "
            "requests_per_second_cached / requests_per_second_uncached)"
        )
    on, off = runs["on"], runs["off"]
    return Throughput(
        float(on["req_s"]),
        float(off["req_s"]),
        on.get("mean_ttft_s"),
        off.get("mean_ttft_s"),
        f"{path} ({data.get('workload', {})})",
        *_kv_figures(on),
    )


def _kv_figures(data: dict[str, Any]) -> tuple[str | None, int | None]:
    """(KV dtype, bytes per token) as a benchmark recorded them; None where it did not."""
    dtype, per_token = data.get("kv_dtype"), data.get("kv_bytes_per_token")
    if per_token is not None and (not isinstance(per_token, int) or per_token <= 0):
        raise ValueError(f"kv_bytes_per_token must be a positive integer, got {per_token!r}")
    return (None if dtype is None else str(dtype)), per_token
