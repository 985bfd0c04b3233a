"""What every plot of kvsim shares (`kvsim.analysis.plots` and its figure families `plots_fleet`,
`plots_plan`, `plots_tier`, ...): the colours and line styles of policies, the font sizes, and the helpers
that make a figure and write it (`_fig`, `_save`), draw a panel whose data is missing (`_empty`), read a
series with its confidence intervals (`series`), and write a title with its finding and an x label with
the setup (`_title`, `setup_line`, `_label_with_setup`; DESIGN.md §Sweeps and claims).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import matplotlib
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from kvsim.analysis.claims_model import Results, requests_ran, ticks_of

COLORS = {"token": "#2b8a3e", "reservation": "#f08c00", "internal": "#c92a2a", "external": "#5f3dc4"}
# vLLM drawn last as a thin solid line over a wide pale Orca (Oracle) band: where the two are equal both
# stay visible (a blue line inside a red band), where they differ each is its own line.
POLICY_STYLE: dict[str, dict[str, Any]] = {
    "orca-max": {"color": "#868e96", "ls": ":", "lw": 1.2, "zorder": 2},
    "orca-pow2": {"color": "#f08c00", "ls": "-.", "lw": 1.2, "zorder": 2},
    "orca-oracle": {"color": "#f03e3e", "ls": "-", "lw": 3.5, "zorder": 3, "alpha": 0.45},
    "vllm": {"color": "#1c7ed6", "ls": "-", "lw": 1.0, "zorder": 4},
}
FONT_SIZE, DASHBOARD_FONT_SIZE = 10, 13  # points: single figures, and the dashboard read from further away


# ----------------------------------------------------------------------------------------- helpers


def _fig(ncols: int = 1, nrows: int = 1, size: tuple[float, float] = (7.0, 4.5)) -> tuple[Figure, Any]:
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _empty(ax: Axes, title: str, why: str) -> None:
    """A panel whose data is missing: its title and why, both wrapped to the panel's width by hand (a
    reason naming a long path, one word to matplotlib's own wrapping, made the panel's decorations wider
    than the figure and constrained layout gave up on it)."""
    ax.set_title(_wrap(title, _chars(ax, 1.2)))
    ax.text(0.5, 0.5, _wrap(f"not available:\n{why}", _chars(ax)), ha="center", va="center")
    ax.set_axis_off()


def _missing(res: Results) -> str | None:
    if res.error:
        return res.error
    return None if res.frame.height else "no rows"


def series(res: Results, metric: str, by: str, **where: Any) -> tuple[list[Any], list[float], list[float]]:
    """(x values, means, 95 % CI half-widths; 0 for one seed) of `metric` against parameter `by`."""
    sel = res.agg
    for k, v in where.items():
        sel = sel.filter(pl.col(k) == v)
    sel = sel.sort(by)
    ci = [0.0 if c is None else float(c) for c in sel[f"{metric}_ci95"]]
    return sel[by].to_list(), [float(x) for x in sel[f"{metric}_mean"]], ci


def _rate(label: str) -> str:
    """How a workload's requests arrive, from its label (`sharegpt:max_tokens=2048`)."""
    from kvsim.analysis.sweep import WORKLOADS, parse_workload

    name, params = parse_workload(label)
    kind = WORKLOADS[name]
    if kind.synthetic is None:
        return f"{name} (trace timestamps)"
    if params.get("arrivals", kind.synthetic.get("arrivals")) == "all-at-once":
        return f"{name} (all queued at t=0)"
    return f"{name} (Poisson {params.get('arrival_rate', kind.synthetic.get('arrival_rate', 1.0)):g} req/s)"


def setup_line(res: Results) -> str:
    """The setup of an experiment's rows, read from them: model and GPU, pool (unless it varies), block
    size (unless it varies), workloads with their arrival rates, requests and seeds."""
    f = res.frame
    first = f.row(0, named=True)

    def varies(col: str) -> bool:
        return col in f.columns and f[col].n_unique() > 1

    parts = []
    model = first.get("model")
    parts.append(f"{model} on {first['gpu']}" if model and first.get("gpu") else str(model or "no model"))
    if ticks := ticks_text(res):
        parts.append(ticks)
    if not varies("num_blocks") and not varies("block_size"):
        parts.append(f"{first['num_blocks'] - 1:,} blocks × {first['block_size']} tokens")
    elif not varies("block_size"):
        parts.append(f"block {first['block_size']}")
    parts.append(", ".join(sorted({_rate(w) for w in f["workload"].to_list()})))
    seeds = f["seed"].n_unique()
    ran = requests_ran(f, int(first["requests"]))
    parts.append(f"{ran} requests" + (f" × {seeds} seeds (95 % CI)" if seeds > 1 else ""))
    return " · ".join(parts)


def ticks_text(res: Results) -> str | None:
    """How an experiment's rows tell time where they count steps (`time_model` ticks: every step the same
    `iteration_time_ps`), so that a rate in req/s and a latency in s are read as steps; None under a time
    model of a GPU (or rows without the column)."""
    from kvsim.model.units import fmt_duration_ps

    tick = ticks_of(res)
    return None if tick is None else f"{fmt_duration_ps(tick)} ticks (times count steps, not a GPU's time)"


def _chars(ax: Axes, scale: float = 1.0) -> int:
    """About how many characters of the current font (times `scale`) fit across `ax`."""
    inches = ax.get_position().width * ax.get_figure(root=True).get_figwidth()  # type: ignore[union-attr]
    return max(30, int(inches * 72 / (0.58 * scale * float(matplotlib.rcParams["font.size"]))))


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.fill(line, width) for line in text.split("\n"))


def _title(ax: Axes, title: str, finding: str) -> None:
    ax.set_title(_wrap(f"{title}\n{finding}", _chars(ax, 1.2)))


def _label_with_setup(ax: Axes, xlabel: str, res: Results) -> None:
    setup = _wrap(setup_line(res), _chars(ax))
    ax.set_xlabel(f"{_wrap(xlabel, _chars(ax))}\n{setup}" if xlabel else setup)


def _change(a: float, b: float, rel: float = 0.02) -> str:
    """'up' / 'down' / 'flat' from a to b (within `rel` of each other: flat)."""
    if abs(b - a) <= rel * max(abs(a), abs(b), 1e-12):
        return "flat"
    return "up" if b > a else "down"
