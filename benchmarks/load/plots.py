"""PNG plots from the suite's result rows: throughput against the shared prefix's length, and
time to first token by turn. Nothing is plotted without matplotlib."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def sweep_points(rows: list[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """system -> {system-prompt length: requests/s} over the sweep and the main run."""
    points: dict[str, dict[int, float]] = {}
    for r in rows:
        if (
            r["study"] in ("serving", "sweep")
            and r.get("dataset") == "shared-prefix"
            and r.get("page_size") in (None, 1)
        ):
            s = int(r["args"][r["args"].index("--system-len") + 1])
            points.setdefault(r["system"], {})[s] = r["request_throughput"]
    return points


def make_plots(rows: list[dict[str, Any]], out_dir: Path) -> dict[str, str]:
    """PNG plots (throughput vs prefix length, TTFT by turn); {} without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots skipped: matplotlib is not installed (pip install -e '.[bench]')")
        return {}
    plots: dict[str, str] = {}
    points = sweep_points(rows)
    if points:
        fig, ax = plt.subplots(figsize=(6, 4))
        for system, p in points.items():
            xs = sorted(p)
            ax.plot(xs, [p[x] for x in xs], marker="o", label=system)
        ax.set(
            xlabel="shared system prompt (tokens)",
            ylabel="requests/s",
            title="shared-prefix throughput",
        )
        ax.legend()
        plots["sweep"] = _save(fig, out_dir / "shared_prefix_sweep.png")
    mt = [
        r
        for r in rows
        if r["study"] == "serving"
        and r.get("dataset") == "multi-turn"
        and r.get("page_size") in (None, 1)
    ]
    if mt:
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in mt:
            by = sorted((int(k) + 1, v * 1000) for k, v in r["ttft_by_turn_s"].items())
            ax.plot([t for t, _ in by], [v for _, v in by], marker="o", label=r["system"])
        ax.set(xlabel="turn", ylabel="mean TTFT (ms)", title="multi-turn: TTFT by turn")
        ax.legend()
        plots["turns"] = _save(fig, out_dir / "multi_turn_ttft.png")
    plt.close("all")
    return plots


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return str(path)
