"""`kvsim sweep`'s printed table (DESIGN.md §Sweeps, "Aggregation"): each point's metrics aggregated over its
seeds, written as `kvsim run` writes the same quantities. A share (`sweep_stats.is_share`) reads in percent,
as run's `KV utilization 33.5 %` (it printed `kv_utilization 0.8221`); a count (an integer column of the
rows: rejected, preemptions, evictions, ...) reads as a whole number where it is one, its mean over several
seeds to one decimal where it is not (it printed `rejected 159.0`); other figures to four significant
digits; a request's latency in ms, as run's latency table (the rows' `ttft_s_p50` in seconds). Each column's
unit is the line under its name, run's unit where run prints the metric. The rows
written to parquet keep the raw values: only the printed table is in these units."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from kvsim.analysis.run_report import _GROUPS, _num
from kvsim.analysis.sweep_stats import (
    aggregate,
    is_share,
    parameter_columns,
    point_axes,
    workloads_named_once,
)
from kvsim.model.units import byte_unit

VERDICTS = ("overloaded",)
"""Row columns that are a run's yes or no (`overloaded`: its queue grew through it, `kvsim run`'s note):
`--show` prints `yes` / `no` where a point's seeds agree, else how many of them say yes (`sweep_table`)."""

PAST_BOUNDS = "(past 0..100 %)"
PAST_ZERO = "(past 0)"
# `kvsim run` prints a request's latencies in ms (its latency table, the tier's load wait): the rows keep
# seconds (`ttft_s_p50`), the table multiplies them by 1,000 under `ms`.
LATENCY_PREFIXES = ("ttft", "tpot", "itl", "e2e", "queueing", "load_wait")
# The units of quantities that cannot be negative: an interval reaching below 0 is marked `PAST_ZERO`.
NONNEGATIVE_UNITS = (
    "ms",
    "s",
    "s/token",
    "req/s",
    "tok/s",
    "requests",
    "tokens",
    "sequences",
    "steps",
    "blocks",
)
TRANSPORT = "collective_transport"

# Each metric's unit as `kvsim run` prints it (`run_report._GROUPS`: "%" for a share, "" for a bare
# count), then the sweep rows' own names for run's other figures (run's `request throughput` is the rows'
# `throughput_rps`, its `requests rejected` their `rejected`).
RUN_UNITS: dict[str, str] = {k: ("" if u == "count" else u) for _, rows in _GROUPS for k, _, u in rows}
UNITS: dict[str, str] = {
    **RUN_UNITS,
    "throughput_rps": "req/s",
    "request_goodput": "req/s",
    "throughput_tok_s": "tok/s",
    **dict.fromkeys(
        ("num_requests", "completed", "rejected", "steady_requests", "good_requests"), "requests"
    ),
    "output_tokens": "tokens",
    "time_weighted_batch": "sequences",
    "mean_batched_tokens": "tokens",
    "num_steps": "steps",
    "normalized_latency_s_per_token": "s/token",
}


def unit(metric: str) -> str:
    """The unit printed under `metric`'s name: "%" for a share, `UNITS`' where it has one, else what the
    name says (`_s`, `_s_p99`, `_s_mean`: seconds; `_tokens`: tokens; `_blocks`, `blocks_`: blocks); ""
    where none says (a bare count, such as preemptions)."""
    if is_share(metric):
        return "%"
    if metric in UNITS:
        return UNITS[metric]
    parts = metric.split("_")
    if parts[-1] == "s" or "s" in parts[1:-1]:
        # (a request's latency in ms, as run's latency table; a total such as load_wait_s_total in s)
        return "ms" if metric.startswith(LATENCY_PREFIXES) and "total" not in parts else "s"
    if parts[-1] == "tokens":
        return "tokens"
    if parts[-1] == "blocks" or parts[0] == "blocks":
        return "blocks"
    return ""


def _two_figures(x: float) -> str:
    """`x` to two significant figures, in positional notation (`18`, `0.16`, `1,200`): a half-width."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}" if x else "0"
    decimals = 1 - math.floor(math.log10(abs(x)))
    r = round(x, decimals)
    return f"{r:,.0f}" if decimals <= 0 else f"{r:.{decimals}f}"


def fmt_value(v: float, kind: str) -> str:
    """A point's value as the table prints it: `kind` "share" in percent to a tenth (run's `33.5 %`),
    "count" whole where it is whole (`159`), else to a tenth (a mean over seeds: `159.5`), other figures
    to four significant digits (run's `_num`: a tenth from 100 up)."""
    if kind == "count":
        v = 0.0 if abs(v) < 1e-9 else v  # (a float sum's rounding: 1e-14 is 0; -0.0 too)
        return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"
    return _num(float(v), "%" if kind == "share" else "").removesuffix(" %")


def cell(
    mean: float | None, ci: float | None, kind: str, n: int | None, n_seeds: int, nonnegative: bool = False
) -> str:
    """One metric's cell: its mean (`fmt_value`), `± half-width` where it has one (a share's in percentage
    points), `PAST_BOUNDS` after a share's whose interval passes 0 or 1, `PAST_ZERO` after a `nonnegative`
    quantity's (a latency, a rate, a count) whose interval reaches below 0, and `(k of n)` where only k of
    the point's seeds had a value; "null" where none had."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "null"
    text = fmt_value(mean, kind)
    if ci is not None and not math.isnan(ci):
        text += f" ± {_two_figures(100 * ci if kind == 'share' else ci)}"
        if kind == "share" and (mean - ci < 0 or mean + ci > 1):
            text += f" {PAST_BOUNDS}"
        elif kind != "share" and nonnegative and mean - ci < 0:
            text += f" {PAST_ZERO}"
    if n is not None and n < n_seeds:
        text += f" ({n} of {n_seeds})"
    return text


def byte_axis(values: Sequence[float | None]) -> list[str]:
    """A byte-sized axis's values (`kv_cache_bytes`, `swap_space_bytes`, ...) as the command line takes them,
    in the largest binary unit that keeps each at least 1, to six significant figures (`4 GiB`, `1.5 GiB`,
    `512 B`; it printed `4294967296`), `None` where unset; each in whole bytes (`4,294,967,296 B`) where
    two different values would print alike."""

    def text(v: float) -> str:
        shown = byte_unit(v)
        return f"{v:,.0f} B" if shown is None else f"{shown[1]:.6g} {shown[0]}"

    texts = [str(v) if v is None else text(v) for v in values]
    named = {t: v for t, v in zip(texts, values, strict=True)}
    if len(named) < len(set(values)):
        return [str(v) if v is None else f"{v:,.0f} B" for v in values]
    return texts


def multi_gpu_transports(frame: Any) -> list[str]:
    """How a sweep's points on more than one GPU (tp · dp > 1) pass their collectives between GPUs
    (`SimConfig.collective_transport`, the rows' `collective_transport`), each once in the order met; none
    where the rows lack the column (a sweep file from before it)."""
    import polars as pl

    if TRANSPORT not in frame.columns:
        return []
    gpus = pl.lit(1)
    for c in ("tensor_parallel_size", "data_parallel_size"):
        if c in frame.columns:
            gpus = gpus * pl.col(c).fill_null(1)
    return frame.filter(gpus > 1)[TRANSPORT].drop_nulls().unique(maintain_order=True).to_list()


def sweep_table(frame: Any, grid: Iterable[str], show: Sequence[str]) -> Any:
    """The rows aggregated across seeds, in grid order, with the parameters that vary as the axes (the
    `grid`'s names and, if several, the workload) and each metric in `show` as `mean ± 95 % CI` in run's
    units (`cell`; of a verdict, `VERDICTS`, yes, no or how many seeds say yes); where the multi-GPU points
    pass their collectives between GPUs in different ways (`multi_gpu_transports`: a GPU with NVLink and
    one without, `pcie_p2p` on and off), the `collective_transport` each point resolves to after the axes
    (one way for all of them: no column; host-staged, `kvsim.cli.transport_note` says it). Each column's
    name is the metric's (as `--show` and the rows name it) above its unit (`unit`), on a second line."""
    import polars as pl

    grid = list(grid)
    verdicts = [m for m in show if m in VERDICTS]
    counts = {m for m in show if m in frame.columns and frame[m].dtype.is_integer()}
    if verdicts:  # (a yes or no a seed: its mean is the share of the seeds saying yes)
        frame = frame.with_columns(pl.col(verdicts).cast(pl.Float64))
    differs = len(multi_gpu_transports(frame)) > 1
    agg = aggregate(frame, metrics=show, by=[*parameter_columns(frame), TRANSPORT] if differs else None)
    agg = workloads_named_once(agg, grid)  # (a grid's workload parameters have their own columns)
    axes = point_axes(agg, grid) + ([TRANSPORT] if differs else [])
    cols: dict[str, Any] = {c: agg[c] for c in axes}
    for c in (
        axes
    ):  # (a yes-or-no or unset axis value as the notes name it: None, False; polars wrote null, false)
        if c.endswith("_bytes") and agg[c].dtype.is_numeric():
            cols[c] = pl.Series(c, byte_axis(agg[c].to_list()), dtype=pl.String)
        elif agg[c].dtype == pl.Boolean or agg[c].null_count():
            cols[c] = pl.Series(c, [str(v) for v in agg[c].to_list()], dtype=pl.String)
    cols["n_seeds"] = agg["n_seeds"]
    seeds = agg["n_seeds"].to_list()
    for m in show:
        means = agg[f"{m}_mean"].to_list()
        ns = agg[f"{m}_n"].to_list() if f"{m}_n" in agg.columns else seeds
        if m in verdicts:
            cells = [
                "null"  # (no seed has it: a file's rows from before the column)
                if s is None or math.isnan(s)
                else "yes"
                if s == 1
                else "no"
                if s == 0
                else f"{round(s * n)} of {n} seeds"
                for s, n in zip(means, ns, strict=True)
            ]
        else:
            kind = "share" if is_share(m) else "count" if m in counts else "value"
            cis = agg[f"{m}_ci95"].to_list()
            if unit(m) == "ms":  # (the rows' seconds in run's ms)
                means = [None if v is None else 1000 * v for v in means]
                cis = [None if v is None else 1000 * v for v in cis]
            rows = zip(means, cis, ns, seeds, strict=True)
            nonneg = kind == "count" or unit(m) in NONNEGATIVE_UNITS
            cells = [cell(mean, ci, kind, n, k, nonneg) for mean, ci, n, k in rows]
        cols[f"{m}\n{unit(m)}"] = pl.Series(cells, dtype=pl.String)
    return pl.DataFrame(cols)


def ci_legend(table: Any) -> list[str]:
    """The lines under a sweep table that say what a cell is where its points ran several seeds (the mean
    over them, ± the 95 % t-interval's half-width, t's size with few seeds), and what `PAST_BOUNDS`
    marks; none when no cell has an interval (one seed a point: each cell is that run's value)."""
    import polars as pl

    from kvsim.analysis.sweep_stats import t_quantile_975

    cells = [c for c in table.columns if table[c].dtype == pl.String]
    if not any(table[c].str.contains(" ± ", literal=True).any() for c in cells):
        return []
    n = sorted(set(table["n_seeds"].to_list()))
    seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]} to {n[-1]}"
    few = min(n)
    lines = [
        f"mean over each point's {seeds} seeds (a count's to a tenth where it is not whole) ± the 95 % "
        f"t-interval's half-width (a share's in percentage points): t(0.975, n-1) × std / √n, "
        f"t = {t_quantile_975(few - 1):.3g} at {few} seeds"
        + (" (so the interval is wide: run more --seeds to narrow it)" if few <= 3 else "")
    ]
    if any(table[c].str.contains(PAST_BOUNDS, literal=True).any() for c in cells):
        lines.append(
            f"{PAST_BOUNDS}: a share whose interval reaches below 0 % or above 100 %, printed as computed: "
            "the t-interval means little so near a share's bound; more seeds narrow it"
        )
    if any(table[c].str.contains(PAST_ZERO, literal=True).any() for c in cells):
        lines.append(
            f"{PAST_ZERO}: a quantity that cannot be negative (a latency, a rate, a count) whose interval reaches "
            "below 0, printed as computed: its seeds disagree too much for the t-interval; more seeds narrow it"
        )
    return lines
