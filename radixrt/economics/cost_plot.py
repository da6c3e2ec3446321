"""`radixrt cost --plot`: cost by provider with and without caching, and cost against the shared
prefix's length. matplotlib is imported only here, when a plot is asked for."""

from __future__ import annotations

from pathlib import Path

from radixrt.economics.cost import CostReport


def plot_costs(
    report: CostReport,
    sweep: dict[str, list[tuple[int, float, float]]] | None,
    path: str | Path,
) -> None:
    """Write a PNG: bars of each row's cost (scaled to 30 days), and with `sweep` (from
    cost.prefix_sweep) each row's cost against the shared prefix length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale = report.month_scale or 1.0
    panels = 2 if sweep else 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4.8), squeeze=False)
    ax = axes[0][0]
    labels = [f"{r.model}\n{r.rules}" for r in report.rows]
    xs = range(len(report.rows))
    width = 0.4
    ax.bar([x - width / 2 for x in xs], [r.bill.uncached_usd * scale for r in report.rows],
           width, label="without caching", color="#bbbbbb")  # fmt: skip
    ax.bar([x + width / 2 for x in xs], [r.bill.cost_usd * scale for r in report.rows],
           width, label="with caching", color="#3b75af")  # fmt: skip
    for row in report.self_hosted:
        style = "-" if row.label.endswith("on") else "--"
        ax.axhline(row.cost_usd * scale, color="#c44e52", linestyle=style,
                   label=f"self-hosted, {row.label}")  # fmt: skip
    ax.set_xticks(list(xs), labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("USD per 30 days")
    ax.set_title("Cost by provider", fontsize=10)
    ax.legend(fontsize=7)
    if sweep:
        ax = axes[0][1]
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        models = list(dict.fromkeys(label.split(" (")[0] for label in sweep))
        for label, points in sweep.items():
            model = label.split(" (")[0]
            color = colors[models.index(model) % len(colors)]
            style = ":" if "explicit" in label else "-"
            xs_, cached = [p[0] for p in points], [p[2] for p in points]
            ax.plot(xs_, cached, marker="o", ms=3, color=color, linestyle=style, label=label)
        for model in models:
            points = next(v for k, v in sweep.items() if k.startswith(model + " ("))
            ax.plot([p[0] for p in points], [p[1] for p in points], linestyle="--", lw=0.8,
                    color=colors[models.index(model) % len(colors)], alpha=0.5)  # fmt: skip
        ax.set_xlabel("shared prefix tokens")
        ax.set_ylabel("USD per 30 days (dashed: without caching)")
        ax.set_yscale("log")
        ax.set_title("Cost against shared-prefix length", fontsize=10)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(report.workload, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
