"""Capacity search (kvsim.plan), its logic on fake probes: the search finds a known threshold of a fake
monotone probe within its precision, says clearly when the configuration passes everywhere or nowhere (and
why, at the floor), stops at its probe limit, reports non-monotone probes; its input (SLOs, precision, the
search's arguments, rates) is checked, bad input refused by name. On the real engine, the CLI, fleets and
the requests no probe can serve: tests/test_plan_engine.py."""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kvsim
from kvsim.analysis.plan import (
    at_rate,
    set_replicas,
    workload_rate,
)
from kvsim.analysis.plan_search import METRICS, SLO, check_precision, parse_slos
from kvsim.analysis.plan_smallest import smallest_memory, smallest_replicas
from kvsim.errors import InvalidArgumentError

from .plan_common import BASE, ONE
from .plan_common import workload as _workload


def _threshold_probe(workload, config, *, threshold: float) -> dict:
    """Fake monotone probe: `ttft_s_p99` = rate / threshold, so `ttft_p99 <= 1 s` holds iff rate <= threshold."""
    return {"ttft_s_p99": workload_rate(workload) / threshold, "completed": len(workload), "rejected": 0}


FAKE_CONFIG = kvsim.SimConfig(num_blocks=64)


# ----------------------------------------------------------------------------------------- search


@given(
    start=st.floats(0.01, 1000),
    log2_ratio=st.floats(-10, 10),
    precision=st.floats(0.002, 0.3),
    width=st.integers(1, 4),
)
def test_finds_a_known_threshold_within_the_precision(start, log2_ratio, precision, width):
    threshold = start * 2**log2_ratio
    probe = functools.partial(_threshold_probe, threshold=threshold)
    r = kvsim.plan(
        _workload(4), FAKE_CONFIG, ONE, probe=probe, start_rate=start, precision=precision, workers=width
    )
    assert r.status == "converged", r.message
    lo, hi = r.bracket
    assert r.value == lo
    # (The probe sees the rate through scaled arrivals: equal to the one asked for up to rounding.)
    assert lo <= threshold * (1 + 1e-9)
    assert hi > threshold * (1 - 1e-9)
    assert hi - lo <= precision * lo * (1 + 1e-12)
    assert r.monotone
    assert r.probes.height <= 40
    # Every probe in the table is what the probe said at its rate.
    for x, ttft, ok in r.probes.select("rate", "ttft_p99", "passed").iter_rows():
        assert math.isclose(ttft, x / threshold, rel_tol=1e-9)
        assert ok == (ttft <= 1.0)


@given(n_star=st.integers(1, 300), width=st.integers(1, 3), start=st.integers(1, 40))
def test_smallest_replicas_finds_the_exact_count(n_star, width, start):
    """Integer bisection over a fake fleet whose TTFT falls with the replica count."""

    def probe(workload, config):
        return {"ttft_s_p99": n_star / config["replicas"]}

    r = smallest_replicas(
        _workload(4), {"replicas": 1}, ONE, probe=probe, replicas=lambda c, n: {**c, "replicas": n},
        start=start, max_replicas=512, workers=width,
    )  # fmt: skip
    assert r.status == "converged", r.message
    assert r.value == n_star
    lo, hi = r.bracket
    assert hi == n_star
    assert lo == (None if n_star == 1 else n_star - 1)
    assert r.probes["rate"].to_list() == [2.0] * r.probes.height  # the target rate: the workload's own


def test_smallest_replicas_never_enough_up_to_the_cap():
    r = smallest_replicas(
        _workload(4), {"replicas": 1}, ONE, probe=lambda w, c: {"ttft_s_p99": 100 / c["replicas"]},
        replicas=lambda c, n: {**c, "replicas": n}, max_replicas=50,
    )  # fmt: skip
    assert r.status == "above-cap"
    assert r.value is None
    assert r.bracket == (50, None)
    assert "up to the cap 50" in r.message


def test_the_default_replica_setter_sets_the_knob_or_refuses_it_by_name():
    """`set_replicas` is `config.replace(replicas=n)`: with the cluster's knob the count is set, and
    without it SimConfig refuses the unknown field by name (never a silent one-replica run)."""
    config = kvsim.SimConfig(num_blocks=64)
    if "replicas" in {f.name for f in dataclasses.fields(kvsim.SimConfig)}:
        assert set_replicas(config, 3).replicas == 3
    else:
        with pytest.raises(InvalidArgumentError, match="replicas"):
            set_replicas(config, 3)


def test_passes_at_every_rate_up_to_the_cap():
    probe = functools.partial(_threshold_probe, threshold=1e9)
    r = kvsim.plan(_workload(4), FAKE_CONFIG, ONE, probe=probe, max_rate=100.0, workers=2)
    assert r.status == "above-cap"
    assert r.value == 100.0
    assert r.bracket == (100.0, None)
    assert r.probes["passed"].all()
    # (it said "not saturated": a finite run at such rates is one burst, which says nothing of a rate)
    assert "the whole run served as one burst meets the SLOs, not that the rate can be sustained" in r.message
    assert "100 req/s" in r.message


def test_fails_at_the_lowest_rate():
    probe = functools.partial(_threshold_probe, threshold=1e-9)
    r = kvsim.plan(_workload(4), FAKE_CONFIG, ONE, probe=probe, min_rate=0.1, workers=2)
    assert r.status == "below-floor"
    assert r.value is None
    assert r.bracket == (None, 0.1)
    assert not r.probes["passed"].any()
    assert "no rate meets the SLOs" in r.message


def test_a_floor_failure_without_load_says_no_lower_rate_helps():
    """Requests that miss the SLO alone (the same TTFT at the lowest rates: nobody waited for anybody) fail
    at every rate, and the message says that no lower rate can help, with the value; a failure that falls
    with the rate (the test above's) keeps the advice to lower min_rate."""

    def alone(workload, config):
        return {"ttft_s_p99": 5.0 + 1e-6 * workload_rate(workload), "completed": len(workload), "rejected": 0}

    r = kvsim.plan(_workload(4), FAKE_CONFIG, ONE, probe=alone, min_rate=0.1, workers=2)
    assert r.status == "below-floor"
    low = r.probes.sort("rate").head(2)
    assert low["ttft_p99"].to_list() == pytest.approx([5.0, 5.0], rel=1e-4)
    rates = " and ".join(f"{x:.4g} req/s" for x in low["rate"].to_list())
    assert f"ttft_p99 5 s at both {rates}, the lowest rates probed" in r.message
    assert "no lower rate meets it" in r.message
    assert "lower min_rate" not in r.message
    falls = kvsim.plan(
        _workload(4),
        FAKE_CONFIG,
        ONE,
        probe=functools.partial(_threshold_probe, threshold=1e-9),
        min_rate=0.1,
    )
    assert "lower min_rate" in falls.message
    assert "no lower rate" not in falls.message


def test_a_floor_failure_of_a_burst_says_requests_wait_for_each_other():
    """The same TTFT at the lowest rates, but requests still queue there (a trace's burst: scaling the
    arrivals does not spread requests that arrive at one instant): the message does not say they miss the
    SLO without waiting for each other; it gives the queueing and still that no lower rate helps."""

    def burst(workload, config):
        return {"ttft_s_p99": 15.0, "queueing_s_p99": 14.9, "completed": len(workload), "rejected": 0}

    r = kvsim.plan(_workload(4), FAKE_CONFIG, ONE, probe=burst, min_rate=0.1, workers=2)
    assert r.status == "below-floor"
    assert "without waiting for each other" not in r.message
    assert "where requests still queue (queueing p99 14.9 s)" in r.message
    assert "no lower rate meets ttft_p99 <= 1 s" in r.message

    def alone(workload, config):
        return {"ttft_s_p99": 15.0, "queueing_s_p99": 0.01, "completed": len(workload), "rejected": 0}

    r = kvsim.plan(_workload(4), FAKE_CONFIG, ONE, probe=alone, min_rate=0.1, workers=2)
    assert "without waiting for each other" in r.message


def test_a_floor_failure_where_the_floor_rate_puts_the_whole_sample_together_says_to_lower_the_floor():
    """User audit 54 #4: a floor so high that the whole sample arrives within the latency it misses (an
    absurd start rate, whose floor start / 4096 is absurd too) queues because of the rate, not of the
    trace: the message says so and to lower min_rate / start_rate, not that no lower rate meets the SLO;
    a sample whose arrivals span longer than that latency keeps the burst's message."""

    def together(span, workload, config):
        return {"ttft_s_p99": 15.0, "queueing_s_p99": 14.9, "completed": len(workload), "rejected": 0,
                "num_requests": len(workload), "steady": True, "arrival_span_s": span}  # fmt: skip

    r = kvsim.plan(_workload(4), FAKE_CONFIG, ONE, probe=functools.partial(together, 0.01), min_rate=0.1)
    assert r.status == "below-floor"
    low = r.probes.sort("rate").row(0, named=True)["rate"]
    assert "where requests still queue (queueing p99 14.9 s) because they arrive together" in r.message
    assert (
        f"at {low:.4g} req/s the 4 requests' arrivals span 10 ms, less than their ttft_p99 of 15 s"
        in r.message
    )
    assert "cannot tell whether a lower rate meets ttft_p99 <= 1 s" in r.message
    assert "the floor, min_rate (--min-rate; by default start_rate / 4096, --start-rate" in r.message
    assert "no lower rate" not in r.message
    spread = kvsim.plan(_workload(4), FAKE_CONFIG, ONE, probe=functools.partial(together, 20.0), min_rate=0.1)
    assert "requests that arrive together wait for each other at any rate" in spread.message
    assert "because they arrive together" not in spread.message


def test_a_normalized_latency_is_not_set_beside_an_arrival_span():
    """reread54: the floor's span test compares seconds with seconds: a normalized latency (s/token) that
    fails beside a latency in seconds is not the figure the span is measured against."""

    def together(workload, config):
        return {"ttft_s_p99": 15.0, "normalized_latency_s_per_token": 0.5, "queueing_s_p99": 14.9,
                "completed": len(workload), "rejected": 0, "num_requests": len(workload), "steady": True,
                "arrival_span_s": 1.0}  # fmt: skip

    slos = {"ttft_p99": 1.0, "normalized_latency": 0.1}
    r = kvsim.plan(_workload(4), FAKE_CONFIG, slos, probe=together, min_rate=0.1)
    assert r.status == "below-floor"
    # 1 s of arrivals is less than the ttft_p99 of 15 s it misses (the normalized 0.5 s/token is no span)
    assert "arrivals span 1 s, less than their ttft_p99 of 15 s" in r.message, r.message
    assert "normalized_latency of" not in r.message


def test_a_rate_search_passing_to_a_cap_whose_run_was_steady_says_to_raise_the_cap():
    """User audit 54 #4's mirror: a small start rate's cap (start x 4096) where the run is a steady state
    (arrivals over many e2e p99s) is not "requests arriving nearly at once": the message says the rate is
    sustained and to raise max_rate; a cap whose run was not steady keeps the burst's message."""

    def passing(steady, workload, config):
        return {"ttft_s_p99": 0.1, "queueing_s_p99": 0.0, "completed": len(workload), "rejected": 0,
                "num_requests": len(workload), "steady": steady, "arrival_span_s": 700.0, "e2e_s_p99": 14.0}  # fmt: skip

    r = kvsim.plan(_workload(4), FAKE_CONFIG, ONE, probe=functools.partial(passing, True), max_rate=8.0)
    assert r.status == "above-cap"
    assert (
        "its run there was a steady state, its arrivals spread over 700 s, 50 times its e2e p99 of 14 s"
        in (r.message)
    )
    assert "the cap, max_rate (--max-rate; by default start_rate x 4096, --start-rate" in r.message
    assert "nearly at once" not in r.message
    burst = kvsim.plan(_workload(4), FAKE_CONFIG, ONE, probe=functools.partial(passing, False), max_rate=8.0)
    assert burst.status == "above-cap"
    assert "the workload's requests arrive nearly at once" in burst.message


def test_the_audits_absurd_start_rate_advises_the_floor_that_then_finds_the_rate(capsys):
    """User audit 54 #4's command, 300 requests from --start-rate 1e9: below-floor, with the advice to lower
    the floor instead of "no lower rate meets"; with --min-rate 1 the same search converges (from 1e9, in
    over 40 probes). From 1e-4, above-cap at a steady cap, with the advice to raise it."""
    from kvsim.cli import main
    from kvsim.workloads import traces_dir

    if not (traces_dir() / "mooncake").is_dir():
        pytest.skip("the Mooncake traces are absent")
    argv = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--workload", "mooncake-conversation",
            "--requests", "300", "--slo", "ttft_p99:10s", "--workers", "2", "--start-rate", "1e9"]  # fmt: skip
    assert main(argv) == 0
    (last,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("below-floor: ")]
    assert "because they arrive together" in last
    assert "lower it to search rates that spread the arrivals" in last
    assert "no lower rate" not in last
    assert main([*argv, "--min-rate", "1", "--max-probes", "64"]) == 0
    assert any(line.startswith("converged: ") for line in capsys.readouterr().out.splitlines())
    # The mirror: from 1e-4 the cap is 0.41 req/s, below the knee (1.33), and its run a steady state.
    assert main([*argv[:-1], "1e-4"]) == 0
    (last,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("above-cap: ")]
    assert "its run there was a steady state" in last
    assert "raise it to search higher rates" in last
    assert "nearly at once" not in last


def test_a_floor_failure_of_a_flat_goodput_says_no_lower_rate_helps():
    """A goodput fraction that does not grow as the rate halves (a share of requests that miss their own
    SLOs alone) fails at every rate: the message says so and that no lower rate helps, not to lower
    min_rate; a fraction that grows as the rate falls keeps that advice."""

    def alone(workload, config):
        return {"slo_attainment": 0.72, "queueing_s_p99": 0.0, "completed": len(workload), "rejected": 0}

    goodput = {"goodput_fraction": 0.9}
    r = kvsim.plan(_workload(4), FAKE_CONFIG, goodput, probe=alone, goodput={"ttft": 500}, min_rate=0.1)
    assert r.status == "below-floor"
    rates = " and ".join(f"{x:.4g} req/s" for x in r.probes.sort("rate").head(2)["rate"].to_list())
    assert (
        f"goodput_fraction 0.72 at both {rates}, the lowest rates probed: the share stays within 1 %"
        in r.message
    )
    assert "no lower rate meets goodput_fraction >= 0.9" in r.message
    assert "lower min_rate" not in r.message

    def nearly(workload, config):  # (within 1 %, but not the same as printed)
        return {
            "slo_attainment": 0.72 - 0.05 * workload_rate(workload),
            "completed": len(workload),
            "rejected": 0,
        }

    r = kvsim.plan(_workload(4), FAKE_CONFIG, goodput, probe=nearly, goodput={"ttft": 500}, min_rate=0.1)
    low = r.probes.sort("rate").head(2)
    shares = " and ".join(f"{x:.4g}" for x in low["goodput_fraction"].to_list())
    rates = " and ".join(f"{x:.4g} req/s" for x in low["rate"].to_list())
    assert f"goodput_fraction {shares} at {rates}, the lowest rates probed: the share stays" in r.message
    assert "no lower rate meets" in r.message

    def falling(workload, config):
        share = max(0.0, 0.95 - 0.5 * workload_rate(workload))  # (0.9 holds below 0.1 req/s)
        return {"slo_attainment": share, "completed": len(workload), "rejected": 0}

    r = kvsim.plan(_workload(4), FAKE_CONFIG, goodput, probe=falling, goodput={"ttft": 500}, min_rate=0.2)
    assert r.status == "below-floor"
    assert "lower min_rate" in r.message
    assert "no lower rate" not in r.message


def test_probe_limit_is_said():
    probe = functools.partial(_threshold_probe, threshold=3.3)
    r = kvsim.plan(_workload(4), FAKE_CONFIG, ONE, probe=probe, precision=1e-6, max_probes=6, workers=1)
    assert r.status == "probe-limit"
    assert r.probes.height == 6
    lo, hi = r.bracket
    assert lo is not None
    assert hi is not None
    assert lo <= 3.3 < hi
    assert "stopped at 6 probes" in r.message


def test_non_monotone_probes_are_reported_not_hidden():
    """A probe that fails at 1 req/s but passes at 2 (and fails from 3 on): the answer stays below the
    first failure and the contradiction is listed and said."""

    def probe(workload, config):
        rate = workload_rate(workload)
        bad = 1.0 <= rate <= 1.1 or rate >= 3
        return {"ttft_s_p99": 2.0 if bad else 0.5}

    r = kvsim.plan(_workload(4), FAKE_CONFIG, ONE, probe=probe, start_rate=0.5, workers=4)
    assert not r.monotone
    assert (1.0, 2.0) in r.violations
    assert r.value is not None
    assert r.value < 1.0
    assert r.bracket[1] == 1.0
    assert "NOT MONOTONE" in r.message
    assert "1 req/s fails but 2 req/s passes" in r.message
    assert r.to_dict()["monotone"] is False


def test_a_probe_without_the_slo_metric_is_an_error():
    with pytest.raises(InvalidArgumentError, match="probe summary has no ttft_s_p99"):
        kvsim.plan(_workload(4), FAKE_CONFIG, ONE, probe=lambda w, c: {"e2e_s_p99": 1.0})


# ------------------------------------------------------------------------------------------ input


def test_slo_forms_and_units():
    assert parse_slos({"ttft_p99": 2, "tpot_p99": "100ms"}) == (SLO("ttft_p99", 2.0), SLO("tpot_p99", 0.1))
    assert parse_slos(["ttft_p99:2s", "normalized_latency:250ms"]) == (
        SLO("ttft_p99", 2.0),
        SLO("normalized_latency", 0.25),
    )
    assert parse_slos("goodput_fraction:99%") == (SLO("goodput_fraction", 0.99),)
    assert SLO("goodput_fraction", 0.9).holds(0.95)
    assert not SLO("goodput_fraction", 0.9).holds(0.85)
    assert SLO("ttft_p99", 1.0).holds(1.0)
    assert not SLO("ttft_p99", 1.0).holds(None)
    # Every SLO reads a key the engine's summary has.
    summary = kvsim.simulate(_workload(20), kvsim.SimConfig(**BASE), goodput={"ttft": 500}).summary
    assert all(key in summary for key, _, _ in METRICS.values())


@pytest.mark.parametrize(
    ("slos", "needle"),
    [
        ({"ttft_p98": 1}, "slo metric 'ttft_p98' is not one of"),
        (["ttft_p99:2"], "needs a time unit"),
        (["ttft_p99"], "is not METRIC:BOUND"),
        ({"ttft_p99": -1}, "must be a positive duration"),
        ({"ttft_p99": float("nan")}, "must be a positive duration"),
        ({"ttft_p99": "2 parsecs"}, "unknown time unit"),
        ({"goodput_fraction": 1.5}, "must be a fraction in"),
        ({"goodput_fraction": True}, "is not a fraction"),
        (["ttft_p99:1s", "ttft_p99:2s"], "given twice"),
        ({}, "give no SLO"),
        ([3], "is not METRIC:BOUND"),
    ],
)
def test_bad_slos_are_refused(slos, needle):
    with pytest.raises(InvalidArgumentError, match=needle):
        parse_slos(slos)


@pytest.mark.parametrize("bad", [0, 1, -0.1, float("nan"), "abc", True, "200%", None])
def test_bad_precision_is_refused(bad):
    with pytest.raises(InvalidArgumentError, match="precision"):
        check_precision(bad)


def test_precision_forms():
    assert check_precision("2%") == 0.02
    assert check_precision(0.05) == 0.05


def test_bad_search_arguments_are_refused():
    w = _workload(4)
    probe = functools.partial(_threshold_probe, threshold=1.0)
    for kwargs, needle in (
        ({"max_probes": 1}, "max_probes"),
        ({"start_rate": 0}, "start_rate"),
        ({"min_rate": 5.0, "max_rate": 1.0}, "must be below max_rate"),
        ({"start_rate": 10.0, "max_rate": 5.0}, "must lie in"),
        ({"executor": "gpus"}, "executor"),
        ({"workers": 0}, "workers"),
        ({"probe": 3}, "not callable"),
    ):
        with pytest.raises(InvalidArgumentError, match=needle):
            kvsim.plan(w, FAKE_CONFIG, ONE, **{"probe": probe, **kwargs})
    with pytest.raises(InvalidArgumentError, match="goodput_fraction needs per-request SLOs"):
        kvsim.plan(w, FAKE_CONFIG, {"goodput_fraction": 0.9})
    queued = kvsim.workloads.synthetic(10, arrivals="all-at-once", seed=0)
    with pytest.raises(InvalidArgumentError, match="all arrive at once"):
        kvsim.plan(queued, FAKE_CONFIG, ONE, probe=probe)
    # One request has no rate, whatever its arrival process (a Poisson workload was told to use one).
    single = kvsim.workloads.synthetic(1, arrivals="poisson", seed=0)
    with pytest.raises(InvalidArgumentError, match=r"a workload of 1 request has no rate to scale") as err:
        kvsim.plan(single, FAKE_CONFIG, ONE, probe=probe)
    assert "Poisson" not in str(err.value)
    with pytest.raises(InvalidArgumentError, match="knob 'cpu_blocks'"):
        smallest_memory(w, FAKE_CONFIG, ONE, knob="cpu_blocks", probe=probe)


def test_rate_scaling_is_the_generators_rate():
    """A generator's Poisson arrivals scaled to rate r are the ones it draws at rate r."""
    w = _workload(200, rate=2.0, seed=3)
    assert workload_rate(w) == 2.0
    fast = at_rate(w, 8.0)
    assert math.isclose(workload_rate(fast), 8.0)
    drawn = _workload(200, rate=8.0, seed=3)
    np.testing.assert_allclose(fast.arrival, drawn.arrival, rtol=1e-12, atol=1e-12)
    # Without a generator's rate, the mean rate of the arrivals (`request_rate=`'s definition).
    table = kvsim.Workload(arrival=[0.0, 1.0, 4.0], prompt_len=[5, 5, 5], output_len=[2, 2, 2])
    assert workload_rate(table) == 0.5
    assert math.isclose(workload_rate(at_rate(table, 2.0)), 2.0)


def test_a_tpot_slo_on_one_token_requests_is_refused_not_failed(tmp_path):
    """60 requests of one output token each: TPOT (over requests of more than one token) has no sample
    on any probe, so a TPOT SLO cannot be judged. It was failed at every probe and the search answered
    "every rate probed fails"; now plan refuses it up front, naming the SLO, and a TTFT SLO on the same
    workload searches as usual. One request of two tokens gives TPOT a sample: no refusal."""
    from kvsim.cli import main

    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(0.5, size=60))
    rows = "".join(
        f"{a:.4f},{int(p)},1\n" for a, p in zip(arrivals, rng.integers(100, 400, size=60), strict=True)
    )
    trace = tmp_path / "one_token.csv"
    trace.write_text("arrival,prompt_len,output_len\n" + rows)
    from kvsim.workloads.trace_table import load_table

    w = load_table(trace)
    assert (w.output_len == 1).all()
    cfg = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb")
    with pytest.raises(
        InvalidArgumentError, match=r"^slo tpot_p99: cannot be judged on this workload: TPOT is undefined"
    ):
        kvsim.plan(w, cfg, {"tpot_p99": 0.01}, max_probes=3, workers=1)
    argv = [
        "plan",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-80gb",
        "--workload",
        str(trace),
        "--workers",
        "1",
        "--max-probes",
        "3",
    ]
    assert main([*argv, "--slo", "tpot_p99:10ms"]) == 2
    assert main([*argv, "--slo", "ttft_p99:10ms"]) == 0
    two = tmp_path / "two_tokens.csv"
    two.write_text("arrival,prompt_len,output_len\n" + rows.replace(",1\n", ",2\n", 1))
    assert main([*argv[:6], str(two), *argv[7:], "--slo", "tpot_p99:10ms"]) == 0
