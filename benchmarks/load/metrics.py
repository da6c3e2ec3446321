"""Per-request timings of a serving benchmark and the summary computed from them.

All times are `time.perf_counter()` seconds on the client. A streamed response arrives in
chunks; each chunk carries one or more new tokens and is stamped when it is read.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    """One request as the client saw it."""

    session_idx: int
    turn_idx: int
    start: float
    chunk_times: list[float] = field(default_factory=list)  # arrival of each chunk with tokens
    end: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int | None = None  # None: the server does not report it
    error: str = ""
    text: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def ttft(self) -> float | None:
        """Start to the first chunk with tokens."""
        return self.chunk_times[0] - self.start if self.chunk_times else None

    @property
    def e2e(self) -> float:
        return self.end - self.start

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: (e2e - ttft) / (output_tokens - 1)."""
        if self.output_tokens < 2 or not self.chunk_times:
            return None
        return (self.end - self.chunk_times[0]) / (self.output_tokens - 1)

    @property
    def itls(self) -> list[float]:
        """Gaps between consecutive chunks (a chunk of several tokens counts once)."""
        t = self.chunk_times
        return [b - a for a, b in zip(t, t[1:])]


def stats(values: list[float]) -> dict[str, float | None]:
    """mean, median and p99 (nearest rank) of `values`; None for each when empty."""
    if not values:
        return {"mean": None, "median": None, "p99": None}
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, -(-99 * len(ordered) // 100) - 1))
    return {
        "mean": statistics.fmean(ordered),
        "median": statistics.median(ordered),
        "p99": ordered[rank],
    }


def summarize(records: list[RequestRecord], duration_s: float) -> dict[str, Any]:
    """Throughput, latency percentiles and cache hits of the successful requests."""
    done = [r for r in records if r.ok]
    prompt = sum(r.prompt_tokens for r in done)
    output = sum(r.output_tokens for r in done)
    reported = [r for r in done if r.cached_tokens is not None]
    cached = sum(r.cached_tokens or 0 for r in reported)
    reported_prompt = sum(r.prompt_tokens for r in reported)
    d = max(duration_s, 1e-9)
    out: dict[str, Any] = {
        "completed": len(done),
        "failed": len(records) - len(done),
        "duration_s": duration_s,
        "request_throughput": len(done) / d,
        "input_throughput": prompt / d,
        "output_throughput": output / d,
        "total_token_throughput": (prompt + output) / d,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "cached_tokens": cached if reported else None,
        "hit_rate": cached / reported_prompt if reported and reported_prompt else None,
    }
    for name, values in (
        ("ttft", [r.ttft for r in done if r.ttft is not None]),
        ("tpot", [r.tpot for r in done if r.tpot is not None]),
        ("itl", [x for r in done for x in r.itls]),
        ("e2e", [r.e2e for r in done]),
    ):
        for key, value in stats(values).items():
            out[f"{key}_{name}_s"] = value
    hits = [r.ttft for r in reported if r.ttft is not None and r.cached_tokens]
    misses = [r.ttft for r in reported if r.ttft is not None and not r.cached_tokens]
    out["mean_ttft_hit_s"] = statistics.fmean(hits) if hits else None
    out["mean_ttft_miss_s"] = statistics.fmean(misses) if misses else None
    errors = sorted({r.error for r in records if r.error})
    if errors:
        out["errors"] = errors[:5]
    return out


def ttft_by_turn(records: list[RequestRecord]) -> dict[int, float]:
    """Mean TTFT of the successful requests of each turn index."""
    by_turn: dict[int, list[float]] = {}
    for r in records:
        if r.ok and r.ttft is not None:
            by_turn.setdefault(r.turn_idx, []).append(r.ttft)
    return {k: statistics.fmean(v) for k, v in sorted(by_turn.items())}


def format_summary(title: str, s: dict[str, Any]) -> str:
    """A fixed-width summary table (SGLang bench_serving style)."""

    def ms(key: str) -> str:
        v = s.get(key)
        return "-" if v is None else f"{v * 1000:.1f}"

    lines = [
        f"{' ' + title + ' ':=^56}",
        f"{'Successful requests:':<40}{s['completed']:>16}",
        f"{'Failed requests:':<40}{s['failed']:>16}",
        f"{'Duration (s):':<40}{s['duration_s']:>16.2f}",
        f"{'Prompt / output tokens:':<40}{s['prompt_tokens']:>8}/{s['output_tokens']:<7}",
        f"{'Request throughput (req/s):':<40}{s['request_throughput']:>16.3f}",
        f"{'Output token throughput (tok/s):':<40}{s['output_throughput']:>16.2f}",
        f"{'Total token throughput (tok/s):':<40}{s['total_token_throughput']:>16.2f}",
    ]
    if s.get("hit_rate") is not None:
        lines.append(
            f"{'Cached tokens / hit rate:':<40}{s['cached_tokens']:>8} {s['hit_rate']:>7.3f}"
        )
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E")):
        lines.append(
            f"{label + ' mean / median / p99 (ms):':<32}"
            f"{ms(f'mean_{name}_s'):>8}{ms(f'median_{name}_s'):>8}"
            f"{ms(f'p99_{name}_s'):>8}"
        )
    for e in s.get("errors", []):
        lines.append(f"error: {e[:200]}")
    return "\n".join(lines + ["=" * 56])
