"""The disaggregation claims' plot (`kvsim.analysis.claims_pd`): goodput per GPU of the best aggregated
fleet and the best disaggregated split against SLO tightness, one panel per workload
(`results/plots/pd_goodput.png`). It reads the experiment's setup and `comparison` from
`kvsim.analysis.claims_pd_setup`, and `claims_pd` imports it to write the figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from kvsim.analysis.claims_pd_setup import (
    ATTAINMENT,
    GPU,
    MAX_GPUS,
    MODEL,
    SUSTAINED,
    WORKLOAD_LABEL,
    comparison,
)


def _ms(v: float) -> str:
    return f"{v / 1000:.3g} s" if v >= 1000 else f"{v:.3g} ms"


def draw_pd_goodput(ax: Any, frame: pl.DataFrame, workload: str) -> None:
    """One workload's panel: per level, each family's best goodput per GPU, labelled by its fleet."""
    levels = comparison(frame, workload)
    xs = list(range(len(levels)))
    for key, style, name in (
        ("aggregated", dict(marker="o", color="tab:blue"), "best aggregated fleet"),
        ("disaggregated", dict(marker="s", color="tab:red"), "best disaggregated split"),
    ):
        ys = [None if lv[key] is None else lv[key][1] for lv in levels]
        ax.plot(xs, [float("nan") if y is None else y for y in ys], label=name, **style)
        for x, lv in zip(xs, levels, strict=True):
            if lv[key] is not None:
                (p, d), y = lv[key]
                other = lv["aggregated" if key == "disaggregated" else "disaggregated"]
                # The upper point's label above it, the lower's below, so two close points' labels part
                # (a tie: the split's above).
                above = y > other[1] if other is not None and y != other[1] else key == "disaggregated"
                ax.annotate(
                    f"{d}" if p == 0 else f"{p}:{d}",
                    (x, y),
                    textcoords="offset points",
                    xytext=(0, 7 if above else -13),
                    ha="center",
                    fontsize="small",
                    color=style["color"],
                )
    ax.set_xticks(xs)
    ax.set_xticklabels(
        [
            f"{lv['level']}\nTPOT {_ms(lv['tpot_slo_ms'])}\nTTFT {_ms(lv['ttft_slo_ms'])}"
            + (f"\n{len(lv['left_out'])} of {lv['fleets']} fleets\nleft out" if lv["left_out"] else "")
            for lv in levels
        ],
        fontsize="small",
    )
    ax.set_ylabel("goodput per GPU (req/s at SLO)")
    n = int(frame.filter(pl.col("workload") == workload)["requests"][0])
    ax.set_title(f"{WORKLOAD_LABEL.get(workload, workload)} (its first {n:,} requests)")
    ax.set_xlabel(
        f"SLO tightness (tight TPOT ... loose); {MODEL} on {GPU}, {ATTAINMENT:.0%} of requests within both;\n"
        f"the best of every fleet of at most {MAX_GPUS} GPUs; left out: knees from runs shorter\n"
        f"than {SUSTAINED:g}x a request's latency bound; labels: aggregated replicas, or prefill:decode; one seed"
    )
    ax.set_ylim(0, ax.get_ylim()[1] * 1.06)  # room for the labels above the top points
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")


def plot_pd_goodput(frame: pl.DataFrame, path: Path) -> Path:
    """Draws every workload's panel side by side and writes the PNG to `path`."""
    from matplotlib.figure import Figure

    from kvsim.analysis.plots_common import _save

    workloads = list(dict.fromkeys(frame["workload"].to_list()))
    fig = Figure(figsize=(7.5 * len(workloads), 5.8), layout="constrained")
    axes = fig.subplots(1, len(workloads), squeeze=False)[0]
    for ax, w in zip(axes, workloads, strict=True):
        draw_pd_goodput(ax, frame, w)
    fig.suptitle("Prefill/decode disaggregation: goodput per GPU against SLO tightness (kvsim)")
    return _save(fig, Path(path))


__all__ = ["draw_pd_goodput", "plot_pd_goodput"]
