"""The agent benchmark's report: per engine, time per turn (p50/p90), cached fraction of the
prompt per turn, invalid forced calls (and why); per turn index, each engine's cached
fraction; then every engine's ratios to vLLM-CPU (the fastest of its dtypes by p50)."""

from __future__ import annotations

from collections import Counter
from statistics import quantiles
from typing import Any

from benchmarks.scenarios.agent.session import Workload

REFERENCE = "vllm-cpu"


def _pct(values: list[float], q: int) -> float:
    """The q-th percentile (inclusive method); the value itself for one value."""
    if len(values) == 1:
        return values[0]
    return quantiles(values, n=100, method="inclusive")[q - 1]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures of one engine's turns (rows as TurnRow.as_dict)."""
    secs = [r["seconds"] for r in rows]
    prompt = sum(r["prompt_tokens"] for r in rows)
    cached = sum(r["cached_tokens"] for r in rows)
    fails = Counter(r["failure"] for r in rows if r["failure"])
    return {
        "turns": len(rows),
        "p50_s": _pct(secs, 50),
        "p90_s": _pct(secs, 90),
        "prompt_tokens_mean": prompt / len(rows),
        "completion_tokens_mean": sum(r["completion_tokens"] for r in rows) / len(rows),
        "cached_fraction": cached / prompt if prompt else 0.0,
        "invalid_share": sum(fails.values()) / len(rows),
        "failures": dict(fails),
    }


def per_turn_cached(rows: list[dict[str, Any]]) -> dict[int, float]:
    """Turn index -> cached tokens over prompt tokens, over every session's turn."""
    out = {}
    for k in sorted({r["turn"] for r in rows}):
        at = [r for r in rows if r["turn"] == k]
        prompt = sum(r["prompt_tokens"] for r in at)
        out[k] = sum(r["cached_tokens"] for r in at) / prompt if prompt else 0.0
    return out


def format_report(
    results: list[dict[str, Any]], cpu: dict[str, Any], wl: Workload, n_tools: int
) -> str:
    lines = [
        f"Agent workload: {wl.sessions} sessions x {wl.turns} turns, {n_tools} tools, "
        f"max_tokens {wl.max_tokens}, temperature {wl.temperature}, seed {wl.seed}",
        f"CPU: {cpu.get('cpu')} ({cpu.get('cores')} cores; {' '.join(cpu.get('isa_flags', []))})",
        "",
    ]
    ok = [r for r in results if r.get("rows")]
    for r in results:
        if not r.get("rows"):
            lines.append(f"{r['engine']}: did not run: {r.get('error', '?')[-600:]}")
    if not ok:
        return "\n".join(lines)
    sums = {r["engine"]: summarize(r["rows"]) for r in ok}
    lines += [
        "| engine | turns | p50 s/turn | p90 s/turn | prompt tok | out tok | cached | "
        "invalid forced calls |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in sums.items():
        why = ", ".join(f"{k} {v}" for k, v in sorted(s["failures"].items())) or "-"
        lines.append(
            f"| {name} | {s['turns']} | {s['p50_s']:.2f} | {s['p90_s']:.2f} | "
            f"{s['prompt_tokens_mean']:.0f} | {s['completion_tokens_mean']:.1f} | "
            f"{s['cached_fraction']:.1%} | {s['invalid_share']:.1%} ({why}) |"
        )
    turns = {name: per_turn_cached(r["rows"]) for name, r in zip(sums, ok, strict=True)}
    lines += ["", "Cached fraction of the prompt per turn:", ""]
    lines += ["| turn | " + " | ".join(sums) + " |", "|---" * (len(sums) + 1) + "|"]
    for k in sorted({k for t in turns.values() for k in t}):
        cells = " | ".join(f"{turns[n].get(k, 0.0):.1%}" for n in sums)
        lines.append(f"| {k + 1} | {cells} |")
    refs = [n for n in sums if n.startswith(REFERENCE)]
    if refs:
        ref = min(refs, key=lambda n: sums[n]["p50_s"])
        lines += ["", f"Ratios to {ref} (time: below 1 is faster):", ""]
        for name in (n for n in sums if not n.startswith(REFERENCE)):
            s, v = sums[name], sums[ref]
            lines.append(
                f"- {name}: p50 time x{s['p50_s'] / v['p50_s']:.2f}, p90 time "
                f"x{s['p90_s'] / v['p90_s']:.2f}, cached fraction {s['cached_fraction']:.1%} vs "
                f"{v['cached_fraction']:.1%}, invalid forced calls {s['invalid_share']:.1%} vs "
                f"{v['invalid_share']:.1%}"
            )
    return "\n".join(lines)
