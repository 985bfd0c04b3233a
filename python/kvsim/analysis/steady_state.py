"""The steady-state rule (DESIGN.md §Capacity search, "Steady state"; §Run, the notes): whether a run was
overloaded (`queue_growth`: its queue grew through the run) or too short to reach a steady state
(`too_short`: its arrivals lasted less than `STEADY_SPANS` times its requests' e2e p99), the requests one
needs (`steady_requests`), `kvsim run`'s note on a run too short (`too_short_note`) and `kvsim sweep`'s on
its points too short (`sweep_too_short_note`, from the rows' `arrival_span_s`) and overloaded
(`sweep_overloaded_note`, from the rows' `overloaded`), in the words `kvsim run`'s notes use. Read by `kvsim run`'s notes
(`kvsim.analysis.run_report`), capacity search's probes (`kvsim.analysis.plan_probes.probe_summary`) and its
answer's caveat (`PlanResult.steady_caveat`), and `kvsim sweep` (`kvsim.analysis.sweep.run_point`,
`kvsim.cli.cmd_sweep`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kvsim.errors import InvalidArgumentError
from kvsim.model.units import fmt_count
from kvsim.workloads.table import arrival_rate

WAIT_RATIO = 4
"""An overloaded run's last tenth of requests waits more than this many times as long for a first step as
its first tenth (`queue_growth`)..."""
WAIT_GAP_S = 1.0
"""... and more than this many seconds longer."""


def queue_growth(result: Any) -> tuple[float, float, float, float] | None:
    """Whether the run was overloaded, its queue growing from its first requests to its last: (offered
    requests/s, served requests/s, the mean wait for a first step of the first and of the last tenth of
    the finished requests by arrival, in seconds), or None. Overloaded: at least 20 finished requests
    arriving over a span of time (a burst all at once is a batch, not a rate), served below the rate they
    arrived at, the last tenth waiting more than four times as long as the first and over a second
    longer, and finding more requests waiting when they arrived than the first tenth found: a queue that a
    steady state would not keep growing (a burst followed by a trickle the configuration keeps up with
    leaves its last requests waiting behind the burst, but its queue shrinks). The served rate is the
    finished requests over the whole run, its drain too, so a finite run's is below the offered rate
    even in a steady state: the waits decide (until 2026-12-06 it had to be below 90 % of it, which
    missed a long run overloaded by a few percent: 100,000 ShareGPT-like requests on Llama-3.1-70B at
    tp 4 at 36.4 req/s, served at 35.4, the last tenth waiting 39.6 s and the first 0.12 s)."""
    import numpy as np
    import polars as pl

    req = result.requests.filter(pl.col("status") == "finished").sort("arrival")
    n = req.height
    if n < 20:
        return None
    span = float(req["arrival"][-1] - req["arrival"][0])
    served = float(result.summary.get("throughput_rps") or 0.0)
    if span <= 0 or served <= 0:
        return None
    offered = arrival_rate(n, span)
    wait = (req["first_scheduled"] - req["arrival"]).to_numpy()
    tenth = max(1, n // 10)
    first, last = float(wait[:tenth].mean()), float(wait[-tenth:].mean())
    if not (served < offered and last > WAIT_RATIO * first and last - first > WAIT_GAP_S):
        return None
    # The queue each request found on arrival: those arrived by then (itself too) less those scheduled.
    arrival = req["arrival"].to_numpy()
    started = np.sort(req["first_scheduled"].to_numpy())
    queue = np.searchsorted(arrival, arrival, side="right") - np.searchsorted(started, arrival, side="right")
    if queue[-tenth:].mean() <= queue[:tenth].mean():
        return None
    return offered, served, first, last


STEADY_SPANS = 5.0
"""How many times its finished requests' e2e p99 a run's arrivals must last for the run to show a steady
state (`too_short`; DESIGN.md §Capacity search, "Steady state")."""


def short_of_steady(span: float, e2e: float) -> bool:
    """The rule itself: arrivals over `span` seconds are too short for a steady state when they lasted
    less than `STEADY_SPANS` times the requests' e2e p99 `e2e` (`too_short`, and a sweep row's
    `arrival_span_s` against its `e2e_s_p99`, `sweep_too_short_note`)."""
    return span < STEADY_SPANS * e2e


MIN_RATE_ARRIVALS = 10
"""The fewest finished requests whose arrivals' span `kvsim run`'s too-short note takes a rate from when
the workload states none (a trace): from fewer the span is a handful of gaps (2 requests: one gap, a
rate anywhere from a few to 10^9 requests/s), and the note says the rate cannot be told."""


COUNT_CEILING = 2**53
"""The most requests `steady_requests` counts (the largest count a float holds exactly): past it the
count it gives is this, a floor like the rest, which every note prints as more than
`plan_sampling.SETTLE_CAP`, "more than kvsim usefully runs" (until 2026-12-06 it raised instead, after
the run: `--workload sharegpt:arrival_rate=1e15` ended run, sweep and plan with an error)."""


def _number(name: str, x: Any, unit: str) -> float:
    """`x` as a float where it is a finite number of 0 or more (not a bool), else InvalidArgumentError
    naming it."""
    ok = not isinstance(x, bool) and isinstance(x, (int, float, np.integer, np.floating))
    if not ok or (isinstance(x, (int, np.integer)) and abs(int(x)) > 2**53) or not 0 <= float(x) < math.inf:
        raise InvalidArgumentError(f"{name} {x!r} must be a finite number of 0 or more ({unit})")
    return float(x)


def steady_requests(e2e: float, rate: float, finished: int | None = None, span: float | None = None) -> int:
    """The requests a steady state needs at `rate` req/s: arrivals over `STEADY_SPANS` times the e2e p99
    `e2e` (a floor: the e2e p99 grows as a longer run fills the engine). Given the run's `finished`
    requests and the `span` of their arrivals (seconds) when it was too short (`short_of_steady`), never
    that many or fewer: where the count at `rate` is no more than it ran (its arrivals came faster than
    the rate, by chance), the run's count scaled by how far it fell short (`finished` × `STEADY_SPANS` ×
    `e2e` / `span`; from `MIN_RATE_ARRIVALS` of them on, fewer giving no rate to trust) and at least one
    more than it ran (1,000 requests over 4.95 e2e p99s at a nominal 6.189 req/s, arriving at 6.24, asked
    for 1,000 until 2026-12-06; now 1,010). Never more than `COUNT_CEILING` (a floor past it).

    Raises:
        InvalidArgumentError: `e2e`, `rate` or `span` not a finite number of 0 or more, or `finished` not
            a count (an integer from 0 to 2**53), naming it.
    """
    e2e_f = _number("e2e", e2e, "s")
    rate_f = _number("rate", rate, "req/s")
    if finished is not None and (
        isinstance(finished, bool)
        or not isinstance(finished, (int, np.integer))
        or not 0 <= int(finished) <= COUNT_CEILING
    ):
        raise InvalidArgumentError(
            f"finished {finished!r} must be a count of requests (an integer from 0 to 2**53)"
        )
    span_f = None if span is None else _number("span", span, "s")
    # (no request at a rate of 0 or an e2e of 0, whatever the other: 5 × 3.6e307 overflows, and inf × 0 is NaN)
    need_f = 0.0 if e2e_f == 0 or rate_f == 0 else STEADY_SPANS * e2e_f * rate_f
    if need_f >= COUNT_CEILING:
        return COUNT_CEILING
    need = math.ceil(need_f)
    if finished is not None and span_f is not None and span_f > 0 and short_of_steady(span_f, e2e_f):
        ran = int(finished)
        if need <= ran:
            need = min(ran + 1, COUNT_CEILING)
            if ran >= MIN_RATE_ARRIVALS:
                scaled = ran * STEADY_SPANS * e2e_f / span_f if ran else 0.0
                need = COUNT_CEILING if scaled >= COUNT_CEILING else max(need, math.ceil(scaled))
    return need


def fmt_need(need: int) -> str:
    """`steady_requests`' count `need` as the notes print it: "about N requests at this rate, or more",
    or past `plan_sampling.SETTLE_CAP` "more than 10,000,000 requests at this rate, more than kvsim
    usefully runs"."""
    from kvsim.analysis.plan_sampling import SETTLE_CAP

    if need > SETTLE_CAP:
        return f"more than {fmt_count(SETTLE_CAP, 'request')} at this rate, more than kvsim usefully runs"
    return f"about {fmt_count(need, 'request')} at this rate, or more"


def fmt_spans(span: float, e2e: float) -> str:
    """How many times the e2e p99 `e2e` arrivals over `span` seconds lasted, as the notes print it: three
    significant figures, rounded down where rounding would reach `STEADY_SPANS` from below, so a run short
    of the rule never prints as meeting it (4.996 → "4.99", not "5"; 160 s over 32.3 s → "4.95").

    Raises:
        InvalidArgumentError: `span` not a finite number of 0 or more, or `e2e` not one above 0 (a run
            whose e2e p99 is 0 lasted no number of times it, and is never short of a steady state),
            naming it.
    """
    span_f = _number("span", span, "s")
    if _number("e2e", e2e, "s") <= 0:
        raise InvalidArgumentError(
            f"e2e {e2e!r} must be above 0: arrivals last no number of times an e2e p99 of 0 "
            "(and such a run is never short of a steady state)"
        )
    ratio = span_f / float(e2e)
    if not math.isfinite(ratio):
        return "∞"
    text = f"{ratio:.3g}"
    if 0 < ratio < STEADY_SPANS <= float(text):
        places = 2 - math.floor(math.log10(ratio))
        text = f"{math.floor(ratio * 10**places) / 10**places:.{places}f}"
    return text


def warmup(result: Any) -> tuple[int, float, float] | None:
    """The run's finished requests, the span of their arrivals and their end-to-end latency p99 (seconds,
    arrival to finish), or None with fewer than 2 finished."""
    import numpy as np
    import polars as pl

    req = result.requests.filter(pl.col("status") == "finished")
    if req.height < 2:
        return None
    arrival = req["arrival"].to_numpy()
    e2e = req["finish"].to_numpy() - arrival
    return req.height, float(arrival.max() - arrival.min()), float(np.quantile(e2e, 0.99))


def too_short(result: Any) -> tuple[float, float, float] | None:
    """Whether the run was too short to reach a steady state: (the span of its finished requests'
    arrivals, their e2e p99, both in seconds, and the rate they arrived at) when the arrivals lasted less
    than `STEADY_SPANS` times the e2e p99, else None. A run starts empty: a request arriving at time t
    shares the engine only with those that arrived since t less their own latency, so until the arrivals
    have lasted about the longest latencies the engine holds fewer requests than the rate keeps in it in
    steady state, its steps are shorter, and TTFT and TPOT are measured on a lighter engine; the requests
    of the first e2e p99 of arrivals are that warm-up, a fifth of those judged at the bound (DESIGN.md
    §Capacity search, "Steady state", for the measurements that set it)."""
    w = warmup(result)
    if w is None:
        return None
    n, span, e2e = w
    if not short_of_steady(span, e2e):
        return None
    return span, e2e, arrival_rate(n, span)


STARTS_EMPTY = (
    "a run starts empty: until its arrivals have lasted about its requests' longest latencies the engine "
    "holds fewer of them than the rate keeps in it"
)
"""Why a run too short is no steady state, in the words `kvsim run`'s note (`too_short_note`) and
`kvsim sweep`'s (`sweep_too_short_note`) share; "so" and what was measured light follow."""

NEED_SPANS = f"one needs arrivals over {STEADY_SPANS:g} times the e2e p99"
"""What a steady state needs, in the words the run's notes (`too_short_note`, `ONE_REQUEST_NOTE`) and
the sweep's (`sweep_too_short_note`) share; the requests that makes follow."""


def too_short_note(finished: int, span: float, e2e: float, rate: float | tuple[float, str] | None) -> str:
    """`kvsim run`'s note on a run too short to reach a steady state (`too_short`'s figures; DESIGN.md
    §Capacity search, "Steady state"): how long the finished requests arrived over against their e2e p99,
    why that is no steady state, and the requests one needs at this rate, `STEADY_SPANS` times the e2e p99
    of arrivals (a floor: the e2e p99 grows as a longer run fills the engine). A batch, every request
    arriving at once, has no rate to sustain: it says so instead. `rate` is `note_rate`'s (a bare number:
    "their rate"); None where too few arrived to tell one (no request count then), and past
    `plan_sampling.SETTLE_CAP` requests the count is given as more than that.

    Raises:
        InvalidArgumentError: `finished` not a count, `span` not a finite number of 0 or more, `e2e` not
            one above 0 where `span` is (`fmt_spans`), or `rate` not a finite number of 0 or more, naming
            it.
    """
    if isinstance(finished, bool) or not isinstance(finished, (int, np.integer)) or finished < 0:
        raise InvalidArgumentError(
            f"finished {finished!r} must be a count of requests (an integer, 0 or more)"
        )
    done = fmt_count(int(finished), "request")
    if _number("span", span, "s") <= 0:
        return (
            f"not a steady state: the {done} that finished arrived at once, a batch, not a rate; its latencies "
            "are the batch's as it drains, not those of a rate the engine sustains (arrivals at a rate measure "
            "those: --workload NAME:arrival_rate=R)"
        )
    head = (
        f"not a steady state: the {done} that finished arrived over {span:.3g} s, {fmt_spans(span, e2e)} times "
        f"their e2e p99 of {e2e:.3g} s, and {STARTS_EMPTY}, so the latencies, batch and memory above were "
        "measured on a lighter engine than "
    )
    if rate is None:
        return (
            f"{head}their rate keeps in a steady state; {NEED_SPANS}, so more requests (--requests); how "
            "many cannot be told, for "
            f"{fmt_count(finished, 'arrival')} give no rate (one needs at least {MIN_RATE_ARRIVALS}; a "
            "generator's arrival_rate states one)"
        )
    value, whose = rate if isinstance(rate, tuple) else (rate, "their rate")
    count = fmt_need(steady_requests(e2e, value, finished, span))
    if not count.endswith("usefully runs"):
        count += " (--requests)"
    return f"{head}{whose}, {value:.3g} requests/s, keeps in a steady state; {NEED_SPANS}: {count}"


ONE_REQUEST_NOTE = (
    "not a steady state: a single request finished, which gives no rate and shares the engine with no other: "
    f"its latencies are an empty engine's, not those of a rate the engine sustains; {NEED_SPANS}, so more "
    "requests (--requests; a generator's arrival_rate states a rate)"
)
"""`kvsim run`'s note on a run where one request finished (`warmup` needs 2; until 2026-12-06 such a run,
the least steady there is, got no note while 2 requests got one)."""


def _sweep_note_args(frame: Any, axes: Sequence[str] | None, shown: int) -> list[str]:
    """The checks `kvsim sweep`'s notes (`sweep_too_short_note`, `sweep_overloaded_note`) make of their
    arguments, and the columns that name a point: `axes`, or by default `point_axes`' rule without a grid.

    Raises:
        InvalidArgumentError: `frame` not a polars DataFrame, `shown` not an integer of 1 or more, `axes`
            not a sequence of the frame's column names.
    """
    import polars as pl

    from kvsim.analysis.sweep_stats import point_axes

    if not isinstance(frame, pl.DataFrame):
        raise InvalidArgumentError(f"frame {type(frame).__name__} must be a sweep's polars DataFrame")
    if isinstance(shown, bool) or not isinstance(shown, (int, np.integer)) or shown < 1:
        raise InvalidArgumentError(
            f"shown {shown!r} must be a count of points to name (an integer, 1 or more)"
        )
    if axes is None:
        return point_axes(frame)
    if isinstance(axes, (str, bytes)) or not isinstance(axes, Sequence):
        raise InvalidArgumentError(f"axes {axes!r} must be a sequence of column names (a list)")
    unknown = [a for a in axes if not isinstance(a, str) or a not in frame.columns]
    if unknown:
        raise InvalidArgumentError(f"axes {unknown!r}: not columns of the sweep's frame")
    return list(axes)


def _sweep_points(frame: Any, rows: list[dict[str, Any]], worst: Any) -> dict[Any, dict[str, Any]]:
    """The points of a sweep's `rows` (a point: its parameters, whatever the seed), each with its row
    whose `worst(row)` is least (its seed the note quotes)."""
    from kvsim.analysis.sweep_stats import parameter_columns

    params = parameter_columns(frame)
    points: dict[Any, dict[str, Any]] = {}
    for r in rows:
        key = tuple(r[c] for c in params)
        if key not in points or worst(r) < worst(points[key]):
            points[key] = r
    return points


def _sweep_frame(frame: Any, points: dict[Any, Any], shown: int, labels: list[str]) -> tuple[str, str, str]:
    """What `kvsim sweep`'s notes open with: "N of the sweep's M points: " and the first `shown` of
    the points' `labels`, then how many more; and " (in one seed's run at least)" where the sweep ran
    several seeds, else ""; and whether one point ("its") or several ("their")."""
    from kvsim.analysis.sweep_stats import parameter_columns

    params = parameter_columns(frame)
    more = f"; and {len(labels) - shown} more" if len(labels) > shown else ""
    total = frame.select(params).unique().height if params else 1
    seeds = (
        " (in one seed's run at least)" if "seed" in frame.columns and frame["seed"].n_unique() > 1 else ""
    )
    head = f"{len(points):,} of the sweep's {fmt_count(total, 'point')}: {'; '.join(labels[:shown])}{more}"
    return head, seeds, "its" if len(points) == 1 else "their"


def _point_name(r: dict[str, Any], axes: list[str]) -> str:
    """A sweep row's point as the notes name it: its `axes`' values (`max_num_seqs=16`)."""
    return " ".join(f"{c}={r[c]}" for c in axes) or "the sweep's point"


def sweep_too_short_note(frame: Any, axes: Sequence[str] | None = None, shown: int = 8) -> str | None:
    """`kvsim sweep`'s note, once for the sweep, on its points too short to reach a steady state
    (`short_of_steady` on each row's `arrival_span_s` and `e2e_s_p99`; a point, its parameters whatever the
    seed, is too short when one of its seeds' runs is): names them by `axes`, the columns the
    sweep's table tells its points apart by (`kvsim.analysis.sweep_stats.point_axes`; default: its rule without
    a grid, the parameters that vary; the
    first `shown`, then how many more), with how long their arrivals lasted against their e2e p99, why that is
    no steady state, and the most requests one of them needs (the rows' `steady_requests`, kvsim run's
    count, `kvsim.analysis.sweep.steady_columns`; past `plan_sampling.SETTLE_CAP` given as more than that;
    left out where no rate can be told). A point one of whose seeds' runs was overloaded (its row's
    `overloaded`, `queue_growth`) is not judged here, whatever its other seeds, as `kvsim run` gives an
    overloaded run that note only: `sweep_overloaded_note` names it, by the same rule per point. None when no row is too short, or rows lack the columns (a sweep file written before they were
    kept).

    Raises:
        InvalidArgumentError: `frame` not a polars DataFrame, `shown` not an integer of 1 or more, `axes`
            not a sequence of the frame's column names.
    """
    import polars as pl

    from kvsim.analysis.plan_sampling import SETTLE_CAP

    names = _sweep_note_args(frame, axes, shown)
    need = {"arrival_span_s", "e2e_s_p99"}
    if frame.height == 0 or not need <= set(frame.columns):
        return None
    rows = frame.filter(pl.col("arrival_span_s").is_not_null() & pl.col("e2e_s_p99").is_not_null())
    if "overloaded" in rows.columns:  # (its note says it is no steady state at any length)
        # Per point, as `sweep_overloaded_note` judges: a point one of whose seeds was overloaded is that
        # note's alone, its other seeds too (until 2026-12-07 only the overloaded rows were left out, and a
        # point named overloaded was named too short as well, with more --requests as the way out).
        from kvsim.analysis.sweep_stats import parameter_columns

        params = parameter_columns(frame)
        over = frame.filter(pl.col("overloaded").fill_null(False))
        gone = {tuple(r[c] for c in params) for r in over.iter_rows(named=True)}
        rows = rows.filter(
            pl.Series(
                [tuple(r[c] for c in params) not in gone for r in rows.iter_rows(named=True)],
                dtype=pl.Boolean,
            )
        )
    short = [r for r in rows.iter_rows(named=True) if short_of_steady(r["arrival_span_s"], r["e2e_s_p99"])]
    if not short:
        return None
    # (per point, its seed whose arrivals lasted the fewest e2e p99s)
    points = _sweep_points(
        frame,
        short,
        lambda r: r["arrival_span_s"] / r["e2e_s_p99"] if r["e2e_s_p99"] > 0 else math.inf,
    )
    labels = []
    for r in points.values():
        name = _point_name(r, names)
        if r["arrival_span_s"] <= 0 and r.get("completed") == 1:
            labels.append(f"{name} (one request finished: no rate)")
        elif r["arrival_span_s"] <= 0:
            labels.append(f"{name} (arrived at once: a batch, not a rate)")
        else:
            labels.append(
                f"{name} (arrivals over {fmt_spans(r['arrival_span_s'], r['e2e_s_p99'])} times its e2e p99)"
            )
    head, seeds, its = _sweep_frame(frame, points, shown, labels)
    one = len(points) == 1
    whose = "that point's" if one else "those points'"
    # (over every short row, not only each point's shortest seed: the one needing most decides)
    needs = [r["steady_requests"] for r in short if r.get("steady_requests") is not None]
    count = ""
    if needs:
        most = max(needs)
        count = (
            f": more than {fmt_count(SETTLE_CAP, 'request')} for some, more than kvsim usefully runs"
            if most > SETTLE_CAP
            else f": about {fmt_count(most, 'request')} or more (--requests)"
            + ("" if one else " to cover them all")
        )
    return (
        f"not a steady state at {head}: {its} finished requests arrived over "
        f"less than {STEADY_SPANS:g} times their e2e p99{seeds}, kvsim run's rule, and {STARTS_EMPTY}, so "
        f"{whose} latencies, batch and memory were measured on a lighter engine than "
        f"{its} rate keeps in a steady state; {NEED_SPANS}{count}"
    )


QUEUE_WAIT_COUNTS = "TTFT and end-to-end latency count that wait and grow with --requests, not a steady state"
"""What an overloaded run's latencies measure, in the words `kvsim run`'s "overloaded" note
(`kvsim.analysis.run_report`) and `kvsim sweep`'s (`sweep_overloaded_note`) share, after the waits for
a first step that grew through the run."""

LOWER_THE_RATE = "find the highest rate that meets an SLO with kvsim plan"
"""The way out `kvsim run`'s "overloaded" note and `kvsim sweep`'s (`sweep_overloaded_note`) share, after
"lower the rate" and how."""


def sweep_overloaded_note(frame: Any, axes: Sequence[str] | None = None, shown: int = 8) -> str | None:
    """`kvsim sweep`'s note, once for the sweep, on its overloaded points: those whose queue grew through
    the run (`queue_growth`, the rule of `kvsim run`'s "overloaded" note, which the rows keep as
    `overloaded`, `kvsim.analysis.sweep.steady_columns`; a point, its parameters whatever the seed, is
    overloaded when one of its seeds' runs is). Names them by `axes`, as `sweep_too_short_note` does (the
    first `shown`, then how many more), each with the rate its finished requests arrived at (their count
    `completed` − 1 over `arrival_span_s`, as `queue_growth` takes it) and the rate it served them at
    (`throughput_rps`), from its seed served the least share of its arrivals; says what their latencies
    measure and the way out, in `kvsim run`'s words. None when no row is overloaded, or rows lack the
    column (a sweep file written before it was kept).

    Raises:
        InvalidArgumentError: `frame` not a polars DataFrame, `shown` not an integer of 1 or more, `axes`
            not a sequence of the frame's column names.
    """
    import polars as pl

    names = _sweep_note_args(frame, axes, shown)
    if frame.height == 0 or "overloaded" not in frame.columns:
        return None
    rows = list(frame.filter(pl.col("overloaded").fill_null(False)).iter_rows(named=True))
    if not rows:
        return None

    def rates(r: dict[str, Any]) -> tuple[float, float] | None:
        n, span, served = r.get("completed"), r.get("arrival_span_s"), r.get("throughput_rps")
        if n is None or span is None or served is None or span <= 0:
            return None
        return arrival_rate(int(n), float(span)), float(served)

    def share(r: dict[str, Any]) -> float:
        got = rates(r)
        return math.inf if got is None else got[1] / got[0]

    points = _sweep_points(frame, rows, share)  # (per point, its seed served the least share)
    labels = []
    for r in points.values():
        got = rates(r)
        figures = "" if got is None else f" (arrived at {got[0]:,.3g} requests/s, served at {got[1]:,.3g}/s)"
        labels.append(f"{_point_name(r, names)}{figures}")
    head, seeds, its = _sweep_frame(frame, points, shown, labels)
    return (
        f"overloaded at {head}: {its} requests arrived faster than the configuration served them{seeds}, "
        "so the queue grew through the run (the last tenth of requests, by arrival, waited more than "
        f"{WAIT_RATIO} times as long for a first step as the first tenth, and over {WAIT_GAP_S:g} s longer), "
        "kvsim run's rule: "
        f"{QUEUE_WAIT_COUNTS}; lower the rate or {LOWER_THE_RATE}"
    )


__all__ = [
    "COUNT_CEILING",
    "LOWER_THE_RATE",
    "MIN_RATE_ARRIVALS",
    "NEED_SPANS",
    "ONE_REQUEST_NOTE",
    "QUEUE_WAIT_COUNTS",
    "STARTS_EMPTY",
    "STEADY_SPANS",
    "fmt_need",
    "fmt_spans",
    "queue_growth",
    "short_of_steady",
    "steady_requests",
    "sweep_overloaded_note",
    "sweep_too_short_note",
    "too_short",
    "too_short_note",
    "warmup",
]
