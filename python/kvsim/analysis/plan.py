"""Capacity search (DESIGN.md §Capacity search): the highest request rate a configuration sustains under
SLOs (`plan`), and the inverse questions: the smallest replica count (`smallest_replicas`), the smallest
memory (`smallest_memory`) that meets a target rate (`kvsim.analysis.plan_smallest`), and the best of a
list of candidates by requests set aside, then rate at SLO (`best_of`, `kvsim.analysis.plan_compare`). This module holds the rates,
the search's rounds they all run on, and `plan`; the probes are `kvsim.analysis.plan_probes`'s.

Every probe is a full simulation through a *probe*: a function `(workload, config) -> summary dict`
(`simulate_probe`, `kvsim.simulate(...).summary`, by default); a cluster's summary (the same keys plus the
fleet's) plugs in the same way. SLOs are bounds on the summary's metrics (`METRICS`): latency percentiles
and means in seconds (`ttft_p99`, `tpot_p99`, `e2el_p99`, `queueing_p50`, ...: the summary's `ttft_s_p99`,
..., what `kvsim.engine.metrics` reports as `p99_ttft_ms`, in ms), the paper's normalised latency
(`normalized_latency`, s/token) and the share of requests meeting per-request SLOs (`goodput_fraction`,
`slo_attainment` of `kvsim.engine.metrics`, for the `goodput={"ttft": 500, "tpot": 50}` bounds in ms that
`--goodput ttft:500 tpot:50` gives), a lower bound.

The rate is changed by scaling the workload's arrivals (`kvsim.workloads.specs.apply_trace_params`'s
`time_scale`, what `request_rate=` does): a trace replays faster or slower, and a generator's Poisson or
gamma arrivals at `arrival_rate` scaled by `r / arrival_rate` are the arrivals it draws at rate `r`
(numpy draws exponential gaps as a standard draw times the scale). The rate of a workload is its
generator's `arrival_rate` (divided by an earlier `time_scale`), else its mean rate `(n - 1) / (last -
first arrival)`, the definition of `request_rate=` (and arrivals rescaled by it have that mean as their rate,
whatever generated them: `rate_basis`).

The search: a bracket (from a start rate, double until a probe fails or halve until one passes, up to a
cap), then bisection, in geometric steps, until the bracket's upper end is within `precision` of its
lower end (relative; 2 % by default). Each round probes `width` points at once (the workers of the sweep
executors, `kvsim.analysis.executors.executor_session`: threads, processes or Dask), so a round of `w` probes shrinks
the bracket by a factor `w + 1`. The answer is the bracket's passing end: for a rate, the highest rate
seen to pass with every probe below it passing too (the knee).

Monotonicity: the search assumes a probe passes at every rate below one that passes (and, for replicas
and memory, at every value above one that passes). Simulations are not always monotone (a slower arrival
pattern can preempt more; a larger pool can admit a batch whose prefill delays others). A probe that
contradicts it is never hidden: the bracket is taken at the lowest failing rate (so the answer is a rate
below which every probe passed), and every contradicting pair is listed in `PlanResult.violations`, said
in `message` and drawn in the plot.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from kvsim.analysis.plan_probes import (
    MEMORY_KNOBS,
    _settles,
    cluster_probe,
    default_probe,
    pd_probe,
    probe_summary,
    set_knob,
    set_replicas,
    settling_reasons,
    simulate_probe,
    unservable,
)
from kvsim.analysis.plan_sampling import bound_outside_ci, check_judgeable, fraction_columns
from kvsim.analysis.plan_search import (
    DEFAULT_MAX_PROBES,
    DEFAULT_PRECISION,
    METRICS,
    SLO,
    PlanResult,
    Search,
    _steady,
    check_precision,
    parse_slos,
    served_none,
)
from kvsim.errors import InvalidArgumentError
from kvsim.model.units import fmt_count
from kvsim.reference.engine import REJECT_REASONS
from kvsim.workloads.table import arrival_rate

RATE_RANGE = 2.0**12  # the default cap and floor of a rate search: the start rate x and / this factor

# ------------------------------------------------------------------------------------------- rates


def workload_rate(workload: Any) -> float:
    """The request rate of a workload (module docstring): a generator's `arrival_rate` (over any
    `time_scale` applied since), else `(n - 1) / (last - first arrival)` (`rate_basis` says which; arrivals
    rescaled by `request_rate` to a mean give that mean).

    Raises:
        InvalidArgumentError: a workload whose requests all arrive at once, or of fewer than 2 requests
            (it has no rate to scale).
    """
    meta = getattr(workload, "meta", {}) or {}
    arrival = getattr(workload, "arrival", None)
    if arrival is None:
        raise InvalidArgumentError(f"workload {workload!r} is not a kvsim.Workload (it has no arrivals)")
    if len(arrival) < 2:
        raise InvalidArgumentError(
            f"capacity search scales arrivals: a workload of {fmt_count(len(arrival), 'request')} has no "
            "rate to scale (give it 2 or more: --requests)"
        )
    span = float(arrival[-1] - arrival[0])
    if span <= 0:
        raise InvalidArgumentError(
            "capacity search scales arrivals: the workload's requests all arrive at once (use a Poisson, "
            "gamma or constant arrival process, or a trace)"
        )
    rate = meta.get("arrival_rate")
    if rate is not None and rate_basis(workload) == "arrival_rate":
        scale = meta.get("time_scale", 1.0)
        for key, value in (("arrival_rate", rate), ("time_scale", scale)):
            ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            if not ok or value <= 0:
                raise InvalidArgumentError(
                    f"workload meta {key} {value!r} is not a positive number: the capacity search reads the "
                    "generator's rate from it (drop it from meta to use the arrivals' mean rate)"
                )
        return float(rate) / float(scale)
    return arrival_rate(len(arrival), span)


def rate_basis(workload: Any) -> str:
    """What `workload_rate` reads: "arrival_rate", a generator's nominal Poisson, gamma or constant rate
    (over any `time_scale`; a sample's own mean differs from it by chance), reproduced by `kvsim run
    --workload NAME:arrival_rate=R`; else "mean", the arrivals' mean rate `(n - 1) / span` (a trace, a
    selection of rows, arrivals rescaled by `request_rate`), reproduced by `kvsim run --request-rate R`."""
    meta = getattr(workload, "meta", {}) or {}
    generated = meta.get("arrivals") in ("poisson", "gamma", "constant")
    return (
        "arrival_rate"
        if generated and meta.get("arrival_rate") is not None and "request_rate" not in meta
        else "mean"
    )


def at_rate(
    workload: Any,
    rate: float,
    base_rate: float | None = None,
    higher: str = "search higher rates (--start-rate, --min-rate)",
) -> Any:
    """The workload with its arrivals scaled to `rate` requests per second (`time_scale = base / rate`);
    `higher` says how to ask a higher rate when this one puts the arrivals past the clock."""
    from kvsim.model.knob_table import MAX_TIME_PS, PS_PER_S
    from kvsim.workloads.specs import apply_trace_params

    base = workload_rate(workload) if base_rate is None else base_rate
    out = apply_trace_params(workload, {"time_scale": base / rate}, "capacity search")
    last = float(out.arrival[-1]) if len(out) else 0.0
    if not last * PS_PER_S < MAX_TIME_PS:
        # (the engine's input refused it as "row N: arrival ... past the simulated clock's range: rebase the
        # timestamps", which no flag of the search changes)
        raise InvalidArgumentError(
            f"rate {rate:g} requests/s puts the last of {len(out):,} arrivals at {last:.4g} s, past the "
            f"simulated clock's range (about 53 days): {higher}"
        )
    return out


# ------------------------------------------------------------------------------------------ running


@dataclass(frozen=True)
class _Job:
    """One probe as plain data (it pickles to processes and Dask workers when the probe does)."""

    index: int
    probe: Callable[[Any, Any], Mapping[str, Any]]
    workload: Any
    config: Any


def _run_job(job: _Job) -> tuple[int, dict[str, Any], float]:
    t0 = time.perf_counter()
    summary = dict(job.probe(job.workload, job.config))
    return job.index, summary, time.perf_counter() - t0


def _check_count(name: str, value: Any, lo: int) -> int:
    # numbers.Integral: Python's ints and numpy's integers (never a bool, nor numpy's bool_)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo:
        raise InvalidArgumentError(f"{name} {value!r} must be a whole number >= {lo}")
    return int(value)


def _check_positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy's numbers too
        raise InvalidArgumentError(f"{name} {value!r} must be a positive number")
    try:
        v = float(value)
    except OverflowError:  # an int too large for a float
        raise InvalidArgumentError(
            f"{name} (an integer of {len(str(value))} digits) is out of range"
        ) from None
    if not (math.isfinite(v) and v > 0):
        raise InvalidArgumentError(f"{name} {value!r} must be a positive number")
    return v


def _resolve_probe(
    probe: Any, slos: Sequence[SLO], goodput: Any, backend: str, default: Callable[..., Any] | None = None
) -> Callable[..., Any]:
    needs_goodput = any(s.metric == "goodput_fraction" for s in slos)
    if goodput is not None:
        from kvsim.engine.metrics import parse_goodput

        goodput = parse_goodput(goodput) or None
    if needs_goodput and goodput is None:
        raise InvalidArgumentError(
            "slo goodput_fraction needs per-request SLOs: goodput={'ttft': 500, 'tpot': 50} (ms; "
            "--goodput ttft:500 tpot:50)"
        )
    if goodput is not None and not needs_goodput:
        raise InvalidArgumentError(
            f"goodput {goodput} is read only by a goodput_fraction SLO (the share of requests meeting it): "
            "add one (slos={'goodput_fraction': 0.9}; --slo goodput_fraction:0.9) or drop goodput"
        )
    if probe is None:
        return functools.partial(default or simulate_probe, goodput=goodput, backend=backend)
    if not callable(probe):
        raise InvalidArgumentError(f"probe {probe!r} is not callable (workload, config) -> summary")
    return probe  # type: ignore[no-any-return]


def _check_summary(summary: Mapping[str, Any], slos: Sequence[SLO], aside: int) -> None:
    """Refuses a probe summary (a caller's probe's) whose interval inputs contradict themselves
    (DESIGN.md §Capacity search, "Sampling"): `slo_attainment` outside [0, 1] for a goodput SLO,
    `num_requests` or a `quantile_n` count not a non-negative integer (or fewer requests than those set
    aside), an interval of an SLO's statistic (`quantile_ci`, `mean_ci`) not a pair of finite numbers or
    None, inverted or not holding the statistic.

    Raises:
        InvalidArgumentError: naming the key.
    """

    from kvsim.analysis.moment_ci import _count, _real

    def count(name: str, v: Any) -> int:
        return _count(f"probe summary {name}", v)

    def real(name: str, v: Any) -> float:
        return _real(f"probe summary {name}", v)

    if summary.get("num_requests") is not None:
        total = count("num_requests", summary["num_requests"])
        if total < aside:
            raise InvalidArgumentError(
                f"probe summary num_requests {total} is fewer than the {aside} requests set aside as unservable"
            )
    counts = summary.get("quantile_n") or {}
    if not isinstance(counts, Mapping):
        raise InvalidArgumentError(f"probe summary quantile_n {counts!r} must map a latency to its count")
    for name, v in counts.items():
        count(f"quantile_n[{name!r}]", v)
    for s in slos:
        v = summary[s.key]
        share = (
            s.metric == "goodput_fraction" and v is not None and not (isinstance(v, float) and math.isnan(v))
        )
        if share and not 0 <= real(s.key, v) <= 1:
            raise InvalidArgumentError(f"probe summary {s.key} {v!r} must be in [0, 1] (a share of requests)")
        for key in ("quantile_ci", "mean_ci"):
            table = summary.get(key) or {}
            if not isinstance(table, Mapping) or s.key not in table:
                continue
            pair = table[s.key]
            name = f"{key}[{s.key!r}]"
            if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
                raise InvalidArgumentError(f"probe summary {name} {pair!r} must be a pair [low, high]")
            low, high = (None if e is None else real(name, e) for e in pair)
            if low is not None and high is not None and low > high:
                raise InvalidArgumentError(
                    f"probe summary {name} {list(pair)!r} is inverted (low above high)"
                )
            est = None if v is None else real(s.key, v)
            slack = 1e-9 * abs(est or 0.0)  # (rounding between the summary's statistic and its interval's)
            if est is not None and (
                (low is not None and est < low - slack) or (high is not None and est > high + slack)
            ):
                raise InvalidArgumentError(
                    f"probe summary {name} {list(pair)!r} does not hold its statistic {s.key} {v!r}"
                )


def _search(
    search: Search,
    make: Callable[[float], tuple[Any, Any, dict[str, Any]]],
    probe: Callable[..., Any],
    slos: Sequence[SLO],
    axis: str,
    executor: str,
    workers: int | None,
    scheduler: str | None,
    setup: str,
    refusals_fail: bool = False,
    unservable: Mapping[int, int] | None = None,
    settling: frozenset[int] = frozenset(),
    stop_flat: bool = False,
    router: str | None = None,
) -> PlanResult:
    """Runs `search` round by round: each value becomes (workload, config, extra row columns) by `make`,
    is probed in parallel, and is judged against every SLO. `unservable` (`unservable`): requests every
    probe rejects whatever the value, set aside: a probe passes if it rejects those and no other, and
    its SLOs hold over the rest (a `goodput_fraction` is their share of the rest). `settling`
    (`settling_reasons`): reasons a request is rejected for at every value; after a round with a probe
    that rejected every request for them, no value can serve one and the search stops (`all-rejected`,
    `PlanResult.settled`). `stop_flat` (a replica search): after a round where every probe failed and a
    failed SLO stayed flat at the two highest values without queueing, more cannot help and the search
    stops (`above-cap`, `PlanResult.plateau`: `kvsim.analysis.plan_plateau.plateau`, whose message names
    `router`, the fleet's)."""
    from kvsim.analysis.executors import executor_session
    from kvsim.analysis.plan_plateau import plateau

    rows: list[dict[str, Any]] = []
    status = "probe-limit"
    flat = ""
    aside = sum((unservable or {}).values())
    settled: dict[int, int] = {}
    with executor_session(executor, workers=workers, scheduler=scheduler) as run:
        round_no = 0
        while not settled:
            xs, done = search.next_round()
            if done is not None:
                status = done
                break
            jobs: list[_Job] = []
            extras: list[dict[str, Any]] = []
            refused: dict[int, str] = {}
            for i, x in enumerate(xs):
                try:
                    workload, config, extra = make(x)
                except InvalidArgumentError as exc:
                    if not refusals_fail:
                        raise
                    # Memory that cannot even hold the model is memory that does not suffice.
                    refused[i] = str(exc)
                    continue
                if not rows and not jobs:  # (the first probe's workload: every probe's lengths)
                    check_judgeable(workload, slos)
                jobs.append(_Job(i, probe, workload, config))
                extras.append(extra)
            results: list[Any] = [None] * len(xs)
            for index, summary, wall in run(_run_job, jobs):
                results[index] = (summary, wall)
            extra_of = dict(zip([j.index for j in jobs], extras, strict=True))
            for i, x in enumerate(xs):
                if i in refused:
                    search.outcomes[x] = False
                    rows.append({"round": round_no, axis: int(x) if search.integer else x, "passed": False,
                                 **{s.metric: None for s in slos}, "refused": refused[i]})  # fmt: skip
                    continue
                extra = extra_of[i]
                summary, wall = results[i]
                missing = [s.key for s in slos if s.key not in summary]
                if missing:
                    raise InvalidArgumentError(
                        f"probe summary has no {', '.join(missing)} (the SLOs read it); keys: {', '.join(summary)}"
                    )
                _check_summary(summary, slos, aside)
                if not settled and _settles(summary, settling):
                    settled = dict(summary["rejected_reasons"])
                values = {s.metric: summary[s.key] for s in slos}
                if aside and "goodput_fraction" in values and summary.get("num_requests"):
                    # (the share meeting the per-request SLOs among the requests that can be served)
                    total = summary["num_requests"]
                    # (none: a share of no request, every one set aside, is no number)
                    values["goodput_fraction"] = (
                        None if total <= aside else values["goodput_fraction"] * total / (total - aside)
                    )
                # A rejected request is never served: no bound holds for it, whatever those served met
                # (a pool too small for most of the workload passed on the few it admitted); but those
                # rejected at every probe whatever the value (`unservable`) are set aside.
                rejections_ok = (summary.get("rejected") or 0) == aside
                passed = rejections_ok and all(s.holds(values[s.metric]) for s in slos)
                search.outcomes[x] = passed
                row: dict[str, Any] = {
                    "round": round_no,
                    axis: int(x) if search.integer else x,
                    "passed": passed,
                }
                row.update({k: (None if v is None else float(v)) for k, v in values.items()})
                row.update(extra)
                row["completed"] = summary.get("completed")
                if summary.get("num_requests") is not None:  # (what --requests gave: the settle count's unit)
                    row["num_requests"] = int(summary["num_requests"])
                row["rejected"] = summary.get("rejected")
                if summary.get("queueing_s_p99") is not None:  # (whether requests waited for each other)
                    row["queueing_s_p99"] = float(summary["queueing_s_p99"])
                if summary.get("overloaded") is not None:  # (kvsim's probes: `probe_summary`)
                    row["overloaded"] = bool(summary["overloaded"])
                    row["served_rps"] = summary.get("throughput_rps")
                ci = {**(summary.get("quantile_ci") or {}), **(summary.get("mean_ci") or {})}
                counts = summary.get("quantile_n") or {}
                for s in slos:  # (a percentile's or a mean's 95 % interval, kvsim's probes: `probe_summary`)
                    if s.key in ci and s.key.rsplit("_", 1)[0] in counts:
                        low, high = ci[s.key]
                        row[f"{s.metric}_ci_low"] = None if low is None else float(low)
                        row[f"{s.metric}_ci_high"] = None if high is None else float(high)
                        row[f"{s.metric}_n"] = int(counts[s.key.rsplit("_", 1)[0]])
                if "goodput_fraction" in values and summary.get("num_requests"):
                    # (the share's Wilson interval over the requests it is a share of: DESIGN.md §Capacity
                    # search, "Sampling")
                    row.update(fraction_columns(values["goodput_fraction"], summary["num_requests"] - aside))
                row["outside_ci"] = bound_outside_ci(row, slos, failed_by_rejection=not rejections_ok)
                if "steady" in summary:  # (kvsim's probes: `probe_summary`; None where nothing was served)
                    row["steady"] = None if summary["steady"] is None else bool(summary["steady"])
                    row["arrival_span_s"] = summary.get("arrival_span_s")
                    row["e2e_s_p99"] = summary.get("e2e_s_p99")
                row["wall_s"] = wall
                rows.append(row)
            round_no += 1
            flat = plateau(rows, slos, axis, search.cap, router) if stop_flat and not settled else ""
            if flat:
                status = "above-cap"
                break
    lo, hi = search.bracket()
    value = lo if search.low_ok else hi
    if status in ("above-cap",) and not search.low_ok:
        value = None
    if status == "below-floor" and search.low_ok:
        value = None
    if status == "below-floor" and not search.low_ok and search.integer and hi == search.floor == 1:
        status = "converged"  # one is the least count there is
    cast = int if search.integer else float
    schema_axis = pl.Int64 if search.integer else pl.Float64
    frame = (
        pl.DataFrame(rows, infer_schema_length=None)
        if rows
        else pl.DataFrame({axis: pl.Series([], dtype=schema_axis)})
    )
    if settled or served_none(frame) is not None:  # (no value served one: not below a floor nor above a cap)
        status = "all-rejected"
    return PlanResult(
        axis=axis,
        value=None if value is None else cast(value),
        bracket=(None if lo is None else cast(lo), None if hi is None else cast(hi)),
        precision=search.precision,
        status=status,
        slos=tuple(slos),
        probes=frame,
        violations=[(cast(a), cast(b)) for a, b in search.violations()],
        setup=setup,
        unservable={REJECT_REASONS[k]: n for k, n in sorted((unservable or {}).items())},
        settled={REJECT_REASONS[k]: n for k, n in sorted(settled.items())},
        plateau=flat,
    )


def _setup(workload: Any, config: Any, rate: float | None = None, pool: bool = True) -> str:
    """The plot's setup line: model, GPU, pool (unless the search varies it), the fleet (replicas and
    router, for a fleet config or a list of replica configs), requests, target rate."""
    meta = getattr(workload, "meta", {}) or {}
    parts = []
    fleet = None
    each: str | None = ""
    if isinstance(config, list | tuple) and config:
        fleet = (
            f"{fmt_count(len(config), 'replica')} (heterogeneous), router {getattr(config[0], 'router', '?')}"
        )
        config = config[0]  # the first replica's model; its pool is not every replica's (not shown)
        each = None
    elif isinstance(getattr(config, "prefill_replicas", None), int) and config.prefill_replicas > 0:
        fleet = (
            f"{config.prefill_replicas} prefill : {config.replicas} decode replicas, router {config.router}"
        )
        each = " each"
    elif isinstance(getattr(config, "replicas", None), int) and config.replicas > 1:
        fleet = f"{config.replicas} replicas, router {config.router}"
        each = " each"
    model = getattr(config, "model", None)
    gpu = getattr(config, "gpu", None)
    if model is not None:
        name = getattr(model, "name", model)
        parts.append(f"{name} on {getattr(gpu, 'name', gpu)}" if gpu is not None else str(name))
    if hasattr(config, "capacity_blocks") and each is not None:
        # (the pool's blocks as `kvsim run`'s pool line counts them, the null block included)
        blocks = (
            f"{getattr(config, 'num_blocks', config.capacity_blocks):,} blocks × " if pool else "blocks of "
        )
        parts.append(f"{blocks}{config.block_size} tokens, {config.policy}{each}")
    if fleet is not None:
        parts.append(fleet)
    lengths = meta.get("lengths")
    parts.append(fmt_count(len(workload), "request") + (f" ({lengths})" if lengths else ""))
    if rate is not None:
        parts.append(f"at {rate:.4g} req/s")
    return " · ".join(parts)


def plan(
    workload: Any,
    config: Any,
    slos: Mapping[str, Any] | Sequence[str | SLO] | str,
    *,
    goodput: Any = None,
    start_rate: float | None = None,
    precision: Any = DEFAULT_PRECISION,
    max_probes: int = DEFAULT_MAX_PROBES,
    min_rate: float | None = None,
    max_rate: float | None = None,
    probe: Callable[[Any, Any], Mapping[str, Any]] | None = None,
    executor: str = "threads",
    workers: int | None = None,
    scheduler: str | None = None,
    backend: str = "rust",
) -> PlanResult:
    """The highest request rate at which `config` meets every SLO on `workload`'s traffic.

    Assumes monotonicity (a rate below a passing one passes); probes that contradict it are reported in
    `violations` and `message`, never hidden, and the answer is then taken below the lowest failing
    rate (module docstring).

    Args:
        workload: a `kvsim.Workload` with arrivals spread over time; its rate is scaled (`at_rate`).
        config: a `SimConfig` (or what the probe takes).
        slos: bounds (`parse_slos`): `{"ttft_p99": 2.0, "tpot_p99": 0.1}` (seconds),
            `["ttft_p99:2s", "tpot_p99:100ms"]`, `{"goodput_fraction": 0.99}` (with `goodput`).
        goodput: per-request SLOs in ms for `goodput_fraction` (`{"ttft": 500, "tpot": 50}`).
        start_rate: the first rate probed (default: the workload's own, `workload_rate`).
        precision: the bracket's relative width to stop at (0.02 or `"2%"`).
        max_probes: at most this many simulations.
        min_rate, max_rate: the floor and cap of the bracket (default: start / 4096 and start x 4096).
        probe: `(workload, config) -> summary` (default `default_probe(config)`: `simulate_probe`, or
            `cluster_probe` for a config of several replicas); for processes and Dask it must pickle (a
            module-level function or a `functools.partial` of one).
        executor, workers, scheduler: the sweep executors (`kvsim.analysis.executors.executor_session`); `workers`
            probes run in each round (default: the CPU count).
        backend: the engine of the default probe.

    Returns:
        A `PlanResult` (axis `rate`).

    Raises:
        InvalidArgumentError: a bad SLO, precision, count, rate or executor, a workload without a rate,
            or a probe summary lacking an SLO's key.
    """
    slos_ = parse_slos(slos)
    prec = check_precision(precision)
    max_probes = _check_count("max_probes", max_probes, 2)
    base = workload_rate(workload)
    start = base if start_rate is None else _check_positive("start_rate", start_rate)
    floor = start / RATE_RANGE if min_rate is None else _check_positive("min_rate", min_rate)
    cap = start * RATE_RANGE if max_rate is None else _check_positive("max_rate", max_rate)
    # (the clock's floor, or a start rate given below it: probed as asked, refused there by the clock)
    lowest = min(clock_floor(workload, base), start)
    by_clock = min_rate is None and floor < lowest
    floor = lowest if by_clock else floor
    if not floor < cap:
        raise InvalidArgumentError(f"min_rate {floor:g} must be below max_rate {cap:g}")
    if start_rate is None:  # the workload's own rate, moved into the range asked for
        start = min(max(start, floor), cap)
    elif not floor <= start <= cap:
        raise InvalidArgumentError(f"start_rate {start:g} must lie in [min_rate {floor:g}, max_rate {cap:g}]")
    from kvsim.analysis.executors import check_executor

    width = check_executor(executor, workers, scheduler)
    run_probe = _resolve_probe(probe, slos_, goodput, backend, default=default_probe(config))
    search = Search(start, True, False, prec, floor, cap, max_probes, width)

    def make(rate: float) -> tuple[Any, Any, dict[str, Any]]:
        return at_rate(workload, rate, base), config, {}

    aside = unservable(workload, config, probe)
    result = _search(
        search, make, run_probe, slos_, "rate", executor, workers, scheduler, _setup(workload, config),
        unservable=aside, settling=settling_reasons(config, probe, pool_varies=False),
    )  # fmt: skip
    if by_clock and result.status == "below-floor":
        from kvsim.model.knob_table import MAX_TIME_PS, PS_PER_S

        day = 86_400 * PS_PER_S
        last = float(at_rate(workload, floor, base).arrival[-1]) * PS_PER_S if len(workload) else 0.0
        why = "half left for the run to end in" if floor < start else "the start rate asked for"
        note = (
            f"the simulated clock, not min_rate, set the floor: at {floor:.4g} req/s the last of "
            f"{len(workload):,} arrivals comes at {last / day:.1f} days of the clock's {MAX_TIME_PS / day:.1f} ({why})"
        )
        result = dataclasses.replace(result, floor_note=note)
    return sustained(result)


BURST_RATIO = 2.0
"""A knee whose overloaded run served below 1 / this of its arrival rate is a burst (`sustained`): the run
drained for longer after its last arrival than its requests took to arrive."""


def sustained(result: PlanResult) -> PlanResult:
    """A rate search's result whose knee passed only as a burst made honest (DESIGN.md §Capacity search,
    "Bursts"): the knee's probe was overloaded (`PlanResult.burst`, its queue growing through the run) and
    served below 1 / `BURST_RATIO` of the knee's rate (of the requests judged, `servable_rate`, where some
    were set aside), or did not say how fast (a caller's probe), so the
    run measured how fast a finite workload drains, not a rate. Such a result gets status `burst`, the
    knee kept as `burst_rate`, and `value` the highest rate that passed in a steady run (the probes'
    `steady`: neither overloaded nor too short; a caller's probe that says neither, not overloaded), every
    probe below the knee having passed; None where none did. Other results are returned as they are (an
    overloaded knee served near its rate keeps its caveat). 1,000 ShareGPT-like requests on Llama-3.1-8B
    passed `ttft_p99:2s`, `tpot_p99:50ms` at 1087 req/s served at 63.56, and 2,000 at 122.6 served at
    60.75, knees set by the request count, where the highest steady pass was 32 req/s."""
    if result.axis != "rate" or result.status not in ("converged", "probe-limit") or not result.burst:
        return result
    knee = result.value
    row = result._answer_row() or {}
    served = row.get("served_rps")
    arrived = result.servable_rate or knee  # (those judged: requests set aside are never served)
    if knee is None or (isinstance(served, int | float) and (arrived or 0) <= BURST_RATIO * served):
        return result
    steady = [
        float(r["rate"])
        for r in result.probes.iter_rows(named=True)
        if r["passed"] and _steady(r) is not False and r["rate"] < knee
    ]
    return dataclasses.replace(result, status="burst", burst_rate=knee, value=max(steady, default=None))


def clock_floor(workload: Any, base_rate: float) -> float:
    """The lowest rate a search probes by default: where `workload`'s last arrival, scaled from its
    `base_rate`, comes at half the simulated clock's range (`MAX_TIME_PS`, 53.4 days), leaving the
    other half for the run to end in. `kvsim plan --num-gpu-blocks-override 100 --slo ttft_p99:2s` failed
    its way down to start / 4096, whose 10,000 arrivals spread over 58 days, and ended in the clock's
    error where it should say that no rate passes."""
    from kvsim.model.knob_table import MAX_TIME_PS, PS_PER_S

    last = float(workload.arrival[-1]) if len(workload) else 0.0
    return 2.0 * last * base_rate * PS_PER_S / MAX_TIME_PS


__all__ = [
    "MEMORY_KNOBS",
    "METRICS",
    "SLO",
    "PlanResult",
    "at_rate",
    "check_precision",
    "cluster_probe",
    "default_probe",
    "parse_slos",
    "pd_probe",
    "plan",
    "probe_summary",
    "set_knob",
    "set_replicas",
    "settling_reasons",
    "simulate_probe",
    "workload_rate",
]
