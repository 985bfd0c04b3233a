"""The fleet's figure (results/plots/fleet_mooncake.png, DESIGN.md §Claims): routers on fleets of
each size, bars per router, from the rows `kvsim.analysis.claims_fleet` produced: prefix hit rate
against the trace's single-cache ceiling, TTFT p50 and p99, load imbalance. The titles' second lines are
computed from the plotted numbers (`fleet_findings`). `kvsim.analysis.plots` re-exports both names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matplotlib.axes import Axes

from kvsim.analysis.claims_model import Results
from kvsim.analysis.plots_common import _chars, _empty, _missing, _rate, _title, _wrap


def fleet_findings(fleets: Mapping[int, Results], top: float | None) -> tuple[str, str, str]:
    """The three fleet panels' findings, from the rows: hit rates of prefix-affinity against
    round-robin per fleet size (and the ceiling), TTFT p99's range, load imbalance's range."""
    from kvsim.analysis.claims_fleet import fleet_summary

    got = {n: fleet_summary(res) for n, res in fleets.items()}
    hits = ", ".join(
        f"{n} replicas: prefix-affinity {100 * g['prefix-affinity']['prefix_hit_rate_first_admission']:.1f} % vs "
        f"round-robin {100 * g['round-robin']['prefix_hit_rate_first_admission']:.1f} %"
        for n, g in got.items()
    )
    if top is not None:
        hits += f" (ceiling {100 * top:.1f} %)"
    p99 = [r["ttft_s_p99"] for g in got.values() for r in g.values()]
    imb = [r["load_imbalance"] for g in got.values() for r in g.values()]
    return hits, f"TTFT p99 {min(p99):.2f}-{max(p99):.2f} s", f"max/mean work {min(imb):.2f}-{max(imb):.2f}"


def draw_fleet(axes: Sequence[Axes], fleets: Mapping[int, Results], top: float | None = None) -> None:
    """Routers on a fleet (bars per router, one group per fleet size): prefix hit rate against the
    trace's ceiling, TTFT p50 and p99, load imbalance."""
    from kvsim.analysis.claims_fleet import ROUTERS, fleet_summary

    titles = (
        "Prefix hit rate by router (dashed: the trace's single-cache ceiling)",
        "TTFT by router (solid: p99, hatched: p50)",
        "Load imbalance by router (max / mean of computed tokens)",
    )
    missing = {n: why for n, res in fleets.items() if (why := _missing(res))}
    if missing or not fleets:
        for ax, title in zip(axes, titles, strict=False):
            _empty(ax, title, "; ".join(f"{n} replicas: {w}" for n, w in missing.items()) or "no rows")
        return
    got = {n: fleet_summary(res) for n, res in fleets.items()}
    findings = fleet_findings(fleets, top)
    width = 0.8 / len(ROUTERS)
    sizes = sorted(got)
    for i, router in enumerate(ROUTERS):
        xs = [k + (i - (len(ROUTERS) - 1) / 2) * width for k in range(len(sizes))]
        color = f"C{i}"
        axes[0].bar(xs, [100 * got[n][router]["prefix_hit_rate_first_admission"] for n in sizes], width,
                    label=router, color=color)  # fmt: skip
        axes[1].bar(xs, [got[n][router]["ttft_s_p99"] for n in sizes], width, label=router, color=color)
        axes[1].bar(xs, [got[n][router]["ttft_s_p50"] for n in sizes], width, color="white", alpha=0.6,
                    hatch="//", edgecolor=color)  # fmt: skip
        if len(axes) > 2:
            axes[2].bar(
                xs, [got[n][router]["load_imbalance"] for n in sizes], width, label=router, color=color
            )
    if top is not None:
        axes[0].axhline(100 * top, ls="--", color="black", lw=1)
    ylabels = ("prefix hit rate (% of prompt tokens)", "TTFT (s)", "max / mean work")
    row = fleets[sizes[0]].frame.row(0, named=True)
    blocks = {n: int(fleets[n].frame["num_blocks"][0]) - 1 for n in sizes}
    setup = (
        f"{row['model']} on {row['gpu']} per replica (roofline time) · "
        + ", ".join(f"{n} × {b:,}" for n, b in blocks.items())
        + f" blocks × {row['block_size']} tokens (the same total) · {_rate(row['workload'])} · "
        + f"{int(row['num_requests']):,} requests"
    )
    for ax, title, ylabel, finding in zip(axes, titles, ylabels, findings, strict=False):
        ax.set_xticks(range(len(sizes)), [f"{n} replicas" for n in sizes])
        ax.set_ylabel(ylabel)
        high = ax.get_ylim()[1]
        ax.set_ylim(0, high * 1.3)  # room for the legend above the bars
        _title(ax, title, finding)
        ax.set_xlabel(_wrap(setup, _chars(ax)))
        ax.legend(loc="upper center", ncol=len(ROUTERS), fontsize="small")
    most = max(r["prefix_hit_rate_first_admission"] for g in got.values() for r in g.values())
    axes[0].set_ylim(0, 100 * max(top or 0.0, most, 0.01) * 1.3)
