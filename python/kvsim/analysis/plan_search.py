"""The part of capacity search (`kvsim.plan`, DESIGN.md §Capacity search) that runs no simulation: the
bracket-and-bisection search over one axis (`Search`: which values to
probe next, given the outcomes so far), and what a search returns (`PlanResult`: the answer, the bracket,
every probe, the contradictions of monotonicity, a table, a plot). The SLOs a probe is judged by, and their
parsing (`parse_slos`, `check_precision`), are `kvsim.analysis.plan_slo`'s; this module re-exports them,
their documented path."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kvsim.analysis.plan_plateau import flat_failures, flat_words
from kvsim.analysis.plan_sampling import fmt_interval, interval, sample_caveat, unsure_slos
from kvsim.analysis.plan_slo import METRICS, SLO, check_precision, parse_slos
from kvsim.analysis.steady_state import STEADY_SPANS, fmt_need, fmt_spans, steady_requests
from kvsim.model.units import fmt_count, fmt_duration_ps

# ----------------------------------------------------------------------------------------- defaults

DEFAULT_PRECISION = 0.02
DEFAULT_MAX_PROBES = 40

STATUSES = ("converged", "probe-limit", "above-cap", "below-floor", "all-rejected", "burst")
"""How a search ended (`PlanResult.status`); `all-rejected` overrides the others where every probe that
ran rejected every request (`served_none`): the search learned nothing of the axis; `burst` replaces
`converged` or `probe-limit` for a rate search whose knee passed only as a burst (`PlanResult.burst_rate`,
`kvsim.analysis.plan.sustained`)."""


def served_none(probes: pl.DataFrame) -> int | None:
    """Where no probe served a request, every probe that ran rejecting every one (`--max-model-len 16`),
    the most requests a probe rejected; else None, and None where the probes carry no counts (a caller's
    probe function). A probe refused without a run (`refused`, no counts) is not one that ran. Such a
    search learned nothing of its axis: whatever the value, nothing was served to judge an SLO on
    (`PlanResult.status` `all-rejected`, its message `PlanResult._nothing_served`)."""
    if probes.height == 0 or not {"completed", "rejected"} <= set(probes.columns):
        return None
    ran = probes.filter(pl.col("rejected").is_not_null())
    if ran.height == 0 or ran["completed"].fill_null(0).max() != 0 or ran["rejected"].min() == 0:
        return None
    return max(int(v) for v in ran["rejected"].to_list())


# ------------------------------------------------------------------------------------------- search


@dataclass
class Search:
    """The bracket search over one positive axis (module docstring), independent of what a probe is.

    `low_ok`: probes pass at low values (a rate) or at high ones (replicas, memory). A probe's outcome is
    *low-like* when it is what low values give. The boundary lies between the highest low-like value
    below the lowest high-like one (`lo`) and that lowest high-like value (`hi`).
    """

    start: float
    low_ok: bool
    integer: bool
    precision: float
    floor: float
    cap: float
    max_probes: int
    width: int
    outcomes: dict[float, bool] = field(default_factory=dict)  # value -> passed

    def _low_like(self, x: float) -> bool:
        return self.outcomes[x] == self.low_ok

    def bracket(self) -> tuple[float | None, float | None]:
        highs = [x for x in self.outcomes if not self._low_like(x)]
        hi = min(highs) if highs else None
        lows = [x for x in self.outcomes if self._low_like(x) and (hi is None or x < hi)]
        return (max(lows) if lows else None), hi

    def violations(self) -> list[tuple[float, float]]:
        """Pairs (a high-like value, a low-like value above it): each contradicts monotonicity."""
        xs = sorted(self.outcomes)
        return [
            (a, b)
            for i, a in enumerate(xs)
            if not self._low_like(a)
            for b in xs[i + 1 :]
            if self._low_like(b)
        ]

    def converged(self, lo: float, hi: float) -> bool:
        if self.integer and hi - lo <= 1:
            return True
        return hi - lo <= self.precision * lo

    def _fit(self, xs: Sequence[float]) -> list[float]:
        out: list[float] = []
        for x in xs:
            x = min(max(x, self.floor), self.cap)
            if self.integer:
                x = float(round(x))
            if x not in self.outcomes and x not in out:
                out.append(x)
        return out

    def next_round(self) -> tuple[list[float], str | None]:
        """The values to probe next, or ([], the final status)."""
        left = self.max_probes - len(self.outcomes)
        if left <= 0:
            return [], "probe-limit"
        w = min(self.width, left)
        if not self.outcomes:  # the start and its neighbours by factors of 2, more of them above
            return self._fit([self.start * 2**j for j in range(-((w - 1) // 2), w // 2 + 1)]), None
        lo, hi = self.bracket()
        if hi is None:  # every probe low-like: go up
            top = max(self.outcomes)
            if top >= self.cap:
                return [], "above-cap"
            return self._fit([top * 2**j for j in range(1, w + 1)]), None
        if lo is None:  # every probe up to hi high-like: go down
            if hi <= self.floor:
                return [], "below-floor"
            return self._fit([hi / 2**j for j in range(1, w + 1)]), None
        if self.converged(lo, hi):
            return [], "converged"
        xs = self._fit([lo * (hi / lo) ** (i / (w + 1)) for i in range(1, w + 1)])
        xs = [x for x in xs if lo < x < hi]
        if not xs:  # integers: nothing left between them
            return [], "converged"
        return xs, None


# ------------------------------------------------------------------------------------------- result


def _steady(row: Mapping[str, Any]) -> bool | None:
    """Whether a probe's run was a steady state: False when overloaded (its queue grew through the run)
    or its `steady` is False (too short), True when it says so, None when the probe says neither (a
    caller's probe)."""
    if row.get("overloaded"):
        return False
    steady = row.get("steady")
    return None if steady is None else bool(steady)


@dataclass
class PlanResult:
    """What a capacity search found.

    Attributes:
        axis: what was searched: `rate` (requests per second), `replicas` or a memory knob.
        value: the answer: the highest passing rate (the knee), or the smallest passing replica count or
            memory; None when no probe passed.
        bracket: (lower, upper) ends of the last bracket: for a rate (passes, fails), for the others
            (fails, passes); an end is None when the search never found it.
        precision: the relative precision asked for.
        status: `converged` (the bracket is within the precision), `probe-limit` (max_probes reached
            first), `above-cap` (every probe up to the cap gave what low values give: a rate that passes
            everywhere up to `max_rate`, or replicas / memory that never suffice), `below-floor` (the
            opposite at the floor), `all-rejected` (every probe that ran rejected every request, so no
            SLO could be judged at any value and the search learned nothing of the axis: `served_none`;
            over the others, which would say the rate lies below the floor or the replicas or memory
            above the cap), `burst` (a rate search whose knee, `burst_rate`, passed only in an overloaded
            run: `value` is then the highest rate that passed in a steady run, a lower bound, or None).
        slos: the bounds.
        probes: one row per probe in the order run: `round`, the axis (`rate` or the knob), `passed`, one
            column per SLO metric (its value), `rate` (the target rate of knob searches), `completed`,
            `rejected`, `queueing_s_p99` (when the probe's summary has it), from kvsim's probes
            (`kvsim.analysis.plan_probes.probe_summary`) `overloaded`, `served_rps`, `steady`, `arrival_span_s`
            and `e2e_s_p99` (whether the run was a steady state, and its length against its latency),
            `wall_s`.
        violations: pairs that contradict monotonicity: (a failing rate, a passing rate above it); for the
            other axes (a passing value, a failing value above it). Empty when the probes are monotone.
        setup: a line naming the workload and configuration (for the plot).
        unservable: requests every probe rejected at arrival whatever the value searched, set aside (by
            reason: a prompt that reaches `max_model_len`, which vLLM refuses at its API; more samples
            than running seats): a probe passed if it rejected those and no other, its SLOs judged on the
            rest (`kvsim.analysis.plan_probes.unservable`). Empty when there are none.
        floor_note: why a rate search's floor is where it is, when not the one asked for (the lowest rate whose
            arrivals the simulated clock holds: `kvsim.analysis.plan.clock_floor`); said where no rate down to
            it passed. Empty otherwise.
        settled: where the search stopped before its floor, cap or max_probes because a probe rejected
            every request for reasons that hold at every value searched (`kvsim.analysis.plan_probes.
            settling_reasons`: decided at arrival by the request and one replica's configuration), so that
            no further probe could serve one (status `all-rejected`): that probe's requests by reason; else
            empty.
        burst_rate: where a rate search's knee (the bracket's passing end) passed only as a burst, its
            probe overloaded, the queue growing through the run (status `burst`): that knee, which is how
            fast the run drained, not a rate the configuration sustains; `value` is then the highest rate
            that passed in a steady run (`kvsim.analysis.plan.sustained`). None otherwise.
        plateau: where a replica search stopped below its cap, every count failing with a failed SLO flat
            at the two highest and no queueing there (a lone request's own latency: status `above-cap`),
            its message (`kvsim.analysis.plan_plateau.plateau`); else empty.
    """

    axis: str
    value: float | None
    bracket: tuple[float | None, float | None]
    precision: float
    status: str
    slos: tuple[SLO, ...]
    probes: pl.DataFrame
    violations: list[tuple[float, float]] = field(default_factory=list)
    setup: str = ""
    unservable: dict[str, int] = field(default_factory=dict)
    settled: dict[str, int] = field(default_factory=dict)
    floor_note: str = ""
    value_words: str = ""  # (what the answer counts, after it: "decode replicas (+ 1 prefill; 5 GPUs)")
    burst_rate: float | None = None
    plateau: str = ""  # (why an inverse search stopped below its cap: `kvsim.analysis.plan_plateau`)

    @property
    def rate(self) -> float | None:
        """The answer of a rate search (`value`)."""
        return self.value if self.axis == "rate" else None

    @property
    def monotone(self) -> bool:
        return not self.violations

    @property
    def burst(self) -> bool:
        """Whether the answer's probe was overloaded: its queue grew through the run (the probes'
        `overloaded`, `kvsim.analysis.plan_probes.probe_summary`: the rule of `kvsim run`'s "overloaded" note),
        so it passed as a burst that the run ended on before the growing wait broke the SLOs, not at a
        steady state; the answer then grows with the workload's request count (more requests, `--requests`,
        make a run outlast the SLOs). False without an answer, or for a probe that does not say. One of
        the two ways an answer is not a steady state (`steady`). False for status `burst`: its `value` is
        the highest rate that passed in a steady run, and the knee that passed only as a burst is
        `burst_rate` (the status and `burst_rate` say the burst; `burst` and `steady` say the answer)."""
        row = self._answer_row()
        return bool(row is not None and row.get("overloaded"))

    @property
    def servable_rate(self) -> float | None:
        """The answer's rate (a rate search's answer, another's target rate) counts every arrival, those
        set aside too (`unservable`); this is the rate of the rest, the requests judged: that rate times
        their share of the requests (a probe's `completed` + `rejected`). None without a rate or counts."""
        rate, total = self._rate_and_total()
        if rate is None or not total:
            return None
        return float(rate) * (total - sum(self.unservable.values())) / total

    def _rate_and_total(self) -> tuple[float | None, int]:
        """The answer's rate (`servable_rate`) and its probe's requests (else the first probe's)."""
        row = self._answer_row() or (self.probes.row(0, named=True) if self.probes.height else None) or {}
        rate = self.value if self.axis == "rate" else row.get("rate")
        return rate, (row.get("completed") or 0) + (row.get("rejected") or 0)

    @property
    def steady(self) -> bool | None:
        """Whether the answer's probe ran at a steady state (the probes' `steady`,
        `kvsim.analysis.plan_probes.probe_summary`; DESIGN.md §Capacity search, "Steady state"): False when it
        was overloaded (`burst`) or too short to reach one, its arrivals lasting less than
        `steady_state.STEADY_SPANS` times its requests' e2e p99, so that its engine never held the load the
        rate keeps in it and the answer overstates what the configuration sustains; None without an
        answer, or for a probe that does not say."""
        row = self._answer_row()
        return None if row is None else _steady(row)

    def _answer_row(self) -> dict[str, Any] | None:
        if self.value is None or self.axis not in self.probes.columns:
            return None
        rows = self.probes.filter(pl.col(self.axis) == self.value)
        return rows.row(0, named=True) if rows.height else None

    def steady_caveat(self) -> str:
        """Why the answer is not a steady state and what to do, in a sentence (empty for another
        answer): its run was overloaded (`burst`) or too short (`steady`)."""
        row = self._answer_row()
        if row is None or _steady(row) is not False:
            return ""
        done = row.get("completed")
        what = f"its {done:,} requests" if isinstance(done, int) else "its requests"
        if self.axis != "rate" and isinstance(row.get("rate"), float | int):
            what += f", arriving at {row['rate']:.4g} req/s,"
        at = self._fmt(self.value) if self.axis == "rate" else f"{self.axis} {self._fmt(self.value)}"
        if row.get("overloaded"):
            served = row.get("served_rps")
            speed = f" at {served:.4g} req/s" if isinstance(served, float) else ""
            return (
                f"NOT A STEADY STATE: the run at {at} was overloaded ({what} were served{speed}, the queue "
                "growing through the run: kvsim run's overloaded note): it passed as a burst that ended "
                "before the growing wait broke the SLOs, so the answer is the burst's and changes with the "
                "request count; more requests (--requests) make the runs outlast the SLOs"
            )
        span, e2e = row.get("arrival_span_s"), row.get("e2e_s_p99")
        if isinstance(span, float) and isinstance(e2e, float) and e2e > 0:
            rate = row.get("rate") if self.axis != "rate" else self.value
            ran = done if isinstance(done, int) else None
            need = (
                f": {fmt_need(steady_requests(e2e, rate, ran, span))}"
                if isinstance(rate, float | int) and rate > 0
                else ""
            )
            if self.axis != "rate":  # ("its N requests, arriving at R req/s," would arrive twice)
                what = what.replace(", arriving at ", " at ").rstrip(",")
            timing = (
                f"{what} arrived over {span:.3g} s, {fmt_spans(span, e2e)} times their e2e p99 of {e2e:.3g} s; a "
                f"steady state needs arrivals over {STEADY_SPANS:g} times it{need}"
            )
        else:
            timing = f"{what} arrived over less than {STEADY_SPANS:g} times their e2e p99"
        return (
            f"NOT A STEADY STATE: the run at {at} was too short to reach one ({timing}): a run starts "
            "empty, and until its arrivals have lasted about its requests' longest latencies the engine "
            "holds fewer of them than the rate keeps in it, so TTFT and TPOT were measured on a lighter "
            "engine and the answer can overstate what is sustained; more requests (--requests) make the "
            "runs long enough"
        )

    def _burst_words(self, slos: str) -> str:
        """The message of status `burst`: the highest rate that passed in a steady run (`value`, a lower
        bound, or that none did), then the knee the search found (`burst_rate`) and why it is no answer:
        its run was overloaded, served at the rate the message quotes."""
        lo, hi = self.bracket
        knee, fails = self._fmt2(lo, hi)
        rows = self.probes.filter(pl.col(self.axis) == lo) if self.axis in self.probes.columns else None
        row = rows.row(0, named=True) if rows is not None and rows.height else {}
        done, served = row.get("completed"), row.get("served_rps")
        what = f"its {done:,} requests" if isinstance(done, int) else "its requests"
        speed = f" at {served:.4g} req/s" if isinstance(served, float) else ""
        head = (
            f"highest rate meeting {slos} in a steady run: {self._fmt(self.value)} (a lower bound: the rates "
            "that passed above it passed only in runs too short or overloaded to tell)"
            if self.value is not None
            else f"no rate probed meets {slos} in a steady run (every rate that passed, passed in a run too "
            "short or overloaded to tell)"
        )
        return (
            f"{head}. NOT A STEADY STATE: the search's knee, {knee}{f' ({fails} fails)' if hi is not None else ''}, "
            "passed only as a burst: "
            f"the run there was overloaded ({what} were served{speed}, the queue growing through the run: "
            "kvsim run's overloaded note), so the configuration does not sustain it, and the knee changes "
            "with the request count; more requests (--requests) make the runs outlast the SLOs and the "
            "search find the sustained knee"
        )

    def _decisive_rows(self) -> list[dict[str, Any]]:
        """The probes the answer rests on: the bracket's two ends (the passing one and the failing one
        next to it), those that exist."""
        if self.axis not in self.probes.columns:
            return []
        out = []
        for x in self.bracket:
            if x is not None:
                rows = self.probes.filter(pl.col(self.axis) == x)
                if rows.height:
                    out.append(rows.row(0, named=True))
        return out

    @property
    def outside_ci(self) -> bool | None:
        """Whether the answer's decisive probes (the bracket's ends) gave verdicts whose bounds lie outside
        the 95 % intervals of their statistics (the probes' `outside_ci`, `bound_outside_ci`; DESIGN.md
        §Capacity search, "Sampling"): False when some verdict rests on its sample, an SLO's bound inside
        the interval, so that another sample of as many requests could reverse it and move the answer;
        None when no decisive probe's verdict has an interval (a caller's probe, `normalized_latency`) or
        there is none. True is no proof of a settled answer: the interval takes the requests as
        independent draws, and so is a floor on the uncertainty."""
        if self.status == "burst":  # (the bracket's ends are the burst's, not what bounds `value`)
            return None
        flags = [r.get("outside_ci") for r in self._decisive_rows()]
        if any(f is False for f in flags):
            return False
        return True if any(f is True for f in flags) else None

    def sample_caveat(self) -> str:
        """Which of the answer's decisive verdicts rest on their sample, an SLO's bound inside the 95 %
        interval of its statistic; between which probes the sample tells the answer apart; and about how
        many requests would put the bounds outside the intervals, in a sentence (empty when `outside_ci`
        is not False; `kvsim.analysis.plan_sampling.sample_caveat`)."""
        return sample_caveat(self)

    @property
    def achieved(self) -> float | None:
        """The bracket's relative width `(upper - lower) / lower`, when both ends exist."""
        lo, hi = self.bracket
        return None if lo is None or hi is None or lo <= 0 else (hi - lo) / lo

    def _fmt(self, x: float | None, digits: int = 4) -> str:
        if x is None:
            return "-"
        if self.axis == "rate":
            return f"{x:.{digits}g} req/s"
        if self.axis == "kv_cache_bytes":
            from kvsim.model.units import byte_unit, fmt_bytes

            if digits == 4:
                return fmt_bytes(x)
            shown = byte_unit(x)  # (fmt_bytes' unit, more decimals; bytes are exact)
            return f"{shown[1]:.{digits - 3}f} {shown[0]}" if shown is not None else f"{int(x):,} B"
        return f"{x:.{digits}g}" if not float(x).is_integer() else f"{int(x):,}"

    def _fmt2(self, a: float | None, b: float | None) -> tuple[str, str]:
        """`a` and `b` as `_fmt` gives them, with more digits (exact bytes) where those coincide: a
        passing and a failing value the message names side by side must read as two."""
        for digits in (4, 5, 6, 7, 8, 10, 12, 17):
            x, y = self._fmt(a, digits), self._fmt(b, digits)
            if x != y or a == b:
                return x, y
        return x, y

    def _unloaded_failure(self) -> str | None:
        """A rate search that failed down to its floor where a lower rate does not help: at the two lowest
        rates probed a failed metric is the same (within 1 %): a latency, so the requests did not wait for
        each other (or a burst's wait the same at any rate), or a goodput fraction, the share of requests
        meeting their own SLOs, no larger at half the rate. None otherwise (the failure may still be
        load's)."""
        if self.axis != "rate" or self.probes.height < 2:
            return None
        low = self.probes.sort(self.axis).head(2).rows(named=True)
        flat = flat_failures(self.slos, low[0], low[1])
        if not flat:
            return None
        # The values as printed: "ttft_p99 5 s at both R1 and R2", or each's two where they differ there.
        same, values, missed, them = flat_words(flat)
        rates = f"{'both ' if same else ''}{self._fmt(low[0][self.axis])} and {self._fmt(low[1][self.axis])}"
        queued = low[0].get("queueing_s_p99")
        latencies = [a for s, a, _ in flat if s.upper]
        if not latencies:
            # Goodput fractions alone: the share of requests meeting their own SLOs does not grow as the
            # rate halves, whether they miss them alone or in a burst that waits at any rate.
            where = f" (queueing p99 {queued:.4g} s there)" if queued is not None and queued > 0 else ""
            return (
                f"{values} at {rates}, the lowest rates probed{where}: the share stays within 1 % as the "
                f"rate halves, so no lower rate meets {missed} (loosen {them} or the per-request SLOs "
                f"{'they count' if len(flat) > 1 else 'it counts'}, or make a request faster: another GPU, "
                "tensor parallelism, the batch's token budget)"
            )
        if queued is not None and queued > 0.1 * min(latencies):
            span = low[0].get("arrival_span_s")
            # (latencies in seconds only: a normalized latency, s/token, is no span to set beside one)
            timed = [(s, a) for s, a, _ in flat if s.upper and s.unit == "s"]
            slo, latency = min(timed, key=lambda sa: sa[1]) if timed else (None, None)
            if span is not None and slo is not None and latency is not None and span < latency:
                # The whole sample arrived within the latency it misses: the floor's rate, not the trace,
                # put them together (an absurd --start-rate whose floor, start / 4096, is itself absurd:
                # user audit 54 #4), so the probes cannot tell what a lower rate does.
                n = low[0].get("num_requests")
                sample = f"the {n:,} requests'" if n else "the requests'"
                return (
                    f"{values} at {rates}, the lowest rates probed, where requests still queue (queueing "
                    f"p99 {queued:.4g} s) because they arrive together: at {self._fmt(low[0][self.axis])} "
                    f"{sample} arrivals span {fmt_duration_ps(span * 1e12)}, less than their {slo.metric} "
                    f"of {latency:.4g} {slo.unit}, so these probes cannot tell whether a lower "
                    f"rate meets {missed}: the floor, min_rate (--min-rate; by default start_rate / 4096, "
                    "--start-rate, whose own default is the workload's rate), is too high; lower it to search "
                    "rates that spread the arrivals"
                )
            # Still queueing at the lowest rate, the same whatever the rate: requests that arrive at one
            # instant (a trace's burst) wait for each other however far apart the rate spreads the rest.
            return (
                f"{values} at {rates}, the lowest rates probed, where requests still queue (queueing "
                f"p99 {queued:.4g} s): requests that arrive together wait for each other at any rate, so no "
                f"lower rate meets {missed} (loosen {them}, or serve them "
                "faster: more replicas, another GPU, tensor parallelism)"
            )
        return (
            f"{values} at {rates}, the lowest rates probed: the requests miss {missed} without waiting "
            f"for each other, so no lower rate meets {them} (loosen "
            f"{them}, or make a request faster: another GPU, tensor parallelism, "
            "the batch's token budget)"
        )

    def _steady_cap(self) -> str | None:
        """A rate search passing up to its cap where the cap's run was a steady state (arrivals spread over
        many times its e2e p99): the cap, not a burst, ended it (a small --start-rate, whose cap start x
        4096 is small too: user audit 54 #4, where "the requests arrive nearly at once" was false). None
        where the cap's run was not judged steady."""
        if self.axis != "rate" or "steady" not in self.probes.columns:
            return None
        top = self.probes.sort(self.axis).row(-1, named=True)
        span, e2e = top.get("arrival_span_s"), top.get("e2e_s_p99")
        if top.get("steady") is not True or not span or not e2e:
            return None
        return (
            f"its run there was a steady state, its arrivals spread over {span:.4g} s, {span / e2e:.3g} times its "
            f"e2e p99 of {e2e:.4g} s, so the rate is sustained and a higher one may be too: the cap, max_rate "
            "(--max-rate; by default start_rate x 4096, --start-rate, whose own default is the workload's "
            "rate), is too low; raise it to search higher rates"
        )

    def _open_bracket(self, low: str, high: str, noun: str) -> str:
        """The bracket a `probe-limit` search stopped at, in words: "X passes, Y fails" (for a rate; the
        other axes' "X fails, Y passes"), or, where the search never found one end, what every probe did
        up to (or down to) the farthest value probed: no probe failed (or passed) to bracket the answer."""
        lo, hi = self.bracket
        flo, fhi = self._fmt2(lo, hi)
        if lo is not None and hi is not None:
            return f"{flo} {low}, {fhi} {high}"
        x = (
            [float(v) for v in self.probes[self.axis].drop_nulls()]
            if self.axis in self.probes.columns
            else []
        )
        adj = {"passes": "passing", "fails": "failing"}
        if lo is not None:  # (no probe gave the upper end's outcome)
            top = self._fmt(max(x, default=lo))
            return f"every {noun} probed {low}, up to {top}: no {adj[high]} {noun} bounds the answer yet"
        if hi is not None:
            bottom = self._fmt(min(x, default=hi))
            return f"every {noun} probed {high}, down to {bottom}: no {adj[low]} {noun} bounds the answer yet"
        return f"no {noun} probed"

    def _nothing_served(self) -> str:
        """The message where no probe served a request, every one rejected (`--max-model-len 16`): no SLO
        can be judged on none, so no advice to loosen them, lower a rate or change the GPU, only why the
        requests were rejected (`unservable`'s reasons, where it knows them) and what admits them; "" where
        a probe served one, or the probes carry no counts (a caller's)."""
        total = served_none(self.probes)
        if total is None:
            return ""
        fixes = {
            "prompt_len reaches max_model_len": "a max_model_len (--max-model-len) that holds the prompts and "
            "some output, or shorter prompts",
            "its samples need more running seats": "a max_num_seqs (--max-num-seqs) of at least the samples "
            "a request asks for, or fewer samples",
            "needs more blocks than the pool holds": "a larger KV cache a replica (--kv-cache-memory-bytes, "
            "--gpu-memory-utilization), or shorter requests",
            "needs a larger region than the address space": "a larger KV cache a replica "
            "(--kv-cache-memory-bytes, --gpu-memory-utilization), or shorter requests",
        }
        why, fix = "", "kvsim run at one of these values says why each was rejected"
        known = self.unservable or self.settled
        if known:
            why = (
                " ("
                + "; ".join(f"{n:,}: {reason.replace(': ', ', ', 1)}" for reason, n in known.items())
                + ")"
            )
            found = [f for r in known for k, f in fixes.items() if r.startswith(k)]
            if found and sum(known.values()) >= total:
                fix = "; ".join(found) + " would admit them"
        refused = ""
        if "refused" in self.probes.columns:
            n_refused = sum(1 for r in self.probes["refused"].to_list() if r)
            if n_refused:
                refused = f" ({fmt_count(n_refused, 'value')} refused by the configuration without a run)"
        settled = ""
        if self.settled:
            settled = (
                f" (the search stopped after {fmt_count(self.probes.height, 'probe')}: each request was "
                f"rejected at its arrival for what it asks of one replica's configuration, the same at every "
                f"{self.axis}, so no further probe could serve one)"
            )
        return (
            f"no request served at any {self.axis} probed{refused}: every one of the "
            f"{fmt_count(total, 'request')} was rejected at every probe{why}, so no SLO ({', '.join(s.label() for s in self.slos)}) "
            f"can be judged on them, whatever the {self.axis}{settled}; {fix}"
        )

    @property
    def message(self) -> str:
        """The outcome in one or two sentences."""
        nothing = self._nothing_served()
        if nothing or self.status == "all-rejected":  # (a caller's result without the counts: no reasons)
            return nothing or f"every request was rejected at every {self.axis} probed: no SLO can be judged"
        lo, hi = self.bracket
        slos = ", ".join(s.label() for s in self.slos)
        n = self.probes.height
        flo, fhi = self._fmt2(lo, hi)  # (the bracket's ends, told apart)
        if self.axis == "rate":
            what = (
                {
                    "converged": f"highest rate meeting {slos}: {flo} (passes; "
                    f"{fhi} fails; within {100 * (self.achieved or 0):.2g} % ≤ {100 * self.precision:g} %)",
                    "probe-limit": f"stopped at {n} probes before the bracket reached {100 * self.precision:g} %: "
                    + self._open_bracket("passes", "fails", "rate")
                    + " (max_probes, --max-probes, allows more)",
                    "above-cap": f"passes {slos} at every rate probed, up to the cap {self._fmt(lo)}: "
                    + (
                        self._steady_cap()
                        or "at such rates the workload's requests arrive nearly at once, so this says the whole "
                        "run served as one burst meets the SLOs, not that the rate can be sustained (more requests "
                        "make a run outlast the SLOs; or tighten them, or raise max_rate)"
                    ),
                    "below-floor": f"fails {slos} at every rate probed, down to the floor {self._fmt(hi)}: "
                    + (
                        self._unloaded_failure()
                        or self.floor_note
                        or "no rate meets the SLOs (lower min_rate, or loosen the SLOs)"
                    ),
                }[self.status]
                if self.status != "burst"
                else self._burst_words(slos)
            )
        else:
            what = {
                "converged": f"smallest {self.axis} meeting {slos}: {fhi}"
                + (f" {self.value_words}" if self.value_words else "")
                + (f" ({flo} fails)" if lo is not None else " (the smallest value probed)"),
                "probe-limit": (
                    f"stopped at {n} probes before the bracket reached {100 * self.precision:g} %: "
                    if self.precision > 0
                    else f"stopped at {n} probes with the bracket still open: "  # an exact integer search
                )
                + self._open_bracket(
                    "fails", "passes", "replica count" if self.axis == "replicas" else f"{self.axis} value"
                )
                + " (max_probes, --max-probes, allows more)",
                "above-cap": self.plateau
                or f"fails {slos} at every {self.axis} probed, up to the cap {self._fmt(lo)}",
                "below-floor": f"passes {slos} at every {self.axis} probed, down to the floor "
                f"{self._fmt(hi)}",
            }[self.status]
        aside = sum(self.unservable.values())
        if "rejected" in self.probes.columns:
            rejecting = self.probes.filter(pl.col("rejected").fill_null(0) > aside)
            if rejecting.height:
                first = rejecting.row(0, named=True)
                what += (
                    f"; {fmt_count(rejecting.height, 'probe')} failed for rejecting requests, never served (e.g. "
                    f"{first['rejected']:,} of {first['rejected'] + (first.get('completed') or 0):,} at "
                    f"{self.axis} {self._fmt(first[self.axis])})"
                )
        if aside:
            why = "; ".join(
                f"{n:,}: {reason.replace(': ', ', ', 1)}" for reason, n in self.unservable.items()
            )
            what += (
                f"; {fmt_count(aside, 'request')} set aside, rejected at every probe whatever the {self.axis} ({why}): "
                "the SLOs are judged on the rest"
            )
            if self.servable_rate is not None and self.servable_rate > 0:
                rate, total = self._rate_and_total()
                what += (
                    f" ({self._fmt(rate) if self.axis == 'rate' else f'{rate:.4g} req/s'} counts all "
                    f"{total:,} arrivals, those set aside too; the {total - aside:,} judged arrive at "
                    f"{self.servable_rate:.4g} req/s)"
                )
        if "refused" in self.probes.columns:
            refused = [r for r in self.probes["refused"].to_list() if r]
            if refused:
                what += f"; {fmt_count(len(refused), 'value')} failed without a run, refused by the configuration ({refused[0]})"
        if self.steady is False and (
            self.status != "above-cap" or self.axis != "rate"
        ):  # (above-cap says it)
            what += f". {self.steady_caveat()}"
        if self.outside_ci is False:
            what += f". {self.sample_caveat()}"
        if self.violations:
            pairs = [self._fmt2(a, b) for a, b in self.violations[:3]]
            shown = ", ".join(f"{a} {'fails' if self.axis == 'rate' else 'passes'} but "
                              f"{b} {'passes' if self.axis == 'rate' else 'fails'}"
                              for a, b in pairs)  # fmt: skip
            more = f" (and {len(self.violations) - 3} more pairs)" if len(self.violations) > 3 else ""
            what += (
                f". NOT MONOTONE: {shown}{more}; the answer is taken below the first failure, where every "
                "probe passed"
            )
        return what

    def table(self) -> str:
        """The probes as a plain-text table (sorted by the axis)."""
        cols = ["round", self.axis, "passed", *[s.metric for s in self.slos]]
        if self.axis != "rate" and "rate" in self.probes.columns:
            cols.append("rate")
        # (each SLO's 95 % interval, from kvsim's probes: a percentile's, a mean's, a goodput fraction's)
        # (a goodput fraction's column too where no probe had a request to give its interval, as a mean's
        # shows "-" then: kvsim's probes, which count the requests, `num_requests`)
        cis = [
            s
            for s in self.slos
            if f"{s.metric}_n" in self.probes.columns
            or (s.metric == "goodput_fraction" and "num_requests" in self.probes.columns)
        ]
        at = cols.index("passed") + 1 + len(self.slos)
        ci_cols = {f"{s.metric} 95% CI": s for s in cis}
        cols[at:at] = list(ci_cols)
        cols += [c for c in ("completed", "rejected") if c in self.probes.columns]
        if "outside_ci" in self.probes.columns and False in self.probes["outside_ci"].to_list():
            cols.append("bound vs CI")  # (the probes whose verdict rests on the sample, and on which SLO)
        if any(_steady(r) is False for r in self.probes.iter_rows(named=True)):
            cols.append("steady")  # (the probes that ran no steady state, and why; shown when any did)
        units = {s.metric: "" if s.unit == "fraction" else f" ({s.unit})" for s in self.slos}
        units.update({c: "" if s.unit == "fraction" else f" ({s.unit})" for c, s in ci_cols.items()})
        rows = [[c + units.get(c, "") for c in cols]]
        for r in self.probes.sort(self.axis).iter_rows(named=True):
            out = []
            for c in cols:
                v = r.get(c)
                if c in ci_cols:
                    out.append(fmt_interval(interval(r, ci_cols[c]), ci_cols[c]))
                elif c == "bound vs CI":
                    flag = r.get("outside_ci")
                    unsure = "+".join(s.metric for s in unsure_slos(r, self.slos))
                    out.append("-" if flag is None else "outside" if flag else f"INSIDE:{unsure}")
                elif c == "passed":
                    out.append("pass" if v else "FAIL")
                elif c == "steady":
                    state = _steady(r)
                    why = "overloaded" if r.get("overloaded") else "too-short"
                    out.append("-" if state is None else "yes" if state else f"NO:{why}")
                elif isinstance(v, float):
                    out.append(f"{v:.4g}")
                elif v is None:
                    out.append("-")
                else:
                    out.append(str(v))
            rows.append(out)
        widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
        lines = ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for JSON): the answer, bracket, status, SLOs, violations, message and every probe."""
        return {
            "axis": self.axis,
            "value": self.value,
            "bracket": list(self.bracket),
            "precision": self.precision,
            "achieved_precision": self.achieved,
            "status": self.status,
            "monotone": self.monotone,
            "burst": self.burst,
            "burst_rate": self.burst_rate,
            "steady": self.steady,
            "outside_ci": self.outside_ci,
            "violations": [list(v) for v in self.violations],
            "slos": [
                {"metric": s.metric, "bound": s.bound, "unit": s.unit, "upper": s.upper} for s in self.slos
            ],
            "message": self.message,
            "unservable": dict(self.unservable),
            "servable_rate": self.servable_rate,
            "settled": self.settled,
            "probes": self.probes.to_dicts(),
        }

    def figure(self) -> Any:
        """A matplotlib Figure: each SLO metric against the axis, its bound, the answer marked
        (`kvsim.analysis.plots.plan_figure`)."""
        from kvsim.analysis.plots import plan_figure

        return plan_figure(self)

    def plot(self, path: str | os.PathLike[str]) -> Path:
        """Writes `figure()` as a PNG to `path` and returns it."""
        from kvsim.analysis.plots import _save

        return _save(self.figure(), Path(path))


__all__ = [
    "DEFAULT_MAX_PROBES",
    "DEFAULT_PRECISION",
    "METRICS",
    "SLO",
    "STATUSES",
    "PlanResult",
    "Search",
    "check_precision",
    "parse_slos",
    "served_none",
]
