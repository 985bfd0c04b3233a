"""A capacity search's SLO (DESIGN.md §Capacity search): one bound on one metric of a probe's summary
(`SLO`, the metrics it may name in `METRICS`). Below the search (`kvsim.analysis.plan_search`, which parses
SLOs, `parse_slos`, and re-exports these names, their documented path) and the sampling rules
(`kvsim.analysis.plan_sampling`), which both judge probes by it."""

from __future__ import annotations

import math
from dataclasses import dataclass

_STATS = ("p50", "p90", "p99", "mean")
# SLO name -> (summary key, unit, upper bound?). Latencies are the summary's (kvsim.simulate) seconds.
METRICS: dict[str, tuple[str, str, bool]] = {
    **{
        f"{name}_{stat}": (f"{key}_{stat}", "s", True)
        for name, key in (
            ("ttft", "ttft_s"),
            ("tpot", "tpot_s"),
            ("e2el", "e2e_s"),
            ("queueing", "queueing_s"),
        )
        for stat in _STATS
    },
    "normalized_latency": ("normalized_latency_s_per_token", "s/token", True),
    "goodput_fraction": ("slo_attainment", "fraction", False),
}


@dataclass(frozen=True)
class SLO:
    """One bound: `metric <= bound` (latencies, in seconds or s/token) or `metric >= bound`
    (`goodput_fraction`).

    Attributes:
        metric: a name of `METRICS` (`ttft_p99`).
        bound: seconds, seconds per token or a fraction in (0, 1].
    """

    metric: str
    bound: float

    @property
    def key(self) -> str:
        """The summary key the bound reads (`ttft_s_p99`)."""
        return METRICS[self.metric][0]

    @property
    def upper(self) -> bool:
        """Whether the bound is an upper one (a latency) rather than a lower one (a fraction)."""
        return METRICS[self.metric][2]

    @property
    def unit(self) -> str:
        return METRICS[self.metric][1]

    def holds(self, value: float | None) -> bool:
        """Whether `value` meets the bound (a missing value, e.g. no request finished, does not)."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        return value <= self.bound if self.upper else value >= self.bound

    def label(self) -> str:
        """`ttft_p99 <= 2 s`, `goodput_fraction >= 0.99`."""
        unit = "" if self.unit == "fraction" else f" {self.unit}"
        return f"{self.metric} {'<=' if self.upper else '>='} {self.bound:g}{unit}"
