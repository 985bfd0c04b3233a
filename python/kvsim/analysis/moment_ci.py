"""How far a fraction or a mean from n requests can be trusted (DESIGN.md §Capacity search, "Sampling"),
the companions of `kvsim.analysis.quantile_ci`'s percentiles: the Wilson score interval of a binomial
fraction (a goodput SLO's share of requests meeting their bounds, `wilson_interval`) and the requests
that would put a bound outside it (`wilson_requests`, exact: the score test's closed form); Student's t
interval of a mean (a mean SLO's, `mean_interval`: approximate, too narrow under heavy tails and at small
n, none below `MIN_MEAN_N` values) and the requests that would put a bound outside it
(`mean_requests`). The standard library and numpy only: the normal quantile is `statistics.NormalDist`'s,
Student's t quantile `t_quantile`'s (exact series, no scipy).
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist
from typing import Any

import numpy as np

from kvsim.analysis.quantile_ci import LEVEL
from kvsim.errors import InvalidArgumentError

MIN_MEAN_N = 30
"""The fewest values `mean_interval` gives a mean's interval from (DESIGN.md §Capacity search,
"Sampling"): below it the t interval's coverage of a skewed latency's mean falls far short of its level
(exponential values: about 90 % at 10, 93 % at 30), so a probe's mean SLO is not judged clear on fewer."""

MAX_COUNT = 2**53
"""The largest count of trials or requests taken: every integer up to it is exact as a float."""

_SERIES_DF = 200
"""`t_quantile` inverts the exact series up to these degrees of freedom, Cornish-Fisher above."""


def _real(name: str, x: Any) -> float:
    """`x` checked as a finite real number (not a bool, not a string): a float."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise InvalidArgumentError(f"{name} {x!r} must be a finite number")
    if isinstance(x, (int, np.integer)) and abs(int(x)) > MAX_COUNT:
        raise InvalidArgumentError(f"{name} {x!r} is out of range (at most {MAX_COUNT:,} in size)")
    v = float(x)
    if not math.isfinite(v):
        raise InvalidArgumentError(f"{name} {x!r} must be a finite number")
    return v


def _count(name: str, n: Any, lo: int = 0) -> int:
    """`n` checked as an integer count from `lo` to `MAX_COUNT` (not a bool, not 2.7)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise InvalidArgumentError(f"{name} {n!r} must be a count of requests (an integer, {lo} or more)")
    if not lo <= int(n) <= MAX_COUNT:
        raise InvalidArgumentError(f"{name} {n!r} must be a count of requests from {lo} to {MAX_COUNT:,}")
    return int(n)


def _level(level: Any) -> float:
    """`level` checked as a confidence strictly between 0 and 1 (0.95 for a 95 % interval)."""
    if isinstance(level, bool) or not isinstance(level, (int, float, np.integer, np.floating)):
        raise InvalidArgumentError(f"level {level!r} must be a confidence strictly between 0 and 1 (0.95)")
    if not 0 < level < 1:  # (False for NaN; compared before any float conversion, a huge int's)
        raise InvalidArgumentError(
            f"level {level!r} must be a confidence strictly between 0 and 1 (0.95 for a 95 % interval; "
            "0 covers nothing, 1 only the whole range)"
        )
    return float(level)


def _fraction(name: str, x: Any) -> float:
    """`x` checked as a fraction in [0, 1] (a share of requests), refused beyond it, never clamped."""
    v = _real(name, x)
    if not 0 <= v <= 1:
        raise InvalidArgumentError(f"{name} {x!r} must be in [0, 1] (a share of requests)")
    return v


def _z(level: float) -> float:
    """The standard normal quantile of a two-sided `level` interval (1.959964 for 95 %)."""
    return _normal_upper(_level(level))


def _normal_upper(level: float) -> float:
    """The normal quantile of a two-sided `level` interval, from the tail (1 − level) / 2, which stays
    above 0 for a level one rounding below 1, where 0.5 + level / 2 rounds to 1."""
    return -NormalDist().inv_cdf((1 - level) / 2)


def _t_central(t: float, df: int) -> float:
    """P(|T| < t) for T Student's t with `df` degrees of freedom, t >= 0: the finite series of
    Abramowitz & Stegun, *Handbook of Mathematical Functions*, 26.7.3 (odd df) and 26.7.4 (even df),
    in θ = arctan(t / √df); exact to float rounding."""
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:  # sin θ (1 + ½ cos²θ + (1·3)/(2·4) cos⁴θ + ... to cos^(df−2) θ)
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return s * total
    if df == 1:
        return 2 * theta / math.pi
    term, total = 1.0, 1.0  # (2/π)(θ + sin θ cos θ (1 + (2/3) cos²θ + ... to cos^(df−3) θ))
    for k in range(1, (df - 1) // 2):
        term *= c2 * (2 * k) / (2 * k + 1)
        total += term
    return 2 / math.pi * (theta + s * math.cos(theta) * total)


def t_quantile(df: int, level: float = LEVEL) -> float:
    """Student's t quantile of a two-sided `level` interval with `df` degrees of freedom (12.706 at 95 %
    and df 1, 2.776 at 4, 2.045 at 29, tending to the normal's 1.960): up to 200 degrees of freedom the
    root of the exact series `_t_central` (bisection to float precision), above it the Cornish-Fisher
    expansion in 1/df (Abramowitz & Stegun 26.7.5, four terms: under 1e-9 from the series at df 200).

    Raises:
        InvalidArgumentError: df not a positive integer, a level outside (0, 1).
    """
    return _t_cached(_count("df", df, 1), _level(level))


@functools.lru_cache(maxsize=1024)
def _t_cached(df: int, level: float) -> float:
    return _t_compute(df, level)


def _t_compute(df: int, level: float) -> float:
    """`t_quantile`'s computation, its arguments checked."""
    x = _normal_upper(level)
    if df > _SERIES_DF:
        x3, x5, x7, x9 = x**3, x**5, x**7, x**9
        g1 = (x3 + x) / 4
        g2 = (5 * x5 + 16 * x3 + 3 * x) / 96
        g3 = (3 * x7 + 19 * x5 + 17 * x3 - 15 * x) / 384
        g4 = (79 * x9 + 776 * x7 + 1482 * x5 - 1920 * x3 - 945 * x) / 92160
        return x + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4
    lo, hi = x, 1.0
    while _t_central(hi, df) < level:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if _t_central(mid, df) < level else (lo, mid)
    return hi


def wilson_interval(fraction: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The Wilson score interval (Wilson, "Probable inference, the law of succession, and statistical
    inference", JASA 22, 1927) of a binomial proportion observed as `fraction` of n independent trials:
    the proportions π whose score test |p̂ − π| <= z √(π (1 − π) / n) accepts p̂, the roots of a quadratic,

        (p̂ + z²/2n ± z √(p̂ (1 − p̂) / n + z²/4n²)) / (1 + z²/n),

    z the normal quantile of `level` (1.96 at 95 %). Brown, Cai & DasGupta ("Interval estimation for a
    binomial proportion", Statistical Science 16, 2001) recommend it over the textbook Wald
    p̂ ± z √(p̂ (1 − p̂) / n), whose coverage collapses near 0 and 1 (at p̂ = 1, where a goodput SLO of
    0.99 lives, Wald's interval is the single point 1). It always lies within [0, 1], holds p̂ and has
    both ends (p̂ = 1: upper end 1, lower n / (n + z²)). Its coverage is near `level` on average, not at
    least `level` at every π as Clopper-Pearson's, and it dips where n π (1 − π) is about 1 (Brown, Cai &
    DasGupta §4): 92.0 % at π = 0.999 and n = 1,000, exactly where a 0.999 goodput SLO sits.

    Args:
        fraction: the share of the n trials that succeeded, in [0, 1] (k / n).
        n: the trials, an integer from 1 to 2**53.
        level: the confidence, strictly between 0 and 1.

    Returns:
        (low, high).

    Raises:
        InvalidArgumentError: a fraction outside [0, 1], not finite or not a number; n not an integer
            count of 1 or more; a level outside (0, 1).
    """
    n = _count("n", n, 1)
    p = _fraction("fraction", fraction)
    z = _z(level)
    z2n = z * z / n
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * math.sqrt(p * (1 - p) / n + z2n / (4 * n)) / (1 + z2n)
    # (clamped against rounding: at p̂ = 0 or 1 an end is exactly 0 or 1, and p̂ lies inside)
    return max(0.0, min(centre - half, p)), min(1.0, max(centre + half, p))


def wilson_requests(fraction: float, bound: float, level: float = LEVEL) -> int | None:
    """The fewest trials whose Wilson interval around `fraction` leaves `bound` outside it, the share
    staying where it is: the interval is the set of π the score test accepts, so b is outside it exactly
    when (p̂ − b)² > z² b (1 − b) / n, that is n > z² b (1 − b) / (p̂ − b)² (closed form; the half-width
    narrows as 1/n, not 1/√n, where p̂ is 0 or 1). None when the share is the bound (no sample settles it).

    Raises:
        InvalidArgumentError: a fraction or bound outside [0, 1] or not finite, a level outside (0, 1).
    """
    p, b, z = _fraction("fraction", fraction), _fraction("bound", bound), _z(level)
    if p == b:
        return None
    gap2 = (p - b) ** 2  # (0 when the gap underflows: no practical count then)
    need = z * z * b * (1 - b) / gap2 if gap2 > 0 else math.inf
    return math.floor(need) + 1 if need < MAX_COUNT else MAX_COUNT


def _values(values: Any) -> np.ndarray:
    """`values` checked as one-dimensional finite real numbers (latencies)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise InvalidArgumentError(f"values {type(values).__name__} must be a sequence of latencies")
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"values cannot be read as numbers ({exc})") from None
    if arr.dtype.kind not in "iuf" or arr.dtype == np.bool_:
        raise InvalidArgumentError(f"values must be real numbers (latencies), not {arr.dtype}")
    if arr.ndim != 1:
        raise InvalidArgumentError(f"values must be one-dimensional (shape {arr.shape})")
    arr = arr.astype(np.float64)
    if np.isnan(arr).any():
        raise InvalidArgumentError("values hold NaN, which has no mean")
    if np.isinf(arr).any():
        raise InvalidArgumentError("values hold an infinite latency, which has no finite mean")
    return arr


def mean_interval(values: Any, level: float = LEVEL) -> tuple[float | None, float | None]:
    """Student's t `level` interval of the mean of the distribution `values` (latencies) were drawn from:
    x̄ ± t s / √n (s the sample standard deviation, t the quantile with n − 1 degrees of freedom,
    `t_quantile`: 2.045 at 95 % and n 30, 1.96 as n grows), its low end no lower than 0 where no value is
    negative (a latency's mean never is; not the smallest value, for the true mean can lie below it).
    APPROXIMATE: exact only for normal values, and a latency's skewed, heavy tail (its queueing
    episodes) makes it too narrow, s itself being underestimated, the more so the fewer the values
    (exponential values: about 90 % coverage at n 10, 93 % at 30, 94 % at 100); unlike a percentile's
    order-statistics interval it is not distribution-free. (None, None) from fewer than `MIN_MEAN_N`
    values: too few to judge a mean by.

    Raises:
        InvalidArgumentError: values not a one-dimensional sequence of real numbers, or holding NaN or an
            infinite value, or too large for a finite mean; a level outside (0, 1).
    """
    arr = _values(values)
    level = _level(level)
    n = len(arr)
    if n < MIN_MEAN_N:
        return None, None
    with np.errstate(all="ignore"):
        mean = float(arr.mean())
        sd = float(arr.std(ddof=1))
    if not (math.isfinite(mean) and math.isfinite(sd)):
        raise InvalidArgumentError("values are too large for a finite mean (their sum overflows)")
    half = t_quantile(n - 1, level) * sd / math.sqrt(n)
    return (max(mean - half, 0.0) if float(arr.min()) >= 0 else mean - half), mean + half


def mean_requests(
    n: int, estimate: float, high: float | None, bound: float, level: float = LEVEL
) -> int | None:
    """About how many values would put `bound` outside a mean's t interval (`mean_interval`) of n values,
    the mean staying at `estimate` and s at what the interval's upper end `high` implies
    (s = (high − x̄) √n / t): the fewest m with t(m − 1) s / √m within the distance to the bound, at least
    n + 1 (an estimate: the half-width narrows as 1/√m but s moves with the sample). Where n is below
    `MIN_MEAN_N` (no interval), `MIN_MEAN_N`. None when the estimate is the bound (no sample settles it).

    Raises:
        InvalidArgumentError: n not a count, a non-finite estimate, bound or end, an end below the estimate.
    """
    n = _count("n", n)
    estimate, bound = _real("estimate", estimate), _real("bound", bound)
    level = _level(level)
    if high is not None:
        high = _real("high", high)
        if high < estimate:
            raise InvalidArgumentError(
                f"high {high!r} is below the estimate {estimate!r} (an inverted interval)"
            )
    d = abs(bound - estimate)
    if d == 0:
        return None
    if high is None or n < MIN_MEAN_N:
        return max(MIN_MEAN_N, n + 1)
    s = (high - estimate) * math.sqrt(n) / t_quantile(max(n - 1, 1), level)

    def reaches(m: int) -> bool:  # (whether m values' half-width stays within the distance: monotone in m)
        return t_quantile(m - 1, level) * s / math.sqrt(m) <= d

    lo = max(n, 1)  # (n itself does not reach: the verdict rests on it)
    hi = max(n + 1, min(math.ceil((t_quantile(max(n - 1, 1), level) * s / d) ** 2) + 1, MAX_COUNT))
    if not reaches(hi):
        return MAX_COUNT
    while hi - lo > 1:  # (bisection: the fewest m that reaches)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
    return max(hi, n + 1)


__all__ = ["MIN_MEAN_N", "mean_interval", "mean_requests", "t_quantile", "wilson_interval", "wilson_requests"]
