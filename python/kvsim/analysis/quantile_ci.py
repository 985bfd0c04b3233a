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

LEVEL = 0.95
"""The confidence of the intervals kvsim states."""


def binomial_cdf(n: int, p: float) -> np.ndarray:
    """`P(B <= k)` for k = 0..n, B binomial(n, p) (0 < p < 1): the probabilities summed from their
    logarithms (`log C(n, k)` as a cumulative sum of `log((n - k + 1) / k)`), exact to float rounding for
    the n of a simulation's requests (millions)."""
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
    interval is open on that side)."""
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
    (`order_statistic_ranks`): the values of those ranks, None for an end the sample is too small for."""
    n = len(values)
    lo, hi = order_statistic_ranks(n, p, level)
    if lo is None and hi is None:
        return None, None
    ranks = [r - 1 for r in (lo, hi) if r is not None]
    part = np.partition(np.asarray(values, dtype=np.float64), ranks)
    return (None if lo is None else float(part[lo - 1]), None if hi is None else float(part[hi - 1]))


def fewest_for_both_ends(p: float, level: float = LEVEL) -> int:
    """The fewest draws whose p-quantile interval has both ends: `(1 - level) / 2 >= max(p, 1 - p)^n`
    (368 for the p99 at 95 %)."""
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
    `fewest_for_both_ends`."""
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
