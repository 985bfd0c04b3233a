"""Parameter sweeps: grids over `SimConfig` fields crossed with workloads and seeds, run in parallel on
threads, processes or a Dask cluster, appended to a parquet file one row per point, resumable, and
aggregated across seeds.

A *point* is one simulation: a config (the base fields plus one value of every grid parameter), a named
workload with its parameters, a seed and a request count. Its row holds every parameter, every summary
metric (`kvsim.simulate(...).summary`) and the wall time; `point_id` (a hash of the fully resolved config,
the workload, the seed, the request count, the backend and the SLOs if any) is what resume compares, so a
point already in the output file is never run again. Delete the file (or pass `resume=False`) to recompute
after the engine changes. A knob whose meaning changed (`kvsim.analysis.sweep_revisions`) changes the ids
of the points with a changed value, and a row written under the old meaning is dropped and run again.

SLOs (`goodput={"ttft": 500, "tpot": 50}`, ms, `kvsim.engine.metrics.parse_goodput`'s forms) add goodput and SLO
attainment to every row (`kvsim.engine.metrics.goodput_columns`: `request_goodput`, `good_requests`,
`slo_attainment`, `slo_attainment_<metric>` per SLO) and the SLOs themselves as `goodput_slos_ms`
(`ttft:500,tpot:50`). They are part of the point's identity: a sweep resumed with other SLOs runs its
points again as new rows (told apart by `goodput_slos_ms`), never mixing them with the old ones; a sweep
without SLOs keeps the ids it always had.

Grid names are `SimConfig` field names (`block_size`, `policy`, `num_blocks`, ...), or `workload.<name>`
for a parameter of a synthetic workload (`workload.arrival_rate`, `workload.sharing_ratio`). Everything is
validated before any work starts: unknown names, empty value lists, values of the wrong type, unknown
workloads and invalid combinations (every point's `SimConfig` is built up front) raise
`InvalidArgumentError`.

Workloads are named (`WORKLOADS`, `kvsim.workloads.registry`: `sharegpt`, `alpaca`, `sharegpt-real`,
`synthetic` and the real traces; `NAME:key=value,...` overrides parameters). Points run on
`kvsim.analysis.executors` (threads, processes or Dask); rows go to `kvsim.analysis.sweep_store`'s
parquet file. Those modules' names stay importable from here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kvsim.analysis.executors import EXECUTORS, check_executor, executor_session, progress_bar
from kvsim.analysis.sweep_grid import (
    LIST_VALUED,
    base_release,
    check_grid,
    coerce,
    parse_grid_args,
    read_toml,
    toml_int,
    toml_value,
    value_separator,
)
from kvsim.analysis.sweep_revisions import knob_revisions, legacy_identities, stale_rows
from kvsim.analysis.sweep_stats import (
    CONFIG_FIELDS,
    SLO_COLUMN,
    WORKLOAD_PREFIX,
    aggregate,
    metric_columns,
    parameter_columns,
    t_quantile_975,
)
from kvsim.analysis.sweep_store import ResultStore, check_output, rows_frame
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import CLUSTER_KNOBS, KNOBS, PAPER_SETUP, SimConfig
from kvsim.model.units import fmt_count
from kvsim.workloads.registry import (
    WORKLOAD_CACHE,
    WORKLOADS,
    format_value,
    make_workload,
    parse_workload,
    synthetic_kwargs,
    unknown_name,
    workload_label,
)
from kvsim.workloads.table import arrival_rate

# The claims suite's base: the paper's setup (PagedAttention §6.1), OPT-13B on one A100-40GB with 12 GiB of
# KV cache. A sweep's own base starts from KNOBS' defaults (kvsim.model.config), as SimConfig and `kvsim run` do.
DEFAULT_BASE: dict[str, Any] = dict(PAPER_SETUP)

# One line per SimConfig field: the help of `kvsim run --<field>` and of `--grid` (from kvsim.model.config.KNOBS).
FIELD_HELP: dict[str, str] = {name: knob.help for name, knob in KNOBS.items() if name != "extra"}


# -------------------------------------------------------------------------------------------- points


@dataclass(frozen=True)
class Point:
    """One simulation of a sweep (plain data, so it pickles to processes and Dask workers).

    Attributes:
        config: SimConfig keyword arguments (base fields and this point's grid values).
        workload: workload name (a key of `WORKLOADS`).
        workload_params: that workload's parameter overrides.
        seed: workload seed (0 for traces).
        requests: requests to simulate (traces: at most their length).
        backend: `rust` or `reference`.
        grid: the grid parameters of this point and their values (config fields and `workload.*`).
        goodput: SLO bounds in ms by metric (`kvsim.engine.metrics.parse_goodput`'s output), or empty for none.
    """

    config: Mapping[str, Any]
    workload: str
    workload_params: Mapping[str, Any]
    seed: int
    requests: int
    backend: str = "rust"
    grid: Mapping[str, Any] = field(default_factory=dict)
    goodput: Mapping[str, float] = field(default_factory=dict)

    def sim_config(self) -> SimConfig:
        return SimConfig(**self.config)

    @property
    def workload_key(self) -> str:
        return json.dumps([self.workload, sorted(self.workload_params.items()), self.requests, self.seed])

    def point_id(
        self, resolved: Mapping[str, Any] | None = None, *, revisions: Mapping[str, int] | None = None
    ) -> str:
        """A stable hash of everything that determines this point's row (the SLOs only when there are
        some, so a sweep without them keeps the ids it had before SLOs existed; the revisions of knobs
        whose meaning changed, `sweep_revisions.knob_revisions`, only for a point with a changed value;
        `revisions` overrides them, which is how `legacy_ids` finds a point's rows of before)."""
        resolved = resolved if resolved is not None else self.sim_config().resolved()
        if revisions is None:
            revisions = knob_revisions(resolved)
        # The fleet's knobs only when one differs from its default, so a one-replica point keeps the id
        # it had before fleets existed.
        resolved = {k: v for k, v in resolved.items() if not (k in CLUSTER_KNOBS and v == KNOBS[k].default)}
        # Data and expert parallelism likewise (a point without them keeps its id from before them; a point
        # with a model and a GPU has a new id anyway: its time model became the roofline).
        for k in ("data_parallel_size", "enable_expert_parallel"):
            if resolved.get(k) == KNOBS[k].default:
                resolved.pop(k, None)
        # The release only when it is not the defaults' (0.34.0), so a point keeps the id it had before
        # configurations recorded one (a sweep takes no preset: every earlier point was 0.34.0's).
        if resolved.get("vllm_release") == KNOBS["vllm_release"].default:
            resolved.pop("vllm_release", None)
        # The watermark's rule only with a watermark (without one both rules run alike), so a point
        # without one keeps the id it had before the rule existed.
        if not resolved.get("watermark"):
            resolved.pop("watermark_rule", None)
        identity: dict[str, Any] = {
            "config": resolved,
            "workload": self.workload,
            "workload_params": self.workload_params,
            "seed": self.seed,
            "requests": self.requests,
            "backend": self.backend,
        }
        if self.goodput:
            identity["goodput"] = {k: float(v) for k, v in self.goodput.items()}
        if revisions:
            identity["revisions"] = dict(revisions)
        blob = json.dumps(identity, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    def legacy_ids(self) -> list[tuple[str, str]]:
        """The ids this point had before a knob's meaning changed, each with that knob (a changed value's
        earlier revisions; a changed default's old value): a row under one was written under the old meaning."""
        ids = legacy_identities(self.sim_config().resolved())
        return [(knob, self.point_id(config, revisions=revisions)) for knob, config, revisions in ids]


def simulate_point(point: Point, workload: Any, config: SimConfig, record_timeseries: bool | int) -> Any:
    import kvsim

    extra: dict[str, Any] = {"goodput": dict(point.goodput)} if point.goodput else {}
    if is_fleet_point(point, config):
        return kvsim.simulate_cluster(workload, config, backend=point.backend, **extra)
    if record_timeseries:
        extra["record_timeseries"] = record_timeseries
    return kvsim.simulate(workload, config, backend=point.backend, **extra)


def is_fleet_point(point: Point, config: SimConfig) -> bool:
    """Whether a point runs `kvsim.simulate_cluster`: it names a fleet knob (`replicas`, `router`, ...:
    a grid axis or the base) or has more than one replica; its row then has the fleet's summary columns
    (`load_imbalance`, `load_imbalance_requests`), with one replica too, so a `replicas` axis gives one
    table."""
    return config.replicas > 1 or any(name in point.config for name in CLUSTER_KNOBS)


def run_point(point: Point) -> dict[str, Any]:
    """Runs one point and returns its row: parameters, summary metrics (with the goodput columns of its
    SLOs, `kvsim.engine.metrics.goodput_columns`, as `simulate(..., goodput=)` gives them), the span of
    its finished requests' arrivals and the requests a steady state needs (`steady_columns`), wall time.

    The workload is built once per process and reused by the points that share it (threads wait for
    the one building it), so `workload_s` is 0 on a cache hit.
    """
    import kvsim

    config = point.sim_config()
    workload, workload_s = WORKLOAD_CACHE.get(
        point.workload_key,
        lambda: make_workload(point.workload, point.workload_params, point.requests, point.seed),
    )
    t0 = time.perf_counter()
    result = simulate_point(point, workload, config, False)
    wall = time.perf_counter() - t0
    resolved = config.resolved()
    row: dict[str, Any] = {
        "point_id": point.point_id(resolved),
        "workload": workload_label(point.workload, point.workload_params),
        "seed": point.seed,
        "requests": point.requests,
        "backend": point.backend,
    }
    row.update(resolved)
    # (the collectives' transport resolved, beside the unresolved pcie_p2p; not in `resolved`, which ids
    # a point: it follows from the fields)
    row["collective_transport"] = config.collective_transport
    if row.get("router_weights") is not None:  # a mapping: one text column (`prefix=3,queue=1`)
        row["router_weights"] = ",".join(f"{k}={v:g}" for k, v in row["router_weights"].items())
    row.update({WORKLOAD_PREFIX + k: _plain(v) for k, v in point.workload_params.items()})
    row.update({k: _plain(v) for k, v in point.grid.items() if k.startswith(WORKLOAD_PREFIX)})
    if point.goodput:
        from kvsim.engine.metrics import goodput_label

        row[SLO_COLUMN] = goodput_label(point.goodput)
    row.update(result.summary)
    row.update(steady_columns(result, workload))
    row["wall_s"] = wall
    row["workload_s"] = workload_s
    row["kvsim_version"] = kvsim.__version__
    return row


def steady_columns(result: Any, workload: Any) -> dict[str, Any]:
    """A row's `arrival_span_s`, the span of its finished requests' arrivals in seconds, which `kvsim
    sweep`'s note holds against the row's `e2e_s_p99` (`kvsim.analysis.steady_state.sweep_too_short_note`,
    kvsim run's rule), and `steady_requests`, the requests a steady state needs at the run's rate as
    `kvsim run`'s note counts them (`steady_state.steady_requests` at `run_report.note_rate`'s rate: the
    workload's own, else the observed one; at most `steady_state.COUNT_CEILING`, 2**53, a floor past it);
    None where none finished (the span 0 where one did), arrivals came at
    once, or no rate can be told; and `overloaded`, whether its queue grew through the run
    (`steady_state.queue_growth`, the rule of `kvsim run`'s "overloaded" note), which `kvsim sweep`'s note
    names (`steady_state.sweep_overloaded_note`)."""
    from kvsim.analysis.run_report import note_rate
    from kvsim.analysis.steady_state import queue_growth, steady_requests, warmup

    overloaded = queue_growth(result) is not None
    w = warmup(result)
    if w is None:
        # (one finished request: its arrival spans 0 s, so the sweep's note names the point, no rate)
        one = int(result.summary.get("completed") or 0) == 1
        return {"arrival_span_s": 0.0 if one else None, "steady_requests": None, "overloaded": overloaded}
    finished, span, e2e = w
    rate = note_rate(workload, finished, arrival_rate(finished, span))
    need = None if rate is None or span <= 0 else steady_requests(e2e, rate[0], finished, span)
    return {"arrival_span_s": span, "steady_requests": need, "overloaded": overloaded}


def _plain(v: Any) -> Any:
    return format_value(v) if isinstance(v, tuple | list) else v


@dataclass
class SweepSpec:
    """Everything a sweep needs; build it with `SweepSpec.from_toml` or keywords, then `points()`.

    Attributes:
        name: names the output (`results/<name>.parquet`).
        grid: parameter -> values (config fields and `workload.*`), crossed.
        base: fixed SimConfig fields under the grid (unset fields: `kvsim.model.config.KNOBS`' defaults).
        workloads: workload specs (`sharegpt`, `alpaca:arrival_rate=10`, ...), crossed with the grid.
        seeds: seeds 0..seeds-1 for synthetic workloads (traces run once).
        requests: requests per point.
        backend: engine backend.
        goodput: SLOs in ms (`{"ttft": 500, "tpot": 50}`, or any form `kvsim.engine.metrics.parse_goodput`
            takes): every row gains goodput and SLO attainment, and the SLOs join the point's identity.
    """

    name: str = "sweep"
    grid: dict[str, list[Any]] = field(default_factory=dict)
    base: dict[str, Any] = field(default_factory=dict)
    workloads: list[Any] = field(default_factory=lambda: ["sharegpt"])
    seeds: int = 1
    requests: int = 10_000
    backend: str = "rust"
    goodput: Any = field(default_factory=dict)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> tuple[SweepSpec, dict[str, Any]]:
        """Reads a sweep file; returns the spec and the run options it sets (executor, workers, output).

        The file: top-level `name`, `requests`, `seeds`, `workloads` (list of specs or tables with
        `name`), `backend`, `executor`, `workers`, `scheduler`, `output`; `goodput` (SLOs in ms: a
        table `{ttft = 500, tpot = 50}`, or the flag's text `"ttft:500 tpot:50"`); table `[base]` of
        fixed SimConfig fields; table `[grid]` of lists.

        Raises:
            InvalidArgumentError: a missing, unreadable or malformed file, an unknown key, or a value of
                the wrong type (a count that is not a whole number, a `workloads` that is not a list).
        """
        p = Path(path)
        where = f"sweep file {p}"
        data = read_toml(p, "sweep file")
        known = {"name", "requests", "seeds", "workloads", "backend", "base", "grid", "goodput"}
        options = {"executor", "workers", "scheduler", "output"}
        unknown = set(data) - known - options
        if unknown:
            raise InvalidArgumentError(f"{where}: unknown keys {sorted(unknown)}")
        for key in ("name", "backend", "executor", "scheduler", "output"):
            if key in data and not (isinstance(data[key], str) and data[key].strip()):
                raise InvalidArgumentError(f"{where}: {key} {data[key]!r} must be a non-empty string")
        for key in ("base", "grid"):
            if not isinstance(data.get(key, {}), dict):
                raise InvalidArgumentError(f"{where}: {key} must be a [{key}] table, not {data[key]!r}")
        if not isinstance(data.get("workloads", []), list):  # a string would be read letter by letter
            raise InvalidArgumentError(
                f'{where}: workloads {data["workloads"]!r} must be a list (workloads = ["sharegpt"])'
            )
        spec = cls(name=data.get("name", p.stem))
        spec.base = dict(data.get("base", {}))
        try:  # (the release first: it decides how the model is read)
            release = base_release(spec.base, data.get("grid", {}), toml=True)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{where}: [base] {exc}") from None
        for key, value in spec.base.items():  # a run file's [config] rule: no "400" for an integer
            if key in CONFIG_FIELDS:  # (an unknown field is named by points(), with the closest ones)
                try:
                    toml_value(key, value, release)
                except InvalidArgumentError as exc:
                    said = f"[base] {exc}"
                    if key == "model" and release is not None and _latest_reads(value):
                        # (the file's release refused it: named, as `kvsim run` names what set its release)
                        set_by = f"[base] vllm_release {spec.base['vllm_release']!r}"
                        said = f"[base] model (read under {set_by}): {exc}"
                    raise InvalidArgumentError(f"{where}: {said}") from None
        try:
            spec.grid = check_grid(data.get("grid", {}), toml=True, release=release)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{where}: {exc}") from None
        spec.workloads = list(data.get("workloads", spec.workloads))
        spec.seeds = toml_int(where, data, "seeds", spec.seeds, 1)
        spec.requests = toml_int(where, data, "requests", spec.requests, 1)
        spec.backend = data.get("backend", spec.backend)
        if "goodput" in data:
            from kvsim.engine.metrics import parse_goodput

            try:
                spec.goodput = parse_goodput(data["goodput"])
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"{where}: {exc}") from None
        if "workers" in data:
            data["workers"] = toml_int(where, data, "workers", 1, 1)
        return spec, {k: data[k] for k in options if k in data}

    def points(self, *, skip_invalid: bool = False) -> list[Point]:
        """Every point, workload-major (so a worker's cached workload serves its neighbours).

        Raises:
            InvalidArgumentError: a bad option, an unknown workload or base field, or invalid combinations
                (every one is listed unless `skip_invalid`).
        """
        return self._expand(skip_invalid)[0]

    def invalid(self) -> list[tuple[str, str]]:
        """The grid's invalid combinations, each with why (those `points(skip_invalid=True)` leaves out), as
        (the combination, the reason); `invalid_text` writes them."""
        return self._expand(True)[1]

    def _expand(self, skip_invalid: bool) -> tuple[list[Point], list[tuple[str, str]]]:
        """`points` and the invalid combinations it left out (raising for them unless `skip_invalid`)."""
        from kvsim.workloads.specs import plain_number

        # A float or a bool is refused, not truncated or taken as 1; a numpy integer is its int
        # (`plain_number`, the workload parameters' rule).
        requests, seeds = (
            toml_int("SweepSpec", {name: plain_number(getattr(self, name))}, name, 1, 1)
            for name in ("requests", "seeds")
        )
        if self.backend not in ("rust", "reference"):
            raise InvalidArgumentError(f"backend {self.backend!r} is not 'rust' or 'reference'")
        if not self.workloads:
            raise InvalidArgumentError("no workloads given")
        from kvsim.engine.metrics import parse_goodput

        slos = parse_goodput(self.goodput)
        for k in self.base:
            if k not in CONFIG_FIELDS:
                raise unknown_name(k, CONFIG_FIELDS, "base field")
        release = base_release(self.base, self.grid)  # (first: it decides how the model is read)
        base = {k: coerce(k, v, release) for k, v in self.base.items()}
        grid = check_grid(self.grid, release=release)
        for k in grid:
            if k in base:  # the grid's values would replace it at every point
                raise InvalidArgumentError(
                    f"{k} is both a base field ({format_value(base[k])}) and a grid parameter "
                    f"({', '.join(format_value(v) for v in grid[k])}); give it in one of them"
                )
        if isinstance(self.workloads, str | bytes) or not isinstance(self.workloads, Sequence):
            raise InvalidArgumentError(f"workloads {self.workloads!r} must be a list of workloads")
        from kvsim.workloads.specs import is_trace_file

        for w in self.workloads:  # a file of one's own is `kvsim run`'s (a sweep names its workloads)
            if isinstance(w, str) and is_trace_file(w):
                raise InvalidArgumentError(
                    f"workload {w!r}: a sweep's workloads are named ({', '.join(sorted(WORKLOADS))}); "
                    "a trace file of your own runs with kvsim run --workload PATH"
                )
        parsed = [parse_workload(w) for w in self.workloads]
        labels = [workload_label(n, p) for n, p in parsed]
        if len(set(labels)) != len(labels):
            raise InvalidArgumentError(f"a workload is listed twice: {labels}")
        workload_grid = {
            k[len(WORKLOAD_PREFIX) :]: v for k, v in grid.items() if k.startswith(WORKLOAD_PREFIX)
        }
        for name, params in parsed:
            if workload_grid and not WORKLOADS[name].seeded:
                raise InvalidArgumentError(
                    f"grid {sorted(WORKLOAD_PREFIX + k for k in workload_grid)} applies to synthetic "
                    f"workloads, not the trace {name!r}"
                )
            if WORKLOADS[name].seeded:
                _check_synthetic(name, params, workload_grid)
        names = list(grid)
        combos: list[dict[str, Any]] = [{}]
        for n in names:
            combos = [{**c, n: v} for c in combos for v in grid[n]]
        points: list[Point] = []
        bad: list[tuple[str, str]] = []
        config_ok: dict[str, bool] = {}
        for (wname, wparams), _label in zip(parsed, labels, strict=True):
            seed_range = range(seeds) if WORKLOADS[wname].seeded else range(1)
            for combo in combos:
                cfg = {**base, **{k: v for k, v in combo.items() if not k.startswith(WORKLOAD_PREFIX)}}
                wp = {
                    **wparams,
                    **{
                        k[len(WORKLOAD_PREFIX) :]: v
                        for k, v in combo.items()
                        if k.startswith(WORKLOAD_PREFIX)
                    },
                }
                key = json.dumps(cfg, sort_keys=True, default=str)
                if key not in config_ok:
                    try:
                        SimConfig(**cfg)
                        config_ok[key] = True
                    except (InvalidArgumentError, TypeError, ValueError) as exc:
                        config_ok[key] = False
                        bad.append((str(combo or cfg), str(exc)))
                if not config_ok[key]:
                    continue
                for seed in seed_range:
                    points.append(Point(cfg, wname, wp, seed, requests, self.backend, combo, slos))
        if bad and not skip_invalid:
            # (one line, as every CLI error: `kvsim sweep` prints it as it is)
            raise InvalidArgumentError(
                f"{fmt_count(len(bad), 'invalid grid combination')} (split the grid, or skip them with --skip-invalid): "
                f"{invalid_text(bad)}"
            )
        if not points:
            raise InvalidArgumentError("the grid has no valid points")
        return points, bad


def _latest_reads(model: Any) -> bool:
    """Whether the latest release reads `model` (a refusal under another release is that release's)."""
    try:
        toml_value("model", model)
    except InvalidArgumentError:
        return False
    return True


def invalid_text(bad: Sequence[tuple[str, str]], most: int = 8) -> str:
    """A grid's invalid combinations (`SweepSpec.invalid`) on one line: the combinations refused for the same
    reason listed together before it once (a grid of 4 points refused alike wrote its 600-character reason 4
    times), the first `most` reasons and how many more."""
    by_reason: dict[str, list[str]] = {}
    for combo, reason in bad:
        by_reason.setdefault(reason, []).append(combo)
    parts = [f"{' and '.join(combos)}: {reason}" for reason, combos in by_reason.items()]
    more = len(parts) - most
    return "; ".join(parts[:most]) + (f"; ... and {more} more reasons" if more > 0 else "")


def _check_synthetic(name: str, params: Mapping[str, Any], grid: Mapping[str, Sequence[Any]]) -> None:
    """Builds two requests of every workload variant so bad values fail before any work starts."""
    from kvsim import workloads

    variants: list[dict[str, Any]] = [dict(params)]
    for k, values in grid.items():
        variants = [{**v, k: x} for v in variants for x in values]
    for k, values in grid.items():  # each grid value alone first, so the error names the grid value
        for x in values:
            try:
                workloads.synthetic(**synthetic_kwargs(name, {**params, k: x}, 2, 0))
            except (TypeError, ValueError) as exc:
                raise InvalidArgumentError(
                    f"grid {WORKLOAD_PREFIX}{k}={format_value(x)}: not valid for workload {name} ({exc})"
                ) from None
    for v in variants:
        try:
            workloads.synthetic(**synthetic_kwargs(name, v, 2, 0))
        except (TypeError, ValueError) as exc:  # InvalidArgumentError is a ValueError
            raise InvalidArgumentError(f"workload {workload_label(name, v)}: {exc}") from None


def execute(
    points: Sequence[Point],
    *,
    executor: str = "threads",
    workers: int | None = None,
    scheduler: str | None = None,
    dask_processes: bool = False,
) -> Iterable[dict[str, Any]]:
    """Runs points in parallel, yielding rows in completion order (`executor_session`'s options).

    Raises:
        InvalidArgumentError: an unknown executor, workers < 1, or a scheduler without `dask`.
    """
    check_executor(executor, workers, scheduler)

    def rows() -> Iterator[dict[str, Any]]:
        with executor_session(
            executor, workers=workers, scheduler=scheduler, dask_processes=dask_processes
        ) as run:
            yield from run(run_point, points)

    return rows()


@dataclass
class SweepOutcome:
    """What `run_sweep` did.

    Attributes:
        frame: every row of the output (old and new).
        ran: points run now.
        skipped: points found in the output already.
        wall_s: seconds the run took.
        path: the parquet file (None when not written).
        replaced: rows dropped from the file because they were written before a knob's meaning changed,
            by knob (`sweep_revisions`); their points ran again.
    """

    frame: pl.DataFrame
    ran: int
    skipped: int
    wall_s: float
    path: Path | None
    replaced: dict[str, int] = field(default_factory=dict)


def run_sweep(
    spec: SweepSpec,
    *,
    output: str | os.PathLike[str] | None = None,
    executor: str = "threads",
    workers: int | None = None,
    scheduler: str | None = None,
    resume: bool = True,
    progress: bool = True,
    skip_invalid: bool = False,
    dask_processes: bool = False,
    flush_every_s: float = 10.0,
) -> SweepOutcome:
    """Validates the whole sweep, skips points already in `output`, runs the rest, writes every row.

    Args:
        spec: the sweep.
        output: parquet path (None: keep rows in memory only).
        executor: `threads`, `processes` or `dask`.
        workers: parallel workers (default: CPU count).
        scheduler: Dask scheduler address.
        resume: skip points already in `output` (False: start the file afresh).
        progress: show a progress bar with ETA on stderr.
        skip_invalid: drop invalid grid combinations instead of failing.
        dask_processes: local Dask workers as processes.
        flush_every_s: rewrite the parquet file at most this often while running.

    Returns:
        A `SweepOutcome`.

    Raises:
        InvalidArgumentError: anything wrong with the sweep, before any point runs.
    """
    points = spec.points(skip_invalid=skip_invalid)
    check_executor(executor, workers, scheduler)
    store = ResultStore(output, resume=resume, flush_every_s=flush_every_s)
    ids = [p.point_id() for p in points]
    if len(set(ids)) != len(ids):
        raise InvalidArgumentError("the grid lists the same point twice (two values resolve to one config)")
    # Rows written before a knob's meaning changed (`sweep_revisions`): dropped, so their points run again.
    stale, replaced = stale_rows(points, store.done) if store.old.height else (set(), {})
    store.drop(stale)
    done = store.done
    todo = [p for p, i in zip(points, ids, strict=True) if i not in done]
    t0 = time.perf_counter()
    bar = progress_bar(len(todo), spec.name, progress)
    try:
        if todo:
            for row in execute(
                todo, executor=executor, workers=workers, scheduler=scheduler, dask_processes=dask_processes
            ):
                store.add(row)
                if bar is not None:
                    bar.update(1)
    except BaseException:
        # Interrupted or failed: keep what ran (as a part at least) so that the next run resumes from it.
        store.flush()
        with contextlib.suppress(Exception):
            store.finish()
        raise
    finally:
        if bar is not None:
            bar.close()
    store.finish()
    frame = store.frame()
    if frame.height and "point_id" in frame.columns:
        # The rows of this sweep's points, in grid order (workload, then the grid as given, then seed),
        # whatever order they completed in.
        order = pl.DataFrame({"point_id": ids, "_grid_order": range(len(ids))})
        frame = frame.join(order, on="point_id", how="inner").sort("_grid_order").drop("_grid_order")
    return SweepOutcome(
        frame, len(todo), len(points) - len(todo), time.perf_counter() - t0, store.path, replaced
    )


__all__ = [
    "CONFIG_FIELDS",
    "DEFAULT_BASE",
    "EXECUTORS",
    "FIELD_HELP",
    "LIST_VALUED",
    "SLO_COLUMN",
    "WORKLOADS",
    "Point",
    "ResultStore",
    "SweepOutcome",
    "SweepSpec",
    "aggregate",
    "check_grid",
    "check_output",
    "coerce",
    "execute",
    "executor_session",
    "invalid_text",
    "make_workload",
    "metric_columns",
    "parameter_columns",
    "parse_grid_args",
    "parse_workload",
    "progress_bar",
    "read_toml",
    "rows_frame",
    "run_point",
    "run_sweep",
    "simulate_point",
    "t_quantile_975",
    "toml_int",
    "toml_value",
    "value_separator",
    "workload_label",
]
