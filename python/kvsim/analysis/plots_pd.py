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


def _times(v: float) -> str:
    return f"{v:.3g}x"


def draw_pd_goodput(ax: Any, frame: pl.DataFrame, workload: str, legend: bool = True) -> None:
    """One workload's panel: per level, each family's best goodput per GPU, labelled by its fleet; each
    level's bounds with the multiple of the unloaded run's TPOT p50 and TTFT p90 they are. With `legend`,
    the families' key in the panel's upper left (`plot_pd_goodput` draws one key above both panels
    instead: inside a panel it hid a point's label, user53 #5)."""
    levels = comparison(frame, workload)
    rows = frame.filter(pl.col("workload") == workload)
    tpot0_ms = float(rows["base_tpot_p50_s"][0]) * 1000
    ttft0_ms = float(rows["base_ttft_p90_s"][0]) * 1000
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
            f"{lv['level']}\nTPOT {_ms(lv['tpot_slo_ms'])} = {_times(lv['tpot_slo_ms'] / tpot0_ms)}"
            f"\nTTFT {_ms(lv['ttft_slo_ms'])} = {_times(lv['ttft_slo_ms'] / ttft0_ms)}"
            + (f"\n{len(lv['left_out'])} of {lv['fleets']} fleets\nleft out" if lv["left_out"] else "")
            for lv in levels
        ],
        fontsize="small",
    )
    ax.set_ylabel("goodput per GPU (req/s at SLO)")
    n = int(frame.filter(pl.col("workload") == workload)["requests"][0])
    ax.set_title(f"{WORKLOAD_LABEL.get(workload, workload)} (its first {n:,} requests)")
    # (the levels' "x1.5" multiplies the unloaded TPOT p50, not the tight level's bound: the label says so)
    ax.set_xlabel(
        f"SLO tightness (tight TPOT ... loose): each bound a multiple of the unloaded run's TPOT p50\n"
        f"({_ms(tpot0_ms)}) or TTFT p90 ({_ms(ttft0_ms)}); {MODEL} on {GPU}, {ATTAINMENT:.0%} of requests within both;\n"
        f"the best of every fleet of at most {MAX_GPUS} GPUs; left out: knees from runs shorter\n"
        f"than {SUSTAINED:g}x a request's latency bound; labels: aggregated replicas, or prefill:decode; one seed"
    )
    ax.set_ylim(0, ax.get_ylim()[1] * 1.06)  # room for the labels above the top points
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(loc="upper left", fontsize="small")


def plot_pd_goodput(frame: pl.DataFrame, path: Path) -> Path:
    """Draws every workload's panel side by side and writes the PNG to `path`."""
    from kvsim.analysis.plots_common import _save

    return _save(pd_goodput_figure(frame), Path(path))


def pd_goodput_figure(frame: pl.DataFrame) -> Any:
    """The figure `plot_pd_goodput` writes: every workload's panel side by side, one key under them."""
    from matplotlib.figure import Figure

    workloads = list(dict.fromkeys(frame["workload"].to_list()))
    fig = Figure(figsize=(7.5 * len(workloads), 6.4), layout="constrained")
    axes = fig.subplots(1, len(workloads), squeeze=False)[0]
    for ax, w in zip(axes, workloads, strict=True):
        draw_pd_goodput(ax, frame, w, legend=False)
    fig.suptitle("Prefill/decode disaggregation: goodput per GPU against SLO tightness (kvsim)")
    # One key for both panels, under them and outside them: no point's label can fall under it (above them it
    # overlapped the title).
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize="small")
    return fig


__all__ = ["draw_pd_goodput", "pd_goodput_figure", "plot_pd_goodput"]
