"""The serving metrics a `vllm bench serve` user reads, each defined here once: what `kvsim run` prints,
what `SimResult.serving` holds, and what sweeps add as columns (`serving_metrics`, `sweep_columns`).

Definitions (as `vllm bench serve` computes them; latencies in milliseconds, over finished requests;
a request with `n` samples counts each sample's tokens, `tokens per sample = output tokens / n`):

| metric | per request | notes |
|---|---|---|
| TTFT | first token − arrival | time to first token |
| TPOT | (finish − first token) / (tokens per sample − 1) | time per output token after the first; requests of one token are left out |
| ITL | each gap between two consecutive tokens of a sequence | inter-token latency: one value per token after the first |
| E2EL | finish − arrival | end-to-end latency |

For each chosen metric (`percentile_metrics`, default `ttft,tpot,itl` as vLLM's) the mean, median,
standard deviation (population, numpy's default) and the chosen percentiles (`metric_percentiles`, default
99; linear interpolation, numpy's default) are reported as `mean_ttft_ms`, `median_ttft_ms`,
`std_ttft_ms`, `p99_ttft_ms`, ... Throughput: `request_throughput` (finished requests / duration),
`output_throughput` (generated tokens / duration), `total_token_throughput` (prompt + generated tokens of
finished requests / duration), `duration_s` (the makespan: the end of the last step).

ITL, exactly, from what the engines record (both engines alike, compared exactly by the differential
tests; `EngineOutput.itl`). A sequence's tokens fall into *runs*: tokens sampled in consecutive steps.
Within a run each gap is the duration of the step that sampled the later token; the first token of a
run after the first (the sequence was preempted by recompute or swap, left out of a step whose token
budget was spent, or, as a v0 sample group, not scheduled) has an explicit gap: its time minus the time
of the sequence's token before it. So the engines record every step's duration (run-length coded: a
run of steps of durations `a, a + b, a + 2b, ...` is one entry, so a quiet span of equal or evenly
growing steps, as lockstep mode takes them, costs one) and every run of every sequence (its row, first
and last step and the gap before it): O(steps + sequences + breaks), never a token's time. ITL's values
are then `{duration of step k, once per run of a finished sequence holding steps k - 1 and k}` ∪ `{each
run's gap}`; the mean, median, std and percentiles are computed from those weighted values, exactly
(`itl_values`). Runs of rejected sequences (a swapped-out group that can no longer fit, a preempted
sequence that can no longer be admitted) are left out, as `vllm bench serve` leaves failed requests out.
A fork-cow sample counts its own output tokens, as vLLM's per-request ITL over a sample's output does:
its first token is sampled with its parent's first token (the step of the fork) and has no gap before
it; its later tokens have gaps as any sequence's. Streamed runs (`simulate_stream`) and clusters report
ITL's mean only (they record no runs; their ITL keys are None but the mean, which a streamed run, keeping
no per-sequence columns, takes from its rows when every request is one sequence, else None). With a time series of every
step, `itl_distribution` derives the same values for runs where no sequence missed a step (a check).

Goodput and SLO attainment (`goodput={"ttft": 500, "tpot": 50}`, milliseconds; keys ttft, tpot, e2el):
a finished request meets the SLOs when each of its metrics is at most its bound (vLLM's rule; TPOT of a
one-token request counts as met). `request_goodput` is the requests per second that met every SLO,
`slo_attainment` their fraction of all requests (rejected ones never meet it), and
`slo_attainment_<metric>` the fraction meeting each bound alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from kvsim.errors import InvalidArgumentError

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
DEFAULT_PERCENTILE_METRICS = ("ttft", "tpot", "itl")
DEFAULT_PERCENTILES: tuple[float, ...] = (99.0,)
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
PS_PER_MS = 10**9


def _items(what: str, value: Any, sep: str | None = ",") -> list[Any]:
    """The items of a flag-style text (`a,b`; `sep=None` splits on spaces) or of a list or tuple.

    Raises:
        InvalidArgumentError: anything else (a number, a dict, ...).
    """
    if isinstance(value, str):
        return [value] if sep is None else value.split(sep)
    if isinstance(value, list | tuple):
        return list(value)
    raise InvalidArgumentError(f"{what} {value!r} must be text or a list")


def parse_percentile_metrics(text: str | Sequence[str]) -> tuple[str, ...]:
    """`ttft,tpot,itl` -> the metric names, checked.

    Raises:
        InvalidArgumentError: an unknown or repeated name, or none.
    """
    items = _items("percentile metrics", text)
    if not all(isinstance(t, str) for t in items):
        raise InvalidArgumentError(
            f"percentile metrics {text!r} must be names ({', '.join(LATENCY_METRICS)})"
        )
    names = [t.strip() for t in items if t.strip()]
    if not names:
        raise InvalidArgumentError(f"percentile metrics {text!r} names none of {', '.join(LATENCY_METRICS)}")
    for n in names:
        if n not in LATENCY_METRICS:
            raise InvalidArgumentError(f"percentile metric {n!r} is not one of {', '.join(LATENCY_METRICS)}")
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"percentile metrics {text!r} repeat a name")
    return tuple(names)


def parse_metric_percentiles(text: str | Sequence[float]) -> tuple[float, ...]:
    """`25,50,99.9` -> the percentiles, each in (0, 100].

    Raises:
        InvalidArgumentError: a value that is not a number in (0, 100].
    """
    items = _items("metric percentiles", text)
    out: list[float] = []
    for item in items:
        if isinstance(item, str) and not item.strip():
            continue
        try:
            p = float(item)
        except (TypeError, ValueError, OverflowError):
            raise InvalidArgumentError(f"metric percentile {item!r} is not a number") from None
        if isinstance(item, bool) or not (math.isfinite(p) and 0 < p <= 100):
            raise InvalidArgumentError(f"metric percentile {item!r} must be in (0, 100]")
        out.append(p)
    if not out:
        raise InvalidArgumentError(f"metric percentiles {text!r} give no percentile")
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"metric percentiles {text!r} repeat a percentile")
    return tuple(out)


def parse_goodput(items: Iterable[str] | Mapping[str, float] | None) -> dict[str, float]:
    """`["ttft:500", "tpot:50"]` (vLLM's `--goodput` syntax, milliseconds) -> `{"ttft": 500.0, ...}`.

    Raises:
        InvalidArgumentError: a pair that is not METRIC:MS, an unknown metric or a bound that is not a
            positive number.
    """
    if items is None:
        return {}
    pairs = list(items.items()) if isinstance(items, Mapping) else []
    if not isinstance(items, Mapping):
        for item in _items("goodput", items, sep=None):
            for part in str(item).replace(",", " ").split():
                key, colon, value = part.partition(":")
                if not colon:
                    raise InvalidArgumentError(f"goodput {part!r} is not METRIC:MILLISECONDS (ttft:500)")
                pairs.append((key.strip(), value.strip()))
    out: dict[str, float] = {}
    for key, value in pairs:
        if key not in GOODPUT_METRICS:
            raise InvalidArgumentError(f"goodput metric {key!r} is not one of {', '.join(GOODPUT_METRICS)}")
        try:
            bound = float(value)
        except (TypeError, ValueError, OverflowError):
            raise InvalidArgumentError(f"goodput {key}:{value} is not a number of milliseconds") from None
        if isinstance(value, bool) or not (math.isfinite(bound) and bound > 0):
            raise InvalidArgumentError(f"goodput {key}:{value} must be a positive number of milliseconds")
        if key in out:
            raise InvalidArgumentError(f"goodput metric {key!r} given twice")
        out[key] = bound
    return out


def goodput_label(slos: Mapping[str, float]) -> str:
    """The canonical text of parsed SLOs (`parse_goodput`'s output): `ttft:500,tpot:50`, metrics in
    `GOODPUT_METRICS` order, each bound exactly (`parse_goodput` reads it back to the same dict); what a
    sweep row records as `goodput_slos_ms`, and "" for none."""

    def ms(v: float) -> str:
        return str(int(v)) if float(v).is_integer() and abs(v) < 2**53 else repr(float(v))

    return ",".join(f"{m}:{ms(slos[m])}" for m in GOODPUT_METRICS if m in slos)


def _pct_key(p: float) -> str:
    """`p99`, `p99.9`: a percentile's label as vLLM 0.34.0's `vllm bench serve` writes it in its result keys
    (`vllm/benchmarks/serve.py`: `str(int(p)) if int(p) == p else str(p)`, Python's shortest exact decimal;
    `:g` once rounded 99.99999 to `p100`, and kvsim wrote `p99_9` until 2026-12-07)."""
    p = float(p)
    return f"p{int(p)}" if int(p) == p else f"p{p}"


def _stats(name: str, values: np.ndarray, percentiles: Sequence[float], out: dict[str, Any]) -> None:
    if len(values) == 0:
        out.update({f"{k}_{name}_ms": None for k in ("mean", "median", "std")})
        out.update({f"{_pct_key(p)}_{name}_ms": None for p in percentiles})
        return
    out[f"mean_{name}_ms"] = float(np.mean(values))
    out[f"median_{name}_ms"] = float(np.median(values))
    out[f"std_{name}_ms"] = float(np.std(values))
    for p in percentiles:
        out[f"{_pct_key(p)}_{name}_ms"] = float(np.percentile(values, p))


def _weighted_stats(
    name: str, values: np.ndarray, counts: np.ndarray, percentiles: Sequence[float], out: dict[str, Any]
) -> None:
    """The statistics of the list in which `values[i]` appears `counts[i]` times, without building it
    (numpy's definitions: population std, linear-interpolated percentiles)."""
    keep = counts > 0
    values, counts = values[keep], counts[keep].astype(np.int64)
    total = int(counts.sum())
    if total == 0:
        _stats(name, np.zeros(0), percentiles, out)
        return
    order = np.argsort(values, kind="stable")
    v, c = values[order], counts[order]
    cum = np.cumsum(c)
    mean = float(np.dot(v, c) / total)
    out[f"mean_{name}_ms"] = mean
    out[f"std_{name}_ms"] = float(math.sqrt(max(float(np.dot((v - mean) ** 2, c)) / total, 0.0)))

    def at(rank: int) -> float:  # the rank-th element (0-based) of the sorted expanded list
        return float(v[int(np.searchsorted(cum, rank, side="right"))])

    def percentile(p: float) -> float:
        pos = p / 100 * (total - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, total - 1)
        a, b = at(lo), at(hi)
        return a + (b - a) * (pos - lo)

    out[f"median_{name}_ms"] = percentile(50)
    for p in percentiles:
        out[f"{_pct_key(p)}_{name}_ms"] = percentile(p)


def itl_distribution(raw: Any, step_start_ps: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, int]:
    """The exact ITL values (ms) and their counts from the per-sequence columns and every step's start
    time, and the number of sequences whose gaps are not recorded (module docstring).

    Args:
        raw: an `EngineOutput` (per-sequence `first_token`, `finish`, `generated`, `status`).
        step_start_ps: the start of every step in picoseconds (`raw.timeseries["time_ps"]` of a run
            recorded at every step), or None.

    Returns:
        (values, counts, inexact); values and counts are empty when `step_start_ps` is None.
    """
    from kvsim.reference.engine import FINISHED

    ok = (raw.status == FINISHED) & (raw.generated >= 2)
    first = raw.first_token[ok].astype(np.int64)
    finish = raw.finish[ok].astype(np.int64)
    gen = raw.generated[ok].astype(np.int64)
    if step_start_ps is None or len(first) == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64), 0
    starts = np.asarray(step_start_ps, dtype=np.int64)
    # The step a token was sampled in: the last step starting before that token's time.
    a = np.searchsorted(starts, first, side="left") - 1
    b = np.searchsorted(starts, finish, side="left") - 1
    exact = (b - a) == (gen - 1)
    inexact = int((~exact).sum())
    a, b, finish = a[exact], b[exact], finish[exact]
    # Interior gaps: steps a+1 .. b-1 last start[j+1] - start[j]; the last gap ends at the finish.
    n = len(starts)
    diff = np.zeros(n + 1, dtype=np.int64)
    np.add.at(diff, a + 1, 1)
    np.add.at(diff, b, -1)
    counts = np.cumsum(diff)[: n - 1] if n > 1 else np.zeros(0, dtype=np.int64)
    durations = np.diff(starts)
    last = finish - starts[b]
    values = np.concatenate([durations / PS_PER_MS, last / PS_PER_MS])
    all_counts = np.concatenate([counts, np.ones(len(last), dtype=np.int64)])
    return values, all_counts, inexact


def itl_values(raw: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """Every ITL value of a run's finished sequences (ps, int64) with its count, from the engines'
    record (module docstring); None if the run recorded none (a stream or a cluster).

    The values are every step's duration (its count: the runs of finished sequences holding that step
    and the one before) and every run's explicit gap (count 1); the counts sum to the finished sequences'
    tokens after their first."""
    itl = getattr(raw, "itl", None)
    if not itl or "step_ps" not in itl:
        return None
    from kvsim.reference.engine import FINISHED

    step_ps = np.asarray(itl["step_ps"], dtype=np.int64)
    slope = np.asarray(itl["step_slope_ps"], dtype=np.int64)
    repeat = np.asarray(itl["step_repeat"], dtype=np.int64)
    n = int(repeat.sum())
    which = np.repeat(np.arange(len(repeat)), repeat)
    offset = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(repeat) - repeat, repeat)
    durations = step_ps[which] + slope[which] * offset
    row = np.asarray(itl["run_row"], dtype=np.int64)
    keep = np.asarray(raw.status)[row] == FINISHED if len(row) else np.zeros(0, dtype=bool)
    first = np.asarray(itl["run_first"], dtype=np.int64)[keep]
    last = np.asarray(itl["run_last"], dtype=np.int64)[keep]
    gap = np.asarray(itl["run_gap_ps"], dtype=np.int64)[keep]
    # A run of steps first..last holds the gaps ending in steps first + 1 .. last.
    diff = np.zeros(n + 1, dtype=np.int64)
    long = last > first
    np.add.at(diff, first[long] + 1, 1)
    np.add.at(diff, last[long] + 1, -1)
    counts = np.cumsum(diff)[:n]
    gaps = gap[gap >= 0]
    return np.concatenate([durations, gaps]), np.concatenate([counts, np.ones(len(gaps), dtype=np.int64)])


def serving_metrics(
    requests: pl.DataFrame,
    raw: Any,
    *,
    percentile_metrics: Sequence[str] = DEFAULT_PERCENTILE_METRICS,
    metric_percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    goodput: Mapping[str, float] | None = None,
    step_start_ps: np.ndarray | None = None,
) -> dict[str, Any]:
    """`vllm bench serve`'s result keys for one run (module docstring), plain Python numbers.

    Args:
        requests: `SimResult.requests`.
        raw: `SimResult.raw` (for ITL and the duration).
        percentile_metrics: which of ttft, tpot, itl, e2el to report.
        metric_percentiles: which percentiles of them.
        goodput: SLO bounds in ms by metric (`parse_goodput`), or None.
        step_start_ps: every step's start (ps): the ITL distribution of a run that recorded no ITL
            (`itl_values`), where no sequence missed a step; else ITL's mean only.

    Raises:
        InvalidArgumentError: a bad metric name, percentile or SLO.
    """
    metrics = parse_percentile_metrics(percentile_metrics)
    percentiles = parse_metric_percentiles(metric_percentiles)
    slos = parse_goodput(goodput)
    finished = (requests["status"] == "finished").to_numpy()
    col = {
        c: requests[c].to_numpy()[finished]
        for c in ("arrival", "first_token", "finish", "output_len", "num_samples", "prompt_len")
    }
    duration = raw.counters["makespan_ps"] / 10**12
    completed = int(finished.sum())
    out_tokens = int(col["output_len"].sum())
    per_sample = col["output_len"] / np.maximum(col["num_samples"], 1)
    ttft = (col["first_token"] - col["arrival"]) * 1000
    e2el = (col["finish"] - col["arrival"]) * 1000
    multi = per_sample > 1
    tpot_all = np.where(
        multi, (col["finish"] - col["first_token"]) * 1000 / np.maximum(per_sample - 1, 1), 0.0
    )
    out: dict[str, Any] = {
        "completed": completed,
        "failed": requests.height - completed,
        "duration_s": duration,
        "total_input_tokens": int(col["prompt_len"].sum()),
        "total_output_tokens": out_tokens,
        "request_throughput": completed / duration if duration > 0 else 0.0,
        "output_throughput": out_tokens / duration if duration > 0 else 0.0,
        "total_token_throughput": (out_tokens + int(col["prompt_len"].sum())) / duration
        if duration > 0
        else 0.0,
    }
    for m in metrics:
        if m == "ttft":
            _stats("ttft", ttft, percentiles, out)
        elif m == "tpot":
            _stats("tpot", tpot_all[multi], percentiles, out)
        elif m == "e2el":
            _stats("e2el", e2el, percentiles, out)
        else:
            from kvsim.reference.engine import FINISHED

            if len(raw.status):
                sel = (raw.status == FINISHED) & (raw.generated >= 2)
                span = float((raw.finish[sel] - raw.first_token[sel]).sum())
                tokens = int((raw.generated[sel] - 1).sum())
            elif not (col["num_samples"] > 1).any():
                # A streamed run keeps no per-sequence columns; its rows are its sequences when every
                # request has one sample (the mean is exact from first-token and finish times).
                sel = col["output_len"] >= 2
                span = float((col["finish"][sel] - col["first_token"][sel]).sum()) * 10**12
                tokens = int((col["output_len"][sel] - 1).sum())
            else:  # (samples folded into their request's row: no sequence's span to sum)
                span, tokens = 0.0, 0
            recorded = itl_values(raw)
            if recorded is not None:
                values, counts = recorded
                _weighted_stats("itl", values / PS_PER_MS, counts, percentiles, out)
            elif step_start_ps is not None:
                values, counts, inexact = itl_distribution(raw, step_start_ps)
                if inexact == 0:
                    _weighted_stats("itl", values, counts, percentiles, out)
                else:
                    _stats("itl", np.zeros(0), percentiles, out)
            else:
                _stats("itl", np.zeros(0), percentiles, out)
            out["mean_itl_ms"] = span / tokens / PS_PER_MS if tokens else None
    if slos:
        met = np.ones(completed, dtype=bool)
        values_of = {"ttft": ttft, "tpot": tpot_all, "e2el": e2el}
        total = requests.height
        for m, bound in slos.items():
            ok = values_of[m] <= bound
            met &= ok
            out[f"slo_attainment_{m}"] = float(ok.sum()) / total if total else 0.0
        out["good_requests"] = int(met.sum())
        out["request_goodput"] = float(met.sum()) / duration if duration > 0 else 0.0
        out["slo_attainment"] = float(met.sum()) / total if total else 0.0
    return out


def goodput_columns(requests: pl.DataFrame, raw: Any, goodput: Any) -> dict[str, Any]:
    """`request_goodput`, `good_requests`, `slo_attainment` and `slo_attainment_<metric>` for the SLOs
    `goodput` (`parse_goodput`'s forms): what `simulate(..., goodput=)` adds to the summary and a sweep
    adds as columns (one per SLO).

    Raises:
        InvalidArgumentError: a bad SLO.
    """
    slos = parse_goodput(goodput)
    if not slos:
        return {}
    full = serving_metrics(requests, raw, percentile_metrics=("ttft",), goodput=slos)
    return {
        k: v
        for k, v in full.items()
        if k.startswith("slo_attainment") or k in ("request_goodput", "good_requests")
    }


def sweep_columns(result: Any, goodput: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Columns a sweep row can add for one `SimResult`: `request_goodput`, `slo_attainment` and one
    `slo_attainment_<metric>` per SLO, plus the TTFT/TPOT/ITL/E2EL statistics in ms."""
    return serving_metrics(
        result.requests,
        result.raw,
        percentile_metrics=("ttft", "tpot", "itl", "e2el"),
        metric_percentiles=DEFAULT_PERCENTILES,
        goodput=goodput,
    )


__all__ = [
    "DEFAULT_PERCENTILES",
    "DEFAULT_PERCENTILE_METRICS",
    "GOODPUT_METRICS",
    "LATENCY_METRICS",
    "goodput_columns",
    "goodput_label",
    "itl_distribution",
    "itl_values",
    "parse_goodput",
    "parse_metric_percentiles",
    "parse_percentile_metrics",
    "serving_metrics",
    "sweep_columns",
]
