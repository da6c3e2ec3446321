"""The suite report's study tables (markdown): programs, cache granularity and long context, from
the suite's result rows; report_tables.py holds the workload tables and the cells both format."""

from __future__ import annotations

from typing import Any

from benchmarks.load.report_tables import BASELINE, fmt_ratio, ms


def programs(rows: list[dict[str, Any]]) -> str:
    progs = [r for r in rows if r["study"] == "programs"]
    if not progs:
        return ""
    systems = list(dict.fromkeys(r["system"] for r in progs))
    lines = [
        "### Programs (SGLang paper workloads)",
        "",
        "programs/s (mean latency s); the ratio is radixrt's programs/s over each "
        "system's; `skipped`: the server cannot run it (see the notes).",
        "",
        "| workload | "
        + " | ".join(systems)
        + " | "
        + " | ".join(f"radixrt / {s}" for s in systems if s != BASELINE)
        + " |",
        "|---|" + "---:|" * (2 * len(systems) - 1),
    ]
    for wl in dict.fromkeys(r["workload"] for r in progs):
        by = {r["system"]: r for r in progs if r["workload"] == wl}
        cells = []
        for s in systems:
            r = by.get(s)
            cells.append(
                "skipped"
                if r is None or r.get("skipped")
                else f"{r['programs_per_s']:.3f} ({r['mean_latency_s'] or 0:.2f})"
                + (" *" if r.get("error") else "")
            )
        base = by.get(BASELINE, {}).get("programs_per_s")
        ratios = [
            fmt_ratio(base, by.get(s, {}).get("programs_per_s")) for s in systems if s != BASELINE
        ]
        lines.append(f"| {wl} | " + " | ".join(cells + ratios) + " |")
    errors = [
        f"- {r['system']} / {r['workload']}: {r['error']}"
        for r in progs
        if r.get("error") and not r.get("skipped")
    ]
    skipped = sorted({r["error"].split(" (")[0] for r in progs if r.get("skipped")})
    return "\n".join(
        lines
        + (["", "Errors (*):", *errors] if errors else [])
        + [f"\nSkipped where the server answered: {e}" for e in skipped]
    )


def granularity(rows: list[dict[str, Any]]) -> str:
    g = [
        r
        for r in rows
        if r["study"] == "serving"
        and r.get("page_size")
        and r["kind"] == "radixrt"
        and "cache off" not in r["system"]
        and r["dataset"] != "random"
    ]
    if not g:
        return ""
    lines = [
        "### Granularity: page size",
        "",
        "radixrt with the radix cache on at `--page-size` 1, 16 and 32:",
        "",
        "| workload | page size | hit rate | optimal | req/s | output tok/s | mean TTFT ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(g, key=lambda r: (r["dataset"], r["page_size"])):
        lines.append(
            f"| {r['dataset']} | {r['page_size']} | {r['hit_rate'] or 0:.3f} | "
            f"{r['optimal_hit_rate']:.3f} | {r['request_throughput']:.3f} | "
            f"{r['output_throughput']:.1f} | {ms(r['mean_ttft_s'])} |"
        )
    return "\n".join(lines)


def long_context(rows: list[dict[str, Any]]) -> str:
    lc = [r for r in rows if r["study"] == "long-context"]
    if not lc:
        return ""
    lines = [
        "### Long-context TTFT",
        "",
        "A document and a short question, then the same document with another question "
        "(one output token each):",
        "",
        "| system | prompt tokens | TTFT cold ms | TTFT second ms | second / cold | "
        "cached tokens |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in lc:
        lines.append(
            f"| {r['system']} | {r['prompt_tokens'] or '-'} | {ms(r['cold_ttft_s'])} | "
            f"{ms(r['cached_ttft_s'])} | {fmt_ratio(r['cached_ttft_s'], r['cold_ttft_s'])}"
            f" | {'-' if r['cached_tokens'] is None else r['cached_tokens']} |"
        )
    return "\n".join(lines)
