"""The sampling caveat of capacity search (DESIGN.md §Capacity search, "Sampling"): the quantile a
percentile SLO bounds, a probe's 95 % interval of an SLO's statistic (a percentile's from order
statistics, `kvsim.analysis.quantile_ci`; a mean's and a goodput fraction's, `kvsim.analysis.moment_ci`;
read by `kvsim.analysis.plan_probes.probe_summary` and `fraction_columns`) and whether the probe's verdict is
clear of it (`bound_outside_ci`, `unsure_slos`), the refusal of an SLO no probe can judge (`check_judgeable`), and
the caveat a search's answer carries when its decisive verdicts rest on their sample (`sample_caveat`,
`PlanResult.sample_caveat`'s): which, where the sample tells the answer apart, and about how many
requests would settle them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from kvsim.analysis.plan_slo import SLO
from kvsim.engine.simulate import SUMMARY_QUANTILES
from kvsim.errors import InvalidArgumentError
from kvsim.model.units import fmt_count

if TYPE_CHECKING:
    import polars as pl


class SearchResult(Protocol):
    """What the caveats below read of a search's answer (`kvsim.analysis.plan_search.PlanResult`, which
    calls them): its axis, SLOs and probes, whether its verdicts are clear of their intervals, its
    decisive probes and how it writes a probe's value."""

    axis: str
    slos: tuple[SLO, ...]
    probes: pl.DataFrame

    @property
    def outside_ci(self) -> bool | None: ...

    def _decisive_rows(self) -> list[dict[str, Any]]: ...

    def _fmt(self, x: float | None, digits: int = 4) -> str: ...

    def _fmt2(self, a: float | None, b: float | None) -> tuple[str, str]: ...


def check_judgeable(workload: Any, slos: Sequence[SLO]) -> None:
    """Refuses TPOT SLOs on a workload none of whose requests asks for a second token a sample
    (`output_len <= num_samples` for every one): TPOT, taken over requests of more than one token a sample
    (`kvsim.engine.simulate.latency_values`), is undefined on every probe, so the SLO cannot be judged
    (each probe failed it, and the search answered "every rate probed fails"). A workload without those
    columns (a caller's) is not checked.

    Raises:
        InvalidArgumentError: naming the SLO.
    """
    tpot = [s.metric for s in slos if s.metric.startswith("tpot_")]
    out, samples = getattr(workload, "output_len", None), getattr(workload, "num_samples", None)
    if not tpot or out is None or samples is None or len(out) == 0:
        return
    import numpy as np

    if bool((np.asarray(out) > np.asarray(samples)).any()):
        return
    raise InvalidArgumentError(
        f"slo {', '.join(tpot)}: cannot be judged on this workload: TPOT is undefined, for no request has a "
        "second output token (every output_len is 1 a sample); bound TTFT or e2el instead"
    )


SETTLE_CAP = 10_000_000
"""The most requests the sampling caveat quotes as the count that would settle a verdict (DESIGN.md
§Capacity search, "Sampling"): beyond it (or beyond what the simulated clock holds at the probe's rate)
the percentile sits too close to its bound for any practical sample, and the caveat says so with the
relative gap instead of a number."""


def quantile_of(slo: SLO) -> float | None:
    """The quantile a percentile SLO bounds (`ttft_p99`: 0.99), None for a mean or a fraction."""
    stat = slo.metric.rsplit("_", 1)[-1]
    return {f"p{round(q * 100)}": q for q in SUMMARY_QUANTILES}.get(stat) if slo.upper else None


def kind_of(slo: SLO) -> str:
    """Which statistic `slo` bounds, as its interval is taken: `percentile` (order statistics),
    `fraction` (Wilson) or `mean` (Student's t; `normalized_latency` too, which has none)."""
    if quantile_of(slo) is not None:
        return "percentile"
    return "fraction" if slo.unit == "fraction" else "mean"


def fraction_columns(fraction: float | None, n: int) -> dict[str, Any]:
    """A probe row's `goodput_fraction_ci_low`, `_ci_high` and `_n`: the Wilson 95 % interval
    (`moment_ci.wilson_interval`) of the share of n requests meeting their per-request SLOs; none
    without a share (None or NaN) or without requests (n 0). A share within 1e-9 of [0, 1] is taken
    as its end (rounding of a rescaled share); one further out is refused, never clamped.

    Raises:
        InvalidArgumentError: a share not a number or outside [0, 1]; n not an integer count.
    """
    import numpy as np

    from kvsim.analysis.moment_ci import _count, _real, wilson_interval

    n = _count("n", n)
    if fraction is None or (isinstance(fraction, (float, np.floating)) and math.isnan(fraction)) or n < 1:
        return {}
    p = _real("goodput_fraction", fraction)
    if not -1e-9 <= p <= 1 + 1e-9:
        raise InvalidArgumentError(f"goodput_fraction {fraction!r} must be in [0, 1] (a share of requests)")
    low, high = wilson_interval(min(max(p, 0.0), 1.0), n)  # (within 1e-9: rounding)
    return {"goodput_fraction_ci_low": low, "goodput_fraction_ci_high": high, "goodput_fraction_n": n}


def interval(row: Mapping[str, Any], slo: SLO) -> tuple[float | None, float | None] | None:
    """A probe's 95 % interval of `slo`'s statistic (the row's `{metric}_ci_low`, `_ci_high`; None for
    an end too few requests give), None without one (a caller's probe, `normalized_latency`)."""
    if row.get(f"{slo.metric}_n") is None or row.get(slo.metric) is None:
        return None
    return row.get(f"{slo.metric}_ci_low"), row.get(f"{slo.metric}_ci_high")


def _surely(row: Mapping[str, Any], slo: SLO, passes: bool) -> bool:
    """Whether the whole interval of `slo`'s statistic lies on the bound's passing side (at or below an
    upper bound, at or above a lower one: a goodput fraction's) or, `passes` False, on its failing side."""
    iv = interval(row, slo)
    if iv is None:
        return False
    low, high = iv
    if not slo.upper:  # (a lower bound, a goodput fraction's: passing at or above it)
        return low is not None and low >= slo.bound if passes else high is not None and high < slo.bound
    return high is not None and high <= slo.bound if passes else low is not None and low > slo.bound


def unsure_slos(row: Mapping[str, Any], slos: Sequence[SLO]) -> list[SLO]:
    """The SLOs with an interval on which a probe's verdict rests on its sample when it does (`outside_ci` False,
    `bound_outside_ci`): for a pass those whose interval reaches past the bound, for a fail the failed ones
    whose interval reaches back to it; empty otherwise."""
    if row.get("outside_ci") is not False:
        return []
    if row.get("passed"):
        return [s for s in slos if interval(row, s) is not None and not _surely(row, s, True)]
    return [s for s in slos if not s.holds(row.get(s.metric)) and interval(row, s) is not None]


def bound_outside_ci(
    row: Mapping[str, Any], slos: Sequence[SLO], failed_by_rejection: bool = False
) -> bool | None:
    """Whether a probe's verdict is statistically clear (DESIGN.md §Capacity search, "Sampling"): the
    SLOs' bounds outside the 95 % intervals of their statistics from the probe's requests (a percentile's
    from order statistics, `kvsim.analysis.quantile_ci`; a goodput fraction's Wilson interval and a
    mean's Student's t interval, `kvsim.analysis.moment_ci`), on the verdict's side. A pass is clear
    when every SLO with an interval has it wholly on its bound's passing side (an SLO without one, a
    caller's probe's or `normalized_latency`, is not judged); a fail when some failed SLO's interval lies
    wholly on the failing side. None where no interval decides it: none at all, a fail for rejecting
    requests, or a fail an SLO without an interval may settle (one of those failed, and no SLO failed
    clearly)."""
    if failed_by_rejection:
        return None
    if row.get("passed"):
        judged = [s for s in slos if interval(row, s) is not None]
        return None if not judged else all(_surely(row, s, True) for s in judged)
    failed = [s for s in slos if not s.holds(row.get(s.metric))]
    if any(_surely(row, s, False) for s in failed):
        return True
    if not failed or any(interval(row, s) is None for s in failed):
        return None
    return False


def fmt_end(x: float, slo: SLO) -> str:
    """An interval's end as the message gives it: 4 digits, more where those read as `slo`'s bound (an
    end of 1.99996 beside a bound of 2 s is not "2")."""
    for digits in (4, 6, 8):
        if f"{x:.{digits}g}" != f"{slo.bound:.{digits}g}" or x == slo.bound:
            return f"{x:.{digits}g}"
    return repr(x)


def fmt_interval(span: tuple[float | None, float | None] | None, slo: SLO) -> str:
    """An interval of `slo`'s statistic as the tables print it (`PlanResult.table`, `kvsim plan
    --split`'s): `[A,B]`, `(-∞,B]` or `[A,∞)` for an end too few requests give, `too few` where they
    give neither (a mean's `too few (n<30)`: `moment_ci.MIN_MEAN_N`; it printed `(-∞,∞)`, read as an
    interval computed), `-` without one."""
    if span is None:
        return "-"
    low, high = span
    if low is None and high is None:
        from kvsim.analysis.moment_ci import MIN_MEAN_N

        return f"too few (n<{MIN_MEAN_N})" if slo.metric.endswith("_mean") else "too few"
    return (
        ("(-∞" if low is None else f"[{fmt_end(low, slo)}")
        + ","
        + ("∞)" if high is None else f"{fmt_end(high, slo)}]")
    )


def bound_vs_ci(result: SearchResult) -> str:
    """The answer's place against its intervals in a word, as `kvsim plan --split`'s table gives it per
    search: `outside` (`PlanResult.outside_ci` True), `INSIDE:tpot_p99@2` (False, naming each SLO on
    which a decisive probe's verdict rests on its sample and, after `@`, at which probes of the search's
    axis: the answer's or the failing one next to it, whose interval the row's `95% CI` may not show),
    `-` (None: no interval decides it)."""
    flag = result.outside_ci
    if flag is None:
        return "-"
    if flag:
        return "outside"
    unsure: dict[str, list[str]] = {}
    for row in result._decisive_rows():
        for s in unsure_slos(row, result.slos):
            at = result._fmt(row[result.axis])
            if at not in unsure.setdefault(s.metric, []):
                unsure[s.metric].append(at)
    return "INSIDE:" + "+".join(f"{m}@{','.join(at)}" for m, at in unsure.items())


def practical_requests(result: SearchResult, row: Mapping[str, Any]) -> int:
    """The most requests `settling_requests` quotes as a number (`SETTLE_CAP`, and on the rate axis
    no more than the simulated clock holds at the probe's rate): past it the percentile sits too close
    to its bound for any practical sample to settle it."""
    cap = SETTLE_CAP
    if result.axis == "rate":
        from kvsim.model.knob_table import MAX_TIME_PS, PS_PER_S

        cap = min(cap, max(math.floor(float(row[result.axis]) * MAX_TIME_PS / PS_PER_S), 1))
    return cap


def settling_requests(result: SearchResult, row: Mapping[str, Any], slo: SLO) -> int | None:
    """About how many requests, as `--requests` gives them, would make `row`'s verdict on `slo` clear: over
    the statistic's sample, a percentile's `quantile_ci.requests_to_settle`, a fraction's
    `moment_ci.wilson_requests` (exact, the score test's closed form), a mean's
    `moment_ci.mean_requests`; then scaled from that sample to the workload's requests (the row's
    `num_requests`, else `completed`) where the sample is fewer: the servable requests of a goodput
    fraction when some were set aside, TPOT's requests of more than one token a sample, the finished
    requests of a latency when some were rejected."""
    from kvsim.analysis.moment_ci import mean_requests, wilson_requests
    from kvsim.analysis.quantile_ci import requests_to_settle

    n, p, kind = row[f"{slo.metric}_n"], quantile_of(slo), kind_of(slo)
    if not n:
        return None
    low, high = interval(row, slo) or (None, None)
    if kind == "fraction":
        m = wilson_requests(row[slo.metric], slo.bound)
    elif p is None:
        m = mean_requests(n, row[slo.metric], high, slo.bound)
    else:
        m = requests_to_settle(n, row[slo.metric], low, high, slo.bound, p=p)
    total = row.get("num_requests")
    if not isinstance(total, int):
        total = row.get("completed")
    if m is not None and isinstance(total, int) and total > n:  # (the sample is a share of --requests)
        m = math.ceil(m * total / n)
    if m is not None:  # (an estimate: two significant digits, rounded up)
        step = 10 ** max(len(str(m)) - 2, 0)
        m = -(-m // step) * step
    return m


def _at(result: SearchResult, x: float) -> str:
    """A probe's value as the messages name it: `3.4 req/s`, `num_blocks 842`."""
    return result._fmt(x) if result.axis == "rate" else f"{result.axis} {result._fmt(x)}"


def told_apart(result: SearchResult) -> tuple[float | None, float | None]:
    """The nearest probes on either side of the answer whose verdicts are clear of their intervals
    (`outside_ci` True), as (low, high): the high end first, the lowest probe clear on the high side (for a
    rate the lowest failing clearly, for the other axes the lowest passing clearly), then the low end, the
    highest probe clear on the other verdict below it (a rate's highest passing clearly, the others'
    highest failing clearly). Between them the sample does not tell the answer apart (each end None where
    no probe is clear)."""
    if "outside_ci" not in result.probes.columns:
        return None, None
    rows = [r for r in result.probes.iter_rows(named=True) if r.get("outside_ci") is True]
    low_like = [float(r[result.axis]) for r in rows if bool(r["passed"]) == (result.axis == "rate")]
    high_like = [float(r[result.axis]) for r in rows if bool(r["passed"]) != (result.axis == "rate")]
    hi = min(high_like, default=None)
    lo = max((x for x in low_like if hi is None or x < hi), default=None)
    return lo, hi


def sample_caveat(result: SearchResult) -> str:
    """Which of the answer's decisive verdicts rest on their sample, an SLO's bound inside the 95 %
    interval of its statistic (a percentile, a goodput fraction or a mean); between which probes the sample tells the answer apart; and about how
    many requests would put the bounds outside the intervals, in a sentence (empty when `outside_ci`
    is not False)."""
    if result.outside_ci is not False:
        return ""
    from kvsim.analysis.moment_ci import MIN_MEAN_N

    parts, needs, close, kinds = [], [], [], []
    n_shown, bare = None, 0
    for row in result._decisive_rows():
        for slo in unsure_slos(row, result.slos):
            low, high = interval(row, slo) or (None, None)
            at = _at(result, row[result.axis])
            unit = "" if slo.unit == "fraction" else f" {slo.unit}"
            kinds.append(kind_of(slo))
            if low is not None and high is not None:
                span = f"95 % interval {fmt_end(low, slo)} to {fmt_end(high, slo)}{unit}"
            elif low is not None:
                span = f"95 % interval above {fmt_end(low, slo)}{unit}, too few requests for an upper end"
            elif high is not None:
                span = f"95 % interval below {fmt_end(high, slo)}{unit}, too few requests for a lower end"
            elif kind_of(slo) == "mean":
                span = f"no 95 % interval: fewer than {MIN_MEAN_N} requests, too few to judge a mean by"
            else:
                span = "no 95 % interval: too few requests to bound the percentile at all"
            bare += low is None and high is None
            n = row[f"{slo.metric}_n"]
            source = "" if n == n_shown else f" from {fmt_count(n, 'request')}"
            n_shown = n
            parts.append(
                f"{at} {'passes' if row['passed'] else 'fails'} {slo.label()} with "
                f"{row[slo.metric]:.4g}{unit}{source} ({span})"
            )
            m = settling_requests(result, row, slo)
            if m is not None and m > practical_requests(result, row):
                gap = abs(row[slo.metric] - slo.bound) / slo.bound if slo.bound else math.inf
                close.append(f"{slo.metric} at {at} sits {100 * gap:.2g} % from its bound")
                continue
            needs.append(m)
    one = len(parts) == 1
    lo, hi = told_apart(result)
    low_word, high_word = ("passing", "failing") if result.axis == "rate" else ("failing", "passing")
    if lo is not None and hi is not None:
        flo, fhi = result._fmt2(lo, hi)
        if result.axis != "rate":
            flo, fhi = f"{result.axis} {flo}", f"{result.axis} {fhi}"
        apart = (
            f"; the nearest probes clear of their intervals are at {flo} ({low_word}) and {fhi} "
            f"({high_word}), so at best the sample places the answer between those"
        )
    elif lo is not None:
        apart = (
            f"; the nearest probe clear of its interval is at {_at(result, lo)} ({low_word}), and no "
            f"{high_word} probe is"
        )
    elif hi is not None:
        apart = (
            f"; the nearest probe clear of its interval is at {_at(result, hi)} ({high_word}), and no "
            f"{low_word} probe is"
        )
    else:
        apart = "; no probe's verdict is clear of its interval"
    known = [m for m in needs if m is not None]
    too_close = (
        f"{'; '.join(close)}: too close for any practical sample to settle "
        f"{'it' if len(close) == 1 else 'them'} (that would take more than "
        f"{fmt_count(SETTLE_CAP, 'request')}, or more than the simulated clock holds at the rate)"
    )
    if not known and close and len(needs) == 0:
        need = too_close
    elif not known:
        need = "no number of requests puts a bound outside an interval around a statistic equal to it"
        if close:
            need += f"; {too_close}"
    else:
        need = (
            f"about {fmt_count(max(known), 'request')} or more would put "
            f"{'the bound' if one else 'the bounds'} outside {'it' if one else 'them'} (--requests; "
            + (
                "estimated with each percentile staying where it is and its interval narrowing as 1/√n"
                if set(kinds) == {"percentile"}
                else "estimated with each statistic staying where it is"
            )
            + (", but a statistic equal to its bound is settled by none)" if len(known) < len(needs) else ")")
        )
        if close:
            need += f"; {too_close}"
    if set(kinds) == {"percentile"}:
        inside = (
            f"inside the order statistics' distribution-free interval of {'its' if one else 'the'} percentile"
        )
        that, floor = "That interval takes", "it is"
        spread = "near a knee a p99 spreads several times wider over workload seeds"
    else:
        inside = (
            "inside its statistic's 95 % interval ("
            + "; ".join(_INTERVAL_OF[k] for k in ("percentile", "fraction", "mean") if k in kinds)
            + ")"
        )
        that, floor = ("That interval takes", "it is") if one else ("Those intervals take", "they are")
        spread = (
            f"near a knee {'this statistic spreads' if one else 'these statistics spread'} wider over "
            "workload seeds than the interval says"
        )
    if bare == len(parts):  # (no interval at all: nothing for a bound to lie inside)
        where = (
            f"{'the sample is' if one else 'each sample is'} too small for any 95 % interval of "
            f"{'its statistic' if one else 'the statistics'}"
        )
        that, floor = "An interval would take", "it would be"
    else:
        where = f"{'the bound lies' if one else 'each bound lies'} {inside}"
        if bare:
            where += " or, from too few requests, has none"
    return (
        f"THE {'VERDICT RESTS' if one else 'VERDICTS REST'} ON THE SAMPLE: {'; '.join(parts)}: "
        f"{where}, so another sample of as "
        f"many requests could reverse {'this verdict' if one else 'these verdicts'}{apart}. {that} "
        "the requests as independent draws, which requests sharing an engine are not "
        f"({spread}): {floor} a floor on the uncertainty, and {need}"
    )


_INTERVAL_OF = {
    "percentile": "a percentile's from the order statistics, distribution-free",
    "fraction": "a goodput fraction's Wilson score interval",
    "mean": (
        "a mean's Student's t interval, mean ± t s/√n, approximate and too narrow under heavy tails and "
        "few requests"
    ),
}
"""How `sample_caveat` names each statistic's interval where the SLOs at stake are not all percentiles."""


__all__ = [
    "SETTLE_CAP",
    "bound_outside_ci",
    "bound_vs_ci",
    "check_judgeable",
    "fmt_end",
    "fmt_interval",
    "fraction_columns",
    "interval",
    "kind_of",
    "practical_requests",
    "quantile_of",
    "sample_caveat",
    "settling_requests",
    "told_apart",
    "unsure_slos",
]
