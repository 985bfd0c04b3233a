"""How far a fraction or a mean from n requests can be trusted (DESIGN.md §Capacity search, "Sampling"),
the companions of `kvsim.analysis.quantile_ci`'s percentiles: the Wilson score interval of a binomial
fraction (a goodput SLO's share of requests meeting their bounds, `wilson_interval`), the normal
approximation's interval of a mean (a mean SLO's, `mean_interval`: approximate, and too narrow under heavy
tails), and the requests that would put a bound outside either (`settle_by_root_n`). The standard library
and numpy only: the normal quantile is `statistics.NormalDist`'s.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from kvsim.analysis.quantile_ci import LEVEL, _count, _fraction
from kvsim.errors import InvalidArgumentError


def _z(level: float) -> float:
    """The standard normal quantile of a two-sided `level` interval (1.959964 for 95 %)."""
    return NormalDist().inv_cdf(0.5 + _fraction("level", level) / 2)


def wilson_interval(fraction: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The Wilson score interval (Wilson, "Probable inference, the law of succession, and statistical
    inference", JASA 22, 1927) of a binomial proportion observed as `fraction` of n independent trials:
    the proportions π whose score test |p̂ − π| <= z √(π (1 − π) / n) accepts p̂, the roots of a quadratic,

        (p̂ + z²/2n ± z √(p̂ (1 − p̂) / n + z²/4n²)) / (1 + z²/n),

    z the normal quantile of `level` (1.96 at 95 %). Brown, Cai & DasGupta ("Interval estimation for a
    binomial proportion", Statistical Science 16, 2001) recommend it for any n over the textbook Wald
    p̂ ± z √(p̂ (1 − p̂) / n), whose coverage collapses near 0 and 1 (at p̂ = 1, where a goodput SLO of
    0.99 lives, Wald's interval is the single point 1). It always lies within [0, 1], holds p̂ and has
    both ends (p̂ = 1: upper end 1, lower n / (n + z²)). Its coverage is near `level` on average, not at
    least `level` at every π as Clopper-Pearson's: the price of not being needlessly wide.

    Args:
        fraction: the share of the n trials that succeeded, in [0, 1] (k / n).
        n: the trials, at least 1.
        level: the confidence, strictly between 0 and 1.

    Returns:
        (low, high).

    Raises:
        InvalidArgumentError: a fraction outside [0, 1] or NaN, no trials, a level outside (0, 1).
    """
    n = _count("n", n)
    if n < 1:
        raise InvalidArgumentError("n 0: a fraction of no requests has no interval (it needs 1 or more)")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float, np.integer, np.floating)):
        raise InvalidArgumentError(f"fraction {fraction!r} must be a number in [0, 1]")
    p = float(fraction)
    if not 0 <= p <= 1:  # (False for NaN)
        raise InvalidArgumentError(f"fraction {fraction!r} must be in [0, 1] (a share of requests)")
    z = _z(level)
    z2n = z * z / n
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * math.sqrt(p * (1 - p) / n + z2n / (4 * n)) / (1 + z2n)
    # (clamped against rounding: at p̂ = 0 or 1 an end is exactly 0 or 1, and p̂ lies inside)
    return max(0.0, min(centre - half, p)), min(1.0, max(centre + half, p))


def mean_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float | None, float | None]:
    """The normal approximation's `level` interval of the mean of the distribution `values` were drawn
    from: x̄ ± z s / √n (s the sample standard deviation, z 1.96 at 95 %), by the central limit theorem.
    APPROXIMATE: it assumes n large enough for the mean to be normal, which a heavy tail (a latency's
    queueing episodes) puts off, and there it is too narrow, s itself being underestimated; unlike a
    percentile's order-statistics interval it is not distribution-free. The lower end is no lower than
    the smallest value (a latency is never negative). (None, None) with fewer than 2 values (no s).
    NaN values are refused (`InvalidArgumentError`)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise InvalidArgumentError(f"values must be one-dimensional (shape {arr.shape})")
    if np.isnan(arr).any():
        raise InvalidArgumentError("values hold NaN, which has no mean")
    n = len(arr)
    z = _z(level)
    if n < 2:
        return None, None
    mean = float(arr.mean())
    half = z * float(arr.std(ddof=1)) / math.sqrt(n)
    return max(mean - half, float(arr.min())), mean + half


def settle_by_root_n(n: int, estimate: float, lo: float | None, hi: float | None, bound: float) -> int | None:
    """An estimate of the requests that would put `bound` outside a fraction's or a mean's interval, on
    the side the estimate is: both intervals' half-widths narrow as 1 / √n (z √(p̂ (1 − p̂) / n), z s / √n),
    so with the estimate staying where it is, n (w / d)² requests make the half-width w towards the bound
    smaller than the estimate's distance d to it (at least n + 1). None when the estimate is the bound
    (no sample settles it) or the interval has no end on the bound's side. A NaN or infinite estimate,
    bound or end is refused (`InvalidArgumentError`), as is a negative n."""
    n = _count("n", n)
    for name, x in (("estimate", estimate), ("bound", bound), ("lo", lo), ("hi", hi)):
        if x is not None and not math.isfinite(x):
            raise InvalidArgumentError(f"{name} {x!r} must be a finite number")
    d = abs(bound - estimate)
    end = hi if bound >= estimate else lo
    if d == 0 or end is None:
        return None
    return max(math.ceil(n * (abs(end - estimate) / d) ** 2), n + 1)


__all__ = ["mean_interval", "settle_by_root_n", "wilson_interval"]
