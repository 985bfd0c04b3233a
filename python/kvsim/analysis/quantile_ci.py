"""How far a percentile from n requests can be trusted (DESIGN.md §Capacity search, "Sampling"): the
distribution-free confidence interval of a quantile from order statistics (Hahn & Meeker, *Statistical
Intervals*, 1991, §5.2; Conover, *Practical Nonparametric Statistics*, §3.2). Of n independent draws of a
continuous distribution, the number B at or below its p-quantile ξ_p is binomial(n, p), so the k-th
smallest draw x_(k) lies at or below ξ_p exactly when B >= k: [x_(l), x_(u)] holds ξ_p with probability
P(l <= B <= u - 1), whatever the distribution. `order_statistic_ranks` takes l and u equal-tailed, each
tail at most (1 - level) / 2, so the interval covers ξ_p at least `level` of the time (more, for B is
discrete). With few draws an end does not exist: below n = 368 the p99's 95 % interval has no upper end
(even the largest draw is below ξ_p more than 2.5 % of the time). The standard library and numpy only:
the binomial distribution is summed from its log-probabilities.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from kvsim.errors import InvalidArgumentError

LEVEL = 0.95
"""The confidence of the intervals kvsim states."""


def _fraction(name: str, x: float) -> float:
    """`x` checked as a probability strictly between 0 and 1 (a quantile's p, a confidence level): the
    0- and 1-quantiles are a distribution's ends, which no finite sample bounds on their open side, so
    no order statistic gives them an interval; NaN is no probability."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise InvalidArgumentError(f"{name} {x!r} must be a number strictly between 0 and 1")
    if not 0 < x < 1:  # (False for NaN; compared before any float conversion, a huge int's)
        why = (
            "a confidence: 0.95 for a 95 % interval"
            if name == "level"
            else "the 0- and 1-quantiles, a distribution's ends, have no order-statistics interval"
        )
        raise InvalidArgumentError(f"{name} {x!r} must be strictly between 0 and 1 ({why})")
    return float(x)


def _count(name: str, n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise InvalidArgumentError(f"{name} {n!r} must be a count of draws (an integer, 0 or more)")
    return int(n)


def binomial_cdf(n: int, p: float) -> np.ndarray:
    """`P(B <= k)` for k = 0..n, B binomial(n, p) (0 < p < 1): the probabilities summed from their
    logarithms (`log C(n, k)` as a cumulative sum of `log((n - k + 1) / k)`), exact to float rounding for
    the n of a simulation's requests (millions)."""
    n, p = _count("n", n), _fraction("p", p)
    k = np.arange(n + 1, dtype=np.float64)
    log_choose = np.concatenate(([0.0], np.cumsum(np.log((n - k[1:] + 1) / k[1:]))))
    log_pmf = log_choose + k * math.log(p) + (n - k) * math.log1p(-p)
    cdf = np.cumsum(np.exp(log_pmf - log_pmf.max()))
    return cdf / cdf[-1]


@functools.lru_cache(maxsize=256)
def order_statistic_ranks(n: int, p: float, level: float = LEVEL) -> tuple[int | None, int | None]:
    """The 1-based ranks (l, u) of the order statistics bounding the p-quantile's `level` interval from n
    draws: l the largest rank with `P(B <= l - 1) <= (1 - level) / 2`, u the smallest with `P(B <= u - 1)
    >= 1 - (1 - level) / 2`, B binomial(n, p). None for an end that no rank gives (too few draws: the
    interval is open on that side). p and `level` strictly between 0 and 1 (`InvalidArgumentError`)."""
    n, p, level = _count("n", n), _fraction("p", p), _fraction("level", level)
    if n < 1:
        return None, None
    a = (1 - level) / 2
    cdf = binomial_cdf(n, p)
    below = np.flatnonzero(cdf <= a)
    lo = int(below[-1]) + 1 if below.size else None
    k = int(np.argmax(cdf >= 1 - a - 1e-12))
    hi = k + 1 if k + 1 <= n else None
    return lo, hi


def quantile_interval(
    values: np.ndarray, p: float, level: float = LEVEL
) -> tuple[float | None, float | None]:
    """The `level` interval of the p-quantile of the distribution `values` were drawn from
    (`order_statistic_ranks`): the values of those ranks, None for an end the sample is too small for.

    Each end is widened, where it must be, to hold the sample's own p-quantile as numpy's default
    (linear) estimator gives it, the percentile kvsim reports: that estimate lies between the ranks
    floor(h) and ceil(h), h = 1 + (n - 1) p, and with few draws an end's rank can pass it (the p99 of 2
    draws has its lower end at the larger, rank 2 > h = 1.99, above the interpolated p99). Such an end
    moves to rank floor(h) (a lower end) or ceil(h) (an upper), which covers the quantile at least as
    often, so the interval stays a `level` interval and never excludes the percentile printed beside it.
    NaN values are refused (`InvalidArgumentError`): they have no rank."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise InvalidArgumentError(f"values must be one-dimensional (shape {arr.shape})")
    if np.isnan(arr).any():
        raise InvalidArgumentError("values hold NaN, which has no rank among the draws")
    n = len(arr)
    lo, hi = order_statistic_ranks(n, p, level)
    if lo is None and hi is None:
        return None, None
    h = 1 + (n - 1) * float(p)
    if lo is not None:
        lo = min(lo, max(math.floor(h), 1))
    if hi is not None:
        hi = max(hi, min(math.ceil(h), n))
    ranks = [r - 1 for r in (lo, hi) if r is not None]
    part = np.partition(arr, ranks)
    return (None if lo is None else float(part[lo - 1]), None if hi is None else float(part[hi - 1]))


def fewest_for_both_ends(p: float, level: float = LEVEL) -> int:
    """The fewest draws whose p-quantile interval has both ends: `(1 - level) / 2 >= max(p, 1 - p)^n`
    (368 for the p99 at 95 %). p and `level` strictly between 0 and 1 (`InvalidArgumentError`)."""
    p, level = _fraction("p", p), _fraction("level", level)
    a = (1 - level) / 2
    return math.ceil(math.log(a) / math.log(max(p, 1 - p)))


def requests_to_settle(
    n: int,
    estimate: float,
    lo: float | None,
    hi: float | None,
    bound: float,
    level: float = LEVEL,
    p: float = 0.99,
) -> int | None:
    """An estimate of the draws that would put `bound` outside the interval, on the side the estimate is:
    the interval's half-width towards the bound narrows as 1 / sqrt(n) (its ranks spread as
    sqrt(n p (1 - p)), over n draws), so with the estimate staying where it is, n (w / d)^2 draws make
    the half-width w smaller than the estimate's distance d to the bound. None when the estimate is the
    bound (no sample settles it); where the interval has no end on the bound's side, at least
    `fewest_for_both_ends`. A NaN or infinite estimate, bound or end is refused (`InvalidArgumentError`),
    as are p and `level` outside (0, 1) and a negative n."""
    n, p, level = _count("n", n), _fraction("p", p), _fraction("level", level)
    for name, x in (("estimate", estimate), ("bound", bound), ("lo", lo), ("hi", hi)):
        if x is not None and not math.isfinite(x):
            raise InvalidArgumentError(f"{name} {x!r} must be a finite number")
    d = abs(bound - estimate)
    if d == 0:
        return None
    end = hi if bound >= estimate else lo
    if end is None:
        return fewest_for_both_ends(p, level)
    w = abs(end - estimate)
    return max(math.ceil(n * (w / d) ** 2), n + 1, fewest_for_both_ends(p, level))


__all__ = [
    "LEVEL",
    "binomial_cdf",
    "fewest_for_both_ends",
    "order_statistic_ranks",
    "quantile_interval",
    "requests_to_settle",
]
