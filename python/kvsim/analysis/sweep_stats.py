"""A sweep's rows aggregated over seeds (DESIGN.md §Sweeps, "Aggregation"): the parameter and metric columns
of a rows frame, and per point the mean, standard deviation and 95 % confidence half-width (Student's t).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

import polars as pl

from kvsim.errors import InvalidArgumentError
from kvsim.model.config import SimConfig

# A sweep's parameter columns (`kvsim.analysis.sweep` reads them from here): every SimConfig field, the
# workload's parameters (`workload.*`) and the SLOs of a row (`ttft:500,tpot:50`,
# kvsim.engine.metrics.goodput_label).
CONFIG_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SimConfig) if f.name != "extra")
WORKLOAD_PREFIX = "workload."
SLO_COLUMN = "goodput_slos_ms"


def t_quantile_975(df: int) -> float:
    """Student's t 0.975 quantile (the 95 % two-sided interval) at `df` degrees of freedom, NaN below 1:
    `kvsim.analysis.moment_ci.t_quantile`'s (the one computation of it; until 2026-12-06 a table of three
    decimals to 30 and a shorter expansion above, 2.03943 against the exact 2.03951 at 31)."""
    from kvsim.analysis.moment_ci import t_quantile

    return math.nan if df < 1 else t_quantile(df)


# Metrics that are shares, bounded by [0, 1]: a t-interval that passes a bound (0.649 ± 4.0 at 2 seeds)
# is flagged where it is printed (`kvsim.cli.sweep_table`), not cut to the bounds.
SHARE_METRICS: frozenset[str] = frozenset(
    {
        "kv_utilization",
        "kv_allocated_fraction",
        "peak_allocated_fraction",
        "internal_fragmentation",
        "internal_fragmentation_of_allocated",
        "reservation_waste",
        "external_fragmentation",
        "stored_share_of_allocated",
        "prefix_hit_rate",
        "prefix_hit_rate_first_admission",
        "cpu_hit_rate",
        "miss_rate",
        "external_prefix_cache_hit_rate",
        "hit_rate_first_admission",
        "cpu_hit_rate_first_admission",
        "cpu_tier_occupancy",
        "cpu_tier_peak_occupancy",
        "pd_link_utilization",
        "pd_link_bandwidth_utilization",
        "decode_busy_fraction",
        "prefill_busy_fraction",
        "slo_attainment",
    }
)


def is_share(metric: str) -> bool:
    """Whether `metric` is a share in [0, 1] (`SHARE_METRICS`, and each SLO's `slo_attainment_<metric>`)."""
    return metric in SHARE_METRICS or metric.startswith("slo_attainment_")


def parameter_columns(frame: pl.DataFrame) -> list[str]:
    """The columns of a sweep frame that identify a point apart from its seed."""
    return [
        c
        for c in frame.columns
        if c in CONFIG_FIELDS
        or c.startswith(WORKLOAD_PREFIX)
        or c in ("workload", "requests", "backend", SLO_COLUMN)
    ]


DERIVED_AXES = ("num_blocks", "cpu_blocks")
"""Configuration columns a sweep derives (the pool's blocks from its memory): `point_axes` names them
beside the grid's when they differ between points."""


def point_axes(frame: pl.DataFrame, grid: Iterable[str] | None = None) -> list[str]:
    """The columns that tell a sweep's points apart as its table and its notes name them (`kvsim sweep`'s
    table, `kvsim.analysis.steady_state.sweep_too_short_note` and `sweep_overloaded_note`): the `grid`'s names and, if the workloads
    differ beyond the grid's workload parameters (or no grid name is a column), the workload, then the
    derived axes that vary. Without a
    `grid` (a frame read back with no sweep file): the parameter columns that vary."""
    if grid is None:
        return [c for c in parameter_columns(frame) if frame[c].n_unique() > 1]
    axes = [c for c in grid if c in frame.columns]
    # The workload's name, where it tells points apart that the grid's workload parameters do not (a grid
    # over `workload.arrival_rate` names each point's workload by its rate: the column would repeat it).
    own = [c for c in axes if c.startswith("workload.")]
    named_apart = frame.select(["workload", *own]).unique().height > (
        frame.select(own).unique().height if own else 1
    )
    if named_apart or not axes:
        axes = ["workload", *axes]
    axes += [c for c in DERIVED_AXES if c in frame.columns and c not in axes and frame[c].n_unique() > 1]
    return axes


def workloads_named_once(frame: pl.DataFrame, grid: Iterable[str]) -> pl.DataFrame:
    """`frame` with each `workload` label (`workload_label`'s `sharegpt:arrival_rate=4.0`) less the
    `grid`'s workload parameters, which have columns of their own (`workload.arrival_rate`): the name a
    table or a note gives a point's workload beside those columns (`sharegpt`). Unchanged without a
    `workload` column or a workload parameter in the grid."""
    own = {c.removeprefix(WORKLOAD_PREFIX) for c in grid if c.startswith(WORKLOAD_PREFIX)}
    if not own or "workload" not in frame.columns:
        return frame

    def shown(label: str) -> str:
        name, _, params = label.partition(":")
        pieces: list[str] = []
        for piece in params.split(",") if params else []:
            key, eq, _ = piece.partition("=")
            if (eq and key.isidentifier()) or not pieces:
                pieces.append(piece)
            else:  # (a value's own comma: part of the parameter before it)
                pieces[-1] += "," + piece
        kept = [p for p in pieces if p.partition("=")[0] not in own]
        return name + (":" + ",".join(kept) if kept else "")

    return frame.with_columns(pl.col("workload").map_elements(shown, return_dtype=pl.String))


def metric_columns(frame: pl.DataFrame) -> list[str]:
    """Numeric columns that are results (summary metrics and wall time), not parameters."""
    params = set(parameter_columns(frame)) | {"point_id", "seed", "kvsim_version"}
    return [c for c in frame.columns if c not in params and frame[c].dtype.is_numeric()]


def aggregate(
    frame: pl.DataFrame, metrics: Sequence[str] | None = None, by: Sequence[str] | None = None
) -> pl.DataFrame:
    """Mean, standard deviation and 95 % confidence half-width of each metric across seeds.

    Args:
        frame: sweep rows.
        metrics: metric columns (default: every numeric result column).
        by: grouping columns (default: every parameter column, i.e. all but the seed).

    Raises:
        InvalidArgumentError: a metric listed twice.

    Returns:
        One row per group: the `by` columns, `n_seeds`, and `<m>_mean`, `<m>_std`, `<m>_ci95` per metric
        (`ci95` = t(0.975, n-1) · std / sqrt(n), null for one value), each over the seeds with a value of
        that metric (n of them: a null, such as a latency with no request finished, or a NaN is no sample; `<m>_n`
        when some seed has none).
    """
    if frame.height == 0:
        return frame
    by = list(by) if by is not None else parameter_columns(frame)
    metrics = list(metrics) if metrics is not None else metric_columns(frame)
    twice = sorted({m for m in metrics if metrics.count(m) > 1})
    if twice:
        raise InvalidArgumentError(f"metrics {twice} listed twice; name each once")
    exprs: list[pl.Expr] = [pl.len().alias("n_seeds")]
    for m in metrics:
        # (a NaN is no value, as a null is not: the mean, the deviation and the count all leave it out,
        # so a seed's NaN makes the cell "(k of n)" rather than NaN)
        col = pl.col(m).cast(pl.Float64).fill_nan(None)
        n = col.count().alias(f"{m}_n")
        exprs += [col.mean().alias(f"{m}_mean"), col.std().alias(f"{m}_std"), n]
    out = frame.group_by(by, maintain_order=True).agg(exprs)
    ci = []
    for m in metrics:
        counts = out[f"{m}_n"].to_list()
        tq = pl.Series([t_quantile_975(int(k) - 1) if k > 1 else None for k in counts], dtype=pl.Float64)
        ci.append(
            (pl.lit(tq) * pl.col(f"{m}_std") / pl.col(f"{m}_n").cast(pl.Float64).sqrt())
            .fill_nan(None)
            .alias(f"{m}_ci95")
        )
    out = out.with_columns(ci)
    # (each metric's count only where it is not every seed's: a column that would say n_seeds again is
    # left out)
    same = [f"{m}_n" for m in metrics if (out[f"{m}_n"] == out["n_seeds"]).all()]
    return out.drop(same)


# The sweep's API; the names from kvsim.analysis.executors, sweep_store and kvsim.workloads.registry stay
# importable from here, the module README names.


__all__ = [
    "CONFIG_FIELDS",
    "SHARE_METRICS",
    "SLO_COLUMN",
    "WORKLOAD_PREFIX",
    "aggregate",
    "is_share",
    "metric_columns",
    "parameter_columns",
    "point_axes",
    "t_quantile_975",
]
