"""A capacity search's SLO (DESIGN.md §Capacity search): one bound on one metric of a probe's summary
(`SLO`, the metrics it may name in `METRICS`), and the parsing of SLOs (`parse_slos`) and of a search's
relative precision (`check_precision`). Below the search (`kvsim.analysis.plan_search`, which re-exports
these names, their documented path) and the sampling rules (`kvsim.analysis.plan_sampling`), which both
judge probes by it."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvsim.errors import InvalidArgumentError

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


def _percent_or_number(text: str) -> float:
    """`text` as a number, a percentage (`99%`) as its fraction; ValueError where it is neither."""
    t = text.strip()
    return float(t[:-1]) / 100 if t.endswith("%") else float(t)


def _bound(metric: str, value: Any, text_needs_unit: bool) -> float:
    unit = METRICS[metric][1]
    what = f"slo {metric}"
    if unit == "fraction":
        if isinstance(value, str):
            try:
                v = _percent_or_number(value)
            except ValueError:
                raise InvalidArgumentError(f"{what} {value!r} is not a fraction (0.99 or 99%)") from None
        elif isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise InvalidArgumentError(f"{what} {value!r} is not a fraction (0.99 or 99%)")
        else:
            v = _float(value)
        if not (math.isfinite(v) and 0 < v <= 1):
            raise InvalidArgumentError(f"{what} {_shown(value)} must be a fraction in (0, 1]")
        return v
    from kvsim.model.units import TIME_UNITS, parse_duration_ps

    if isinstance(value, str) and text_needs_unit and not value.strip().rstrip("0123456789.eE+-_ "):
        raise InvalidArgumentError(
            f"{what} {value!r} needs a time unit ({value.strip()}s or {value.strip()}ms)"
        )
    if isinstance(value, str) and value.strip().lower().endswith("/token"):
        value = value.strip()[: -len("/token")]
    if isinstance(value, str):
        seconds = parse_duration_ps(what, value, bare_unit="s") / TIME_UNITS["s"]
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{what} {value!r} is not a duration (seconds, or text such as 100ms)")
    else:
        seconds = _float(value)
    if not (math.isfinite(seconds) and seconds > 0):
        raise InvalidArgumentError(f"{what} {_shown(value)} must be a positive duration")
    return seconds


def _float(value: Any) -> float:
    """`float(value)`, an int too large for a float being infinite (refused as not finite)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _shown(value: Any) -> str:
    """`repr(value)`, an int too long to show in a message as its magnitude."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"(an integer of {len(str(abs(value)))} digits)"
    return repr(value)


def parse_slos(slos: Mapping[str, Any] | Sequence[str | SLO] | str) -> tuple[SLO, ...]:
    """SLOs from a mapping (`{"ttft_p99": 2.0, "tpot_p99": "100ms"}`: numbers in seconds, or text with a
    unit) or from `METRIC:BOUND` texts (`["ttft_p99:2s", "tpot_p99:100ms", "goodput_fraction:0.99"]`,
    the CLI's `--slo`, where a time bound needs its unit).

    Raises:
        InvalidArgumentError: no SLO, an unknown metric (the message lists them), a bound that is not a
            positive duration or a fraction in (0, 1], a metric given twice.
    """
    pairs: list[tuple[str, Any, bool]] = []
    if isinstance(slos, Mapping):
        pairs = [(str(k), v, False) for k, v in slos.items()]
    else:
        if not isinstance(slos, str | Sequence):
            raise InvalidArgumentError(
                f"slos {slos!r} must be a mapping ({{'ttft_p99': 2.0}}) or METRIC:BOUND texts (ttft_p99:2s)"
            )
        items = [slos] if isinstance(slos, str) else list(slos)
        for item in items:
            if isinstance(item, SLO):  # already parsed (parse_slos' own output)
                pairs.append((item.metric, item.bound, False))
                continue
            if not isinstance(item, str):
                raise InvalidArgumentError(f"slo {item!r} is not METRIC:BOUND (ttft_p99:2s)")
            for part in item.replace(",", " ").split():
                name, colon, value = part.partition(":")
                if not colon or not value.strip():
                    raise InvalidArgumentError(f"slo {part!r} is not METRIC:BOUND (ttft_p99:2s)")
                pairs.append((name.strip(), value.strip(), True))
    if not pairs:
        raise InvalidArgumentError(f"slos {slos!r} give no SLO (e.g. ttft_p99:2s)")
    out: dict[str, SLO] = {}
    for name, value, needs_unit in pairs:
        if name not in METRICS:
            raise InvalidArgumentError(f"slo metric {name!r} is not one of {', '.join(METRICS)}")
        if name in out:
            raise InvalidArgumentError(f"slo metric {name!r} given twice")
        out[name] = SLO(name, _bound(name, value, needs_unit))
    return tuple(out.values())


def check_precision(precision: Any) -> float:
    """A relative precision in (0, 1): a number (0.02) or a percentage text (`2%`).

    Raises:
        InvalidArgumentError: anything else.
    """
    v: Any = precision
    if isinstance(precision, str):
        try:
            v = _percent_or_number(precision)
        except ValueError:
            raise InvalidArgumentError(f"precision {precision!r} is not a number (0.02 or 2%)") from None
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        v = math.nan  # refused below
    elif isinstance(v, numbers.Integral):
        v = 1.0  # an int is never in (0, 1) (and one may be too large for a float)
    v = float(v)
    if not (math.isfinite(v) and 0 < v < 1):
        raise InvalidArgumentError(
            f"precision {_shown(precision)} must be a relative precision in (0, 1) (2%)"
        )
    return float(v)
