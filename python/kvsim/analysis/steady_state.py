"""The steady-state rule (DESIGN.md §Capacity search, "Steady state"; §Run, the notes): whether a run was
overloaded (`queue_growth`: its queue grew through the run) or too short to reach a steady state
(`too_short`: its arrivals lasted less than `STEADY_SPANS` times its requests' e2e p99), the requests one
needs (`steady_requests`), and `kvsim run`'s note on a run too short (`too_short_note`). Read by
`kvsim run`'s notes (`kvsim.analysis.run_report`), capacity search's probes
(`kvsim.analysis.plan.probe_summary`) and its answer's caveat (`PlanResult.steady_caveat`)."""

from __future__ import annotations

import math
from typing import Any

from kvsim.model.units import fmt_count


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
    offered = (n - 1) / span
    wait = (req["first_scheduled"] - req["arrival"]).to_numpy()
    tenth = max(1, n // 10)
    first, last = float(wait[:tenth].mean()), float(wait[-tenth:].mean())
    if not (served < offered and last > 4 * first and last - first > 1.0):
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


def steady_requests(e2e: float, rate: float) -> int:
    """The requests a steady state needs at `rate` req/s: arrivals over `STEADY_SPANS` times the e2e p99
    `e2e` (a floor: the e2e p99 grows as a longer run fills the engine)."""
    return math.ceil(STEADY_SPANS * e2e * rate)


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
    if span >= STEADY_SPANS * e2e:
        return None
    return span, e2e, (n - 1) / span if span > 0 else math.inf


MIN_RATE_ARRIVALS = 10
"""The fewest finished requests whose arrivals' span `kvsim run`'s too-short note takes a rate from when
the workload states none (a trace): from fewer the span is a handful of gaps (2 requests: one gap, a
rate anywhere from a few to 10^9 requests/s), and the note says the rate cannot be told."""


def too_short_note(finished: int, span: float, e2e: float, rate: float | tuple[float, str] | None) -> str:
    """`kvsim run`'s note on a run too short to reach a steady state (`too_short`'s figures; DESIGN.md
    §Capacity search, "Steady state"): how long the finished requests arrived over against their e2e p99,
    why that is no steady state, and the requests one needs at this rate, `STEADY_SPANS` times the e2e p99
    of arrivals (a floor: the e2e p99 grows as a longer run fills the engine). A batch, every request
    arriving at once, has no rate to sustain: it says so instead. `rate` is `note_rate`'s (a bare number:
    "their rate"); None where too few arrived to tell one (no request count then), and past
    `plan_sampling.SETTLE_CAP` requests the count is given as more than that."""
    from kvsim.analysis.plan_sampling import SETTLE_CAP

    done = fmt_count(finished, "request")
    if span <= 0:
        return (
            f"not a steady state: the {done} that finished arrived at once, a batch, not a rate; its latencies "
            "are the batch's as it drains, not those of a rate the engine sustains (arrivals at a rate measure "
            "those: --workload NAME:arrival_rate=R)"
        )
    head = (
        f"not a steady state: the {done} that finished arrived over {span:.3g} s, {span / e2e:.2g} times "
        f"their e2e p99 of {e2e:.3g} s, and a run starts empty: until its arrivals have lasted about its "
        "requests' longest latencies the engine holds fewer of them than the rate keeps in it, so the "
        "latencies, batch and memory above were measured on a lighter engine than "
    )
    if rate is None:
        return (
            f"{head}their rate keeps in a steady state; one needs arrivals over {STEADY_SPANS:g} times the "
            f"e2e p99, so more requests (--requests); how many cannot be told, for "
            f"{fmt_count(finished, 'arrival')} give no rate (one needs at least {MIN_RATE_ARRIVALS}; a "
            "generator's arrival_rate states one)"
        )
    value, whose = rate if isinstance(rate, tuple) else (rate, "their rate")
    need = steady_requests(e2e, value)
    count = (
        f"more than {fmt_count(SETTLE_CAP, 'request')} at this rate, more than kvsim usefully runs"
        if need > SETTLE_CAP
        else f"about {fmt_count(need, 'request')} at this rate, or more (--requests)"
    )
    return (
        f"{head}{whose}, {value:.3g} requests/s, keeps in a steady state; one needs arrivals over "
        f"{STEADY_SPANS:g} times the e2e p99: {count}"
    )


__all__ = [
    "MIN_RATE_ARRIVALS",
    "STEADY_SPANS",
    "queue_growth",
    "steady_requests",
    "too_short",
    "too_short_note",
    "warmup",
]
