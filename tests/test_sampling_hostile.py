"""Hostile arguments to the sampling intervals' public functions (rev46 #5, #6): every bad argument is
refused with an `InvalidArgumentError` (a `ValueError`) naming it, never an OverflowError, KeyError or
numpy's own traceback, nor clamped or truncated into an answer; and a caller's probe summary whose
interval inputs contradict themselves is refused by key."""

from __future__ import annotations

import functools
import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvsim
from kvsim.analysis.moment_ci import (
    mean_interval,
    mean_requests,
    t_quantile,
    wilson_interval,
    wilson_requests,
)
from kvsim.analysis.plan_sampling import fraction_columns
from kvsim.analysis.steady_state import steady_requests, sweep_too_short_note
from kvsim.errors import InvalidArgumentError

ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**400), 10**400),
    st.integers(-5, 2000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-2, 2),
    st.text(max_size=3),
    st.complex_numbers(max_magnitude=10),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=3),
)
"""Whatever a caller might pass: huge integers, NaN and infinities, strings, None, bools, complex, lists."""


def _refused_or(fn, *args, **kwargs):
    """Calls fn: returns its result, or None where it refused with InvalidArgumentError (any other
    exception fails the test)."""
    message = ""
    try:
        return fn(*args, **kwargs)
    except InvalidArgumentError as exc:
        message = str(exc)
    assert message  # (refused, and saying why)
    return None


@settings(max_examples=300, deadline=None)
@given(ANY, ANY, ANY)
def test_wilson_takes_only_a_share_a_count_and_a_level(fraction, n, level):
    out = _refused_or(wilson_interval, fraction, n, level)
    if out is not None:
        assert isinstance(n, int)
        assert 0 <= fraction <= 1
        assert 0 <= out[0] <= fraction <= out[1] <= 1


@settings(max_examples=300, deadline=None)
@given(ANY, ANY, ANY)
def test_wilson_requests_takes_only_shares_and_a_level(fraction, bound, level):
    out = _refused_or(wilson_requests, fraction, bound, level)
    if out is not None:
        assert isinstance(out, int)
        assert out >= 1


@settings(max_examples=300, deadline=None)
@given(ANY, ANY, ANY, ANY, ANY)
def test_mean_requests_takes_only_finite_numbers_and_a_count(n, estimate, high, bound, level):
    out = _refused_or(mean_requests, n, estimate, high, bound, level)
    if out is not None:
        assert isinstance(out, int)
        assert out > n


@settings(max_examples=200, deadline=None)
@given(ANY, ANY)
def test_t_quantile_takes_only_degrees_of_freedom_and_a_level(df, level):
    out = _refused_or(t_quantile, df, level)
    if out is not None:
        assert math.isfinite(out)
        assert out >= 0


@settings(max_examples=300, deadline=None)
@given(st.one_of(ANY, st.lists(ANY, max_size=40), st.lists(st.floats(0, 1e308), min_size=30, max_size=40)))
def test_mean_interval_takes_only_finite_real_values(values):
    out = _refused_or(mean_interval, values)
    if out is not None and out[0] is not None:
        low, high = out
        arr = np.asarray(values, dtype=np.float64)
        assert math.isfinite(low)
        assert math.isfinite(high)
        assert low <= arr.mean() <= high


@settings(max_examples=300, deadline=None)
@given(ANY, ANY)
def test_fraction_columns_refuses_rather_than_clamps(fraction, n):
    out = _refused_or(fraction_columns, fraction, n)
    if out:
        assert isinstance(n, int)
        assert -1e-9 <= fraction <= 1 + 1e-9
        assert out["goodput_fraction_n"] == n


@settings(max_examples=200, deadline=None)
@given(ANY, ANY)
def test_steady_requests_takes_only_finite_non_negative_numbers(e2e, rate):
    out = _refused_or(steady_requests, e2e, rate)
    if out is not None:
        assert out >= 0


@pytest.mark.parametrize(
    ("call", "word"),
    [
        (lambda: wilson_interval(10**400, 10), "fraction"),
        (lambda: wilson_interval(0.5, 10**400), "n"),
        (lambda: wilson_interval(0.5, 2.7), "n 2.7"),
        (lambda: wilson_interval(0.5, 10, 1), "level 1 must be a confidence strictly between 0 and 1"),
        (lambda: mean_interval(["a", "b"]), "values"),
        (lambda: mean_interval([1 + 1j, 2]), "values"),
        (lambda: mean_interval([1.0, math.inf] * 20), "infinite"),
        (lambda: mean_interval([1e308] * 40), "too large"),
        (lambda: fraction_columns(1.5, 10), "goodput_fraction 1.5"),
        (lambda: fraction_columns(math.inf, 10), "goodput_fraction inf"),
        (lambda: fraction_columns(-0.5, 10), "goodput_fraction -0.5"),
        (lambda: fraction_columns(0.5, 2.7), "n 2.7"),
        (lambda: fraction_columns(0.5, "3"), "n '3'"),
        (lambda: fraction_columns(0.5, None), "n None"),
        (lambda: mean_requests(10, 0.5, 0.4, 0.7), "high 0.4 is below the estimate"),
        (lambda: steady_requests(math.nan, 1), "e2e nan"),
        (lambda: steady_requests(1, math.inf), "rate inf"),
        (lambda: steady_requests(-1, 2), "e2e -1"),
    ],
)
def test_the_reviewers_hostile_calls_are_refused_by_name(call, word):
    """rev46 #5's list, each now one `InvalidArgumentError` naming the argument."""
    with pytest.raises(InvalidArgumentError, match=word.replace("(", r"\(")):
        call()


def _short_frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "max_num_seqs": [16, 64],
            "seed": [0, 0],
            "arrival_span_s": [1.0, 1.0],
            "e2e_s_p99": [2.0, 2.0],
            "steady_requests": [100, 100],
        }
    )


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [({"shown": 0}, "shown 0"), ({"shown": -1}, "shown -1"), ({"shown": 1.5}, "shown 1.5"),
     ({"axes": ["nope"]}, "axes \\['nope'\\]"), ({"axes": "max_num_seqs"}, "axes 'max_num_seqs'")],
)  # fmt: skip
def test_the_sweep_note_refuses_bad_arguments_by_name(kwargs, word):
    assert sweep_too_short_note(_short_frame(), ["max_num_seqs"]) is not None
    with pytest.raises(InvalidArgumentError, match=word):
        sweep_too_short_note(_short_frame(), **kwargs)
    with pytest.raises(InvalidArgumentError, match="frame dict"):
        sweep_too_short_note({"a": [1]})


def _summary_probe(workload, config, *, summary: dict) -> dict:
    return dict(summary)


def _plan_with(
    summary: dict, slos: dict, goodput: dict | None = None
) -> kvsim.analysis.plan_search.PlanResult:
    w = kvsim.workloads.synthetic(60, arrival_rate=2.0, seed=0, lengths="sharegpt-paper", max_model_len=2048)
    return kvsim.plan(w, kvsim.SimConfig(num_blocks=64), slos, goodput=goodput, workers=1, max_probes=2,
                      probe=functools.partial(_summary_probe, summary=summary))  # fmt: skip


GOOD = {"slo_attainment": 0.95, "num_requests": 100, "completed": 100, "rejected": 0}
MEAN = {"ttft_s_mean": 0.2, "quantile_n": {"ttft_s": 100}, "mean_ci": {"ttft_s_mean": [0.15, 0.25]},
        "num_requests": 100, "completed": 100, "rejected": 0}  # fmt: skip


@pytest.mark.parametrize(
    ("summary", "word"),
    [
        ({**GOOD, "slo_attainment": 1.5}, "slo_attainment 1.5 must be in"),
        ({**GOOD, "slo_attainment": math.inf}, "slo_attainment inf"),
        ({**GOOD, "num_requests": 2.5}, "num_requests 2.5"),
        ({**GOOD, "num_requests": True}, "num_requests True"),
        ({**GOOD, "num_requests": "100"}, "num_requests '100'"),
    ],
)
def test_a_probe_summarys_bad_goodput_inputs_are_refused_by_key(summary, word):
    """rev46 #6: a share of 1.5 passed with an interval [0.963, 1] not holding it; 2.5 requests became 2."""
    assert _plan_with(GOOD, {"goodput_fraction": 0.9}, {"ttft": 500}).probes["goodput_fraction_n"][0] == 100
    with pytest.raises(InvalidArgumentError, match=word):
        _plan_with(summary, {"goodput_fraction": 0.9}, {"ttft": 500})


@pytest.mark.parametrize(
    ("mean_ci", "word"),
    [
        ([0.5, 0.1], "is inverted"),
        ([0.3, 0.4], "does not hold its statistic"),
        (["a", 1], "must be a finite number"),
        ([1], "must be a pair"),
        ([math.nan, 1.0], "must be a finite number"),
    ],
)
def test_a_probe_summarys_bad_mean_interval_is_refused_by_key(mean_ci, word):
    assert _plan_with(MEAN, {"ttft_mean": 0.3}).probes["ttft_mean_ci_high"][0] == 0.25
    with pytest.raises(InvalidArgumentError, match=f"mean_ci\\['ttft_s_mean'\\].*{word}"):
        _plan_with({**MEAN, "mean_ci": {"ttft_s_mean": mean_ci}}, {"ttft_mean": 0.3})
    with pytest.raises(InvalidArgumentError, match="quantile_n\\['ttft_s'\\] -1"):
        _plan_with({**MEAN, "quantile_n": {"ttft_s": -1}}, {"ttft_mean": 0.3})


@settings(max_examples=60, deadline=None)
@given(ANY, ANY, st.one_of(ANY, st.tuples(ANY, ANY)))
def test_a_hostile_probe_summary_plans_or_is_refused_by_name(share, total, pair):
    """Random summaries: the search runs (its intervals holding their statistics) or refuses by name."""
    summary = {
        **GOOD,
        **MEAN,
        "slo_attainment": share,
        "num_requests": total,
        "mean_ci": {"ttft_s_mean": pair},
    }
    try:
        r = _plan_with(summary, {"goodput_fraction": 0.9, "ttft_mean": 0.3}, {"ttft": 500})
    except InvalidArgumentError as exc:
        refusal = str(exc)
    else:
        refusal = ""
    if refusal:
        assert "probe summary" in refusal or "slo" in refusal
        return
    for row in r.probes.iter_rows(named=True):
        for m in ("goodput_fraction", "ttft_mean"):
            low, high = row.get(f"{m}_ci_low"), row.get(f"{m}_ci_high")
            if row.get(m) is not None and low is not None and high is not None:
                assert low <= row[m] * (1 + 1e-9) + 1e-12
                assert row[m] <= high * (1 + 1e-9) + 1e-12


@pytest.mark.parametrize("df", [1, 2, 3, 30, 201, 10**6])
def test_a_level_one_rounding_below_1_gives_a_finite_quantile(df):
    """0.5 + level / 2 rounds to 1 for the largest level below 1 (the normal quantile then raised
    StatisticsError); the tail (1 − level) / 2 does not."""
    level = 1 - 2**-53
    t = t_quantile(df, level)
    assert math.isfinite(t)
    assert t > t_quantile(df, 0.999)
    lo, hi = wilson_interval(0.5, 10, level)
    assert 0 < lo < 0.5 < hi < 1
