"""kvsim.engine.metrics: vllm bench serve's metrics computed from the engines' columns, checked against direct
per-request and per-token computations."""

from __future__ import annotations

import contextlib
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kvsim
from kvsim.analysis.sweep import make_workload
from kvsim.engine import metrics
from kvsim.errors import InvalidArgumentError


@given(
    values=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=30),
    data=st.data(),
)
def test_weighted_stats_equal_numpy_on_the_expanded_list(values, data):
    counts = data.draw(st.lists(st.integers(0, 5), min_size=len(values), max_size=len(values)))
    if sum(counts) == 0:
        counts[0] = 1
    expanded = np.repeat(np.array(values), counts)
    out: dict = {}
    metrics._weighted_stats("x", np.array(values), np.array(counts), (1, 37.5, 99, 100), out)
    assert out["mean_x_ms"] == pytest.approx(np.mean(expanded), rel=1e-9, abs=1e-9)
    assert out["std_x_ms"] == pytest.approx(np.std(expanded), rel=1e-6, abs=1e-6)
    assert out["median_x_ms"] == pytest.approx(np.median(expanded), rel=1e-9, abs=1e-9)
    for p, key in ((1, "p1"), (37.5, "p37.5"), (99, "p99"), (100, "p100")):
        assert out[f"{key}_x_ms"] == pytest.approx(np.percentile(expanded, p), rel=1e-9, abs=1e-9)


def _run(num_blocks: int, requests: int = 150, **workload: object):
    w = make_workload("sharegpt", {"arrival_rate": 20.0, **workload}, requests, 1)
    cfg = kvsim.SimConfig(model="opt-13b", gpu="a100-40gb", num_blocks=num_blocks)
    return kvsim.simulate(w, cfg, record_timeseries=True)


def _itl_by_hand(res) -> list[float]:
    """Every token gap of every sequence, walking the step times one sequence at a time."""
    raw = res.raw
    starts = list(raw.timeseries["time_ps"])
    gaps: list[float] = []
    for first, finish, gen in zip(raw.first_token, raw.finish, raw.generated, strict=True):
        if gen < 2:
            continue
        token_times = [t for t in [*starts[1:], raw.counters["makespan_ps"]] if first <= t < finish] + [
            finish
        ]
        token_times = sorted(set(token_times))
        assert len(token_times) == gen, "one token per step"
        gaps += [(b - a) / 1e9 for a, b in itertools.pairwise(token_times)]
    return gaps


def test_itl_distribution_matches_the_tokens_one_by_one():
    res = _run(num_blocks=100_000)  # room for everything: no preemption, one token per step
    assert res.summary["preemptions"] == 0
    s = res.serving(metric_percentiles=(50, 90, 99))
    assert "itl_inexact_sequences" not in s
    gaps = np.array(_itl_by_hand(res))
    assert s["mean_itl_ms"] == pytest.approx(gaps.mean(), rel=1e-9)
    assert s["median_itl_ms"] == pytest.approx(np.median(gaps), rel=1e-9)
    assert s["std_itl_ms"] == pytest.approx(gaps.std(), rel=1e-6)
    assert s["p99_itl_ms"] == pytest.approx(np.percentile(gaps, 99), rel=1e-9)


def test_recorded_itl_equals_the_time_series_method_where_that_is_exact():
    """Where no sequence missed a step, the step-start method (`itl_distribution`) is exact: the engines'
    record (`itl_values`) gives the same multiset of values."""
    res = _run(num_blocks=100_000)
    values, counts, inexact = metrics.itl_distribution(res.raw, res.raw.timeseries["time_ps"])
    assert inexact == 0
    recorded = metrics.itl_values(res.raw)
    assert recorded is not None
    mine = np.repeat(recorded[0], recorded[1])
    theirs = np.repeat(np.rint(values * metrics.PS_PER_MS).astype(np.int64), counts)
    np.testing.assert_array_equal(np.sort(mine), np.sort(theirs))


def test_itl_under_ticks_is_the_iteration_time():
    w = make_workload("alpaca", {}, 100, 0)
    res = kvsim.simulate(w, kvsim.SimConfig(num_blocks=5000, iteration_time_ps="2ms"))
    s = res.serving()
    assert s["median_itl_ms"] == s["p99_itl_ms"] == s["mean_itl_ms"] == pytest.approx(2.0)


def test_itl_with_preemption_is_reported_exactly():
    """Preempted sequences miss steps: the time-series method cannot give their gaps, the engines' record
    can; its distribution is reported, its mean equals the per-sequence exact mean, and its tokens are
    every finished sequence's tokens after the first."""
    res = _run(num_blocks=120, requests=200)
    assert res.summary["preemptions"] > 0
    assert metrics.itl_distribution(res.raw, res.raw.timeseries["time_ps"])[2] > 0
    s = res.serving()
    assert s["median_itl_ms"] is not None
    assert s["p99_itl_ms"] >= s["median_itl_ms"]
    raw = res.raw
    done = (raw.status == 0) & (raw.generated >= 2)
    exact_mean = (raw.finish[done] - raw.first_token[done]).sum() / (raw.generated[done] - 1).sum() / 1e9
    assert s["mean_itl_ms"] == pytest.approx(exact_mean)
    recorded = metrics.itl_values(raw)
    assert recorded is not None
    values, counts = recorded
    assert int(counts.sum()) == int((raw.generated[raw.status == 0] - 1).clip(0).sum())
    assert int((values * counts).sum()) == int((raw.finish[done] - raw.first_token[done]).sum())


def test_ttft_tpot_e2el_match_the_request_rows():
    res = _run(num_blocks=100_000)
    s = res.serving(metric_percentiles=(99,))
    r = res.requests.filter(res.requests["status"] == "finished")
    ttft = ((r["first_token"] - r["arrival"]) * 1000).to_numpy()
    e2el = ((r["finish"] - r["arrival"]) * 1000).to_numpy()
    out = r["output_len"].to_numpy()
    tpot = ((r["finish"] - r["first_token"]) * 1000).to_numpy()[out > 1] / (out[out > 1] - 1)
    assert s["mean_ttft_ms"] == pytest.approx(ttft.mean())
    assert s["p99_e2el_ms"] == pytest.approx(np.percentile(e2el, 99))
    assert s["median_tpot_ms"] == pytest.approx(np.median(tpot))
    assert s["output_throughput"] == pytest.approx(out.sum() / res.summary["makespan_s"])


def test_goodput_counts_requests_meeting_every_slo():
    res = _run(num_blocks=150, requests=200)
    r = res.requests
    ttft = ((r["first_token"] - r["arrival"]) * 1000).to_numpy()
    bound = float(np.nanmedian(ttft))
    s = res.serving(goodput={"ttft": bound, "e2el": 1e12})
    done = (r["status"] == "finished").to_numpy()
    met = done & (np.nan_to_num(ttft, nan=np.inf) <= bound)
    assert s["good_requests"] == int(met.sum())
    assert s["slo_attainment"] == pytest.approx(met.sum() / r.height)
    assert s["request_goodput"] == pytest.approx(met.sum() / res.summary["makespan_s"])
    assert s["slo_attainment_e2el"] == pytest.approx(done.sum() / r.height)
    summary = kvsim.simulate(
        make_workload("sharegpt", {"arrival_rate": 20.0}, 200, 1), res.config, goodput=[f"ttft:{bound}"]
    ).summary
    assert summary["good_requests"] == s["good_requests"]


@pytest.mark.parametrize(
    ("call", "arg", "match"),
    [
        (metrics.parse_goodput, ["ttft=5"], "METRIC:MILLISECONDS"),
        (metrics.parse_goodput, ["itl:5"], "not one of"),
        (metrics.parse_goodput, ["ttft:-1"], "positive"),
        (metrics.parse_goodput, ["ttft:nan"], "positive"),
        (metrics.parse_goodput, ["ttft:1 ttft:2"], "twice"),
        (metrics.parse_percentile_metrics, "ttft,foo", "foo"),
        (metrics.parse_percentile_metrics, "", "names none"),
        (metrics.parse_metric_percentiles, "0", r"\(0, 100\]"),
        (metrics.parse_metric_percentiles, "abc", "not a number"),
    ],
)
def test_bad_metric_options(call, arg, match):
    with pytest.raises(InvalidArgumentError, match=match):
        call(arg)


_ANY = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["ttft:500", "ttft:500 tpot:50", "ttft:500,tpot:50", "ttft,itl", "50,99"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5) | st.integers(), inner, max_size=3)
    ),
    max_leaves=6,
)


@given(_ANY)
def test_metric_options_parse_or_raise_invalid_argument(value):
    """Any Python value for goodput / percentile metrics / percentiles: a result or kvsim's error, never
    a TypeError or OverflowError from inside (a number, a huge int, a string iterated by character)."""
    for parse in (metrics.parse_goodput, metrics.parse_percentile_metrics, metrics.parse_metric_percentiles):
        with contextlib.suppress(InvalidArgumentError):
            parse(value)


def test_goodput_text_forms():
    assert metrics.parse_goodput("ttft:500 tpot:50") == {"ttft": 500.0, "tpot": 50.0}
    assert metrics.parse_goodput("ttft:500,tpot:50") == {"ttft": 500.0, "tpot": 50.0}
    assert metrics.parse_goodput(["ttft:500", "e2el:2000"]) == {"ttft": 500.0, "e2el": 2000.0}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"record_timeseries": "yes"},
        {"record_timeseries": 1.5},
        {"record_events": "no"},
        {"goodput": "ttft:x"},
    ],
)
def test_simulate_options_are_checked_before_the_run(kwargs):
    w = make_workload("sharegpt", {}, 5, 0)
    with pytest.raises(InvalidArgumentError, match=next(iter(kwargs)).split("_")[0]):
        kvsim.simulate(w, kvsim.SimConfig(num_blocks=100), **kwargs)
