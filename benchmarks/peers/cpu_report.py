"""The CPU peers report: one row per workload and system, radixrt's ratios to vLLM-CPU (with
vLLM run in several dtypes, the faster of them in each workload and round: what a user would
pick).

Rows come from the load generator's summaries with `workload`, `system` and `round` added. With
several rounds (the systems alternate their order each round, so a drift in the machine's speed
falls on both), a row shows each figure's median over the rounds, and a ratio is the median of
the per-round ratios (each round's systems ran minutes apart) with its range over the rounds.
"""

from __future__ import annotations

from statistics import median
from typing import Any

REFERENCE = "vllm-cpu"  # the reference's system name, or the prefix of each of its dtypes' runs
FIGURES = ("request_throughput", "output_throughput", "median_ttft_s", "median_tpot_s")


def _ratio(rows: list[dict], ref: dict[int, dict], key: str) -> str:
    """Median of the per-round ratios of `key` to the reference's, with the range if several."""
    ratios = [
        r[key] / ref[r.get("round", 0)][key]
        for r in rows
        if r.get(key) and r.get("round", 0) in ref and ref[r.get("round", 0)].get(key)
    ]
    if not ratios:
        return "-"
    if len(ratios) == 1:
        return f"{ratios[0]:.2f}"
    return f"{median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def _median_row(rows: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in FIGURES:
        values = [r[key] for r in rows if r.get(key) is not None]
        out[key] = median(values) if values else None
    out["output_tokens"] = sum(r.get("output_tokens", 0) for r in rows)
    out["completed"] = sum(r.get("completed", 0) for r in rows)
    out["failed"] = sum(r.get("failed", 0) for r in rows)
    return out


def _reference(groups: dict[tuple[str, str], list[dict]], workload: str) -> dict[int, dict]:
    """Per round, the vLLM run of `workload` with the most requests/s (over its dtypes)."""
    best: dict[int, dict] = {}
    for (w, system), rows in groups.items():
        if w != workload or not system.startswith(REFERENCE):
            continue
        for r in rows:
            rnd = r.get("round", 0)
            if rnd not in best or (r.get("request_throughput") or 0) > (
                best[rnd].get("request_throughput") or 0
            ):
                best[rnd] = r
    return best


def format_report(rows: list[dict], cpu: dict[str, Any]) -> str:
    rounds = len({r.get("round", 0) for r in rows})
    lines = [
        f"CPU: {cpu['cpu']} ({cpu['machine']}, {cpu['cores']} cores), ISA flags: "
        f"{' '.join(cpu['isa_flags'])}; radixrt kernels: {cpu['radixrt_isa']}"
        + (f"; vLLM in {cpu['vllm_dtype']}" if cpu.get("vllm_dtype") else ""),
        *(
            [f"{rounds} rounds: medians; ratios are medians of per-round ratios (range)"]
            if rounds > 1
            else []
        ),  # fmt: skip
        "",
        "| workload | system | req/s | out tok/s | TTFT median (s) | TPOT median (ms) "
        "| out tokens/request | req/s vs vllm-cpu (faster dtype) | TTFT vs it |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["workload"], r["system"]), []).append(r)
    for (workload, system), group in groups.items():
        ref = _reference(groups, workload)
        m = _median_row(group)
        per_req = m["output_tokens"] / m["completed"] if m["completed"] else 0
        failed = f" ({m['failed']} failed)" if m["failed"] else ""
        lines.append(
            f"| {workload} | {system}{failed} | {m['request_throughput'] or 0:.2f} | "
            f"{m['output_throughput'] or 0:.1f} | {m['median_ttft_s'] or 0:.2f} | "
            f"{(m['median_tpot_s'] or 0) * 1000:.0f} | {per_req:.1f} | "
            f"{_ratio(group, ref, 'request_throughput')} | {_ratio(group, ref, 'median_ttft_s')} |"
        )
    return "\n".join(lines)
