"""The suite report's workload tables (markdown), one function per workload, from the
suite's result rows; report.py puts them in order under its header."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from benchmarks.load.plots import sweep_points

BASELINE = "radixrt"  # the system every ratio is taken against


def _find(rows: list[dict[str, Any]], study: str, system: str, **match: Any) -> dict | None:
    for r in rows:
        if (
            r["study"] == study
            and r["system"] == system
            and all(r.get(k) == v for k, v in match.items())
        ):
            return r
    return None


def fmt_ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def targets(rows: list[dict[str, Any]]) -> str:
    def tput(system: str, ds: str) -> float | None:
        r = _find(rows, "serving", system, dataset=ds)
        return r["request_throughput"] if r and r["completed"] else None

    lines = ["### Targets", "", "| target | measured | met |", "|---|---:|:---:|"]

    def add(name: str, value: float | None, ok: bool | None, fmt: str = "{:.2f}") -> None:
        shown = "-" if value is None else fmt.format(value)
        lines.append(f"| {name} | {shown} | {'-' if ok is None else 'yes' if ok else 'NO'} |")

    on, off = tput(BASELINE, "shared-prefix"), tput("radixrt cache off", "shared-prefix")
    llama = tput("llama.cpp", "shared-prefix")
    add(
        "shared-prefix: radixrt / cache off throughput >= 5x",
        on / off if on and off else None,
        on / off >= 5 if on and off else None,
    )
    add(
        "shared-prefix: radixrt / llama.cpp throughput >= 2x",
        on / llama if on and llama else None,
        on / llama >= 2 if on and llama else None,
    )
    lc = _find(rows, "long-context", BASELINE)
    frac = (
        lc["cached_ttft_s"] / lc["cold_ttft_s"]
        if lc and lc.get("cold_ttft_s") and lc.get("cached_ttft_s")
        else None
    )
    add(
        "TTFT of a cache hit < 10% of a miss (long context)",
        frac,
        frac < 0.10 if frac is not None else None,
        "{:.1%}",
    )
    sp = _find(rows, "serving", BASELINE, dataset="shared-prefix")
    hit_miss = (
        sp["mean_ttft_hit_s"] / sp["mean_ttft_miss_s"]
        if sp and sp.get("mean_ttft_hit_s") and sp.get("mean_ttft_miss_s")
        else None
    )
    add(
        "shared-prefix: mean TTFT of requests with a hit / without (includes queueing: all "
        "requests arrive at once)",
        hit_miss,
        hit_miss < 0.10 if hit_miss is not None else None,
        "{:.1%}",
    )
    ron, roff = tput(BASELINE, "random"), tput("radixrt cache off", "random")
    slow = 1 - ron / roff if ron and roff else None
    add(
        "random: radixrt at most 3% slower than cache off (throughput lost; < 0: faster)",
        slow,
        slow <= 0.03 if slow is not None else None,
        "{:+.1%}",
    )
    for r in rows:
        if (
            r["study"] == "serving"
            and r.get("page_size") == 1
            and r["dataset"] != "random"
            and r["system"] == BASELINE
            and r.get("hit_rate") is not None
        ):
            gap = r["optimal_hit_rate"] - r["hit_rate"]
            add(
                f"{r['dataset']}: hit rate within 0.02 of optimal "
                f"({r['hit_rate']:.3f} / {r['optimal_hit_rate']:.3f})",
                gap,
                gap <= 0.02,
                "{:.3f} below",
            )
    return "\n".join(lines)


def serving_table(rows: list[dict[str, Any]]) -> str:
    base = next((r for r in rows if r["system"] == BASELINE), None)
    lines = [
        "| system | requests | req/s | output tok/s | TTFT mean / median / p99 ms | "
        "TPOT mean ms | ITL p99 ms | E2E mean s | hit rate (optimal) | radixrt / system |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    short = [f"{r['system']}: {r['short_outputs']}" for r in rows if r.get("short_outputs")]
    for r in rows:
        hit = (
            "-"
            if r.get("hit_rate") is None
            else f"{r['hit_rate']:.3f} ({r['optimal_hit_rate']:.3f})"
        )
        lines.append(
            f"| {r['system']} | {r['completed']}/{r['num_requests']} | "
            f"{r['request_throughput']:.3f} | {r['output_throughput']:.1f} | "
            f"{ms(r['mean_ttft_s'])} / {ms(r['median_ttft_s'])} / {ms(r['p99_ttft_s'])} | "
            f"{ms(r['mean_tpot_s'])} | {ms(r['p99_itl_s'])} | {r['mean_e2e_s'] or 0:.2f} | "
            f"{hit} | {fmt_ratio(base and base['request_throughput'], r['request_throughput'])} |"
        )
    if short:
        lines.append(
            "\nRequests that ended before their output length (not comparable): " + ", ".join(short)
        )
    return "\n".join(lines)


def sweep(rows: list[dict[str, Any]], plots: dict[str, str], doc_dir: Path) -> str:
    points = sweep_points(rows)
    if not points:
        return ""
    lens = sorted({s for p in points.values() for s in p})
    lines = [
        "### Throughput vs shared-prefix length",
        "",
        "requests/s of the shared-prefix workload at each system-prompt length:",
        "",
        "| system | " + " | ".join(f"S={s}" for s in lens) + " |",
        "|---|" + "---:|" * len(lens),
    ]
    for system, p in points.items():
        lines.append(
            f"| {system} | " + " | ".join(f"{p[s]:.3f}" if s in p else "-" for s in lens) + " |"
        )
    return "\n".join(lines) + _img(plots.get("sweep"), doc_dir, "throughput vs prefix length")


def turns(rows: list[dict[str, Any]], plots: dict[str, str], doc_dir: Path) -> str:
    mt = [
        r
        for r in rows
        if r["study"] == "serving"
        and r.get("dataset") == "multi-turn"
        and r.get("page_size") in (None, 1)
    ]
    if not mt:
        return ""
    turns = sorted({int(t) for r in mt for t in r["ttft_by_turn_s"]})
    lines = [
        "### TTFT by turn (multi-turn)",
        "",
        "mean TTFT in ms of each turn's requests:",
        "",
        "| system | " + " | ".join(f"turn {t + 1}" for t in turns) + " |",
        "|---|" + "---:|" * len(turns),
    ]
    for r in mt:
        by = {int(k): v for k, v in r["ttft_by_turn_s"].items()}
        lines.append(f"| {r['system']} | " + " | ".join(ms(by.get(t)) for t in turns) + " |")
    return "\n".join(lines) + _img(plots.get("turns"), doc_dir, "TTFT by turn")


def _img(path: str | None, doc_dir: Path, alt: str) -> str:
    return f"\n\n![{alt}]({os.path.relpath(path, doc_dir)})" if path else ""
