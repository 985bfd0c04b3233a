"""Capacity search (kvsim.plan): the search finds a known threshold of a fake monotone probe within its
precision, says clearly when the configuration passes everywhere or nowhere, reports non-monotone
probes, and on the real engine gives a rate that passes with the next probe above it failing (checked
by simulating again); the CLI prints the probes and the answer, and bad input is one error line."""

from __future__ import annotations

import dataclasses
import functools
import json
import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kvsim
from kvsim.analysis.plan import (
    at_rate,
    cluster_probe,
    default_probe,
    set_replicas,
    simulate_probe,
    workload_rate,
)
from kvsim.analysis.plan_compare import Candidate, best_of
from kvsim.analysis.plan_search import METRICS, SLO, check_precision, parse_slos
from kvsim.analysis.plan_smallest import smallest_memory, smallest_replicas
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError

BASE = {"model": "opt-13b", "gpu": "a100-40gb", "kv_cache_bytes": 12 * 2**30, "max_model_len": 2048}


def _workload(n: int = 60, rate: float = 2.0, seed: int = 0) -> kvsim.Workload:
    return kvsim.workloads.synthetic(
        n, arrival_rate=rate, seed=seed, lengths="sharegpt-paper", max_model_len=2048
    )


def _threshold_probe(workload, config, *, threshold: float) -> dict:
    """Fake monotone probe: `ttft_s_p99` = rate / threshold, so `ttft_p99 <= 1 s` holds iff rate <= threshold."""
    return {"ttft_s_p99": workload_rate(workload) / threshold, "completed": len(workload), "rejected": 0}


FAKE_CONFIG = kvsim.SimConfig(num_blocks=64)
ONE = {"ttft_p99": 1.0}


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


# ------------------------------------------------------------------------------------ real engine


@pytest.fixture(scope="module")
def real():
    w = _workload(300, rate=2.0)
    config = kvsim.SimConfig(**BASE)
    slos = {"ttft_p99": 1.0, "tpot_p99": 0.1}
    return w, config, slos, kvsim.plan(w, config, slos, workers=2)


def test_real_search_brackets_the_knee(real):
    """The answer passes and the bracket's upper rate fails when simulated again, within 2 %."""
    w, config, slos, r = real
    assert r.status == "converged", r.message
    assert r.monotone, r.violations
    lo, hi = r.bracket
    assert hi <= lo * 1.02
    for rate, ok in ((lo, True), (hi, False)):
        s = kvsim.simulate(at_rate(w, rate), config).summary
        meets = s["ttft_s_p99"] <= slos["ttft_p99"] and s["tpot_s_p99"] <= slos["tpot_p99"]
        assert meets is ok, (rate, s["ttft_s_p99"], s["tpot_s_p99"])
    # The probes table holds what the engine says at each rate.
    row = r.probes.sort("rate").row(0, named=True)
    assert row["ttft_p99"] == kvsim.simulate(at_rate(w, row["rate"]), config).summary["ttft_s_p99"]


def test_real_search_is_the_same_on_every_executor(real):
    w, config, slos, r = real
    other = kvsim.plan(w, config, slos, workers=2, executor="processes")
    assert other.value == r.value
    assert other.bracket == r.bracket
    assert other.probes.drop("wall_s").equals(r.probes.drop("wall_s"))


def test_goodput_fraction_on_the_engine():
    w = _workload(200)
    config = kvsim.SimConfig(**BASE)
    goodput = {"ttft": 1000, "tpot": 100}
    r = kvsim.plan(w, config, {"goodput_fraction": 0.95}, goodput=goodput, workers=2)
    assert r.status == "converged"
    lo, hi = r.bracket
    probe = functools.partial(simulate_probe, goodput=goodput)
    assert (
        probe(at_rate(w, lo), config)["slo_attainment"]
        >= 0.95
        > probe(at_rate(w, hi), config)["slo_attainment"]
    )


def test_smallest_memory_on_the_engine():
    w = _workload(200, rate=2.0)
    config = kvsim.SimConfig(**BASE)
    slos = {"ttft_p99": 2.0}
    r = smallest_memory(w, config, slos, knob="num_blocks", rate=2.5, low=50, workers=2)
    assert r.status == "converged", r.message
    lo, hi = r.bracket
    assert lo is not None
    assert r.value == hi
    assert hi - lo <= max(1, 0.02 * lo)
    fast = at_rate(w, 2.5)
    assert kvsim.simulate(fast, config.replace(num_blocks=hi)).summary["ttft_s_p99"] <= 2.0
    assert kvsim.simulate(fast, config.replace(num_blocks=lo)).summary["ttft_s_p99"] > 2.0


def test_best_of_candidates_by_rate_at_slo():
    w = _workload(200)
    config = kvsim.SimConfig(**BASE, enable_prefix_caching=False)
    out = best_of(
        w, config, {"normalized_latency": 0.25},
        [Candidate("vLLM", {"policy": "vllm"}), {"policy": "orca-max"}], workers=2,
    )  # fmt: skip
    assert out.best == "vLLM"
    rates = out.table["rate"].to_list()
    assert rates == sorted(rates, reverse=True)
    assert out.table["candidate"].to_list() == ["vLLM", "policy=orca-max"]
    assert out.plans["vLLM"].value == rates[0]
    with pytest.raises(InvalidArgumentError, match="repeat a label"):
        best_of(w, config, ONE, [{"policy": "vllm"}, {"policy": "vllm"}])


def test_a_refused_candidate_is_reported_not_fatal(capsys):
    """Comparing tensor-parallel sizes for phi-4 (10 KV heads): vLLM cannot split them over 4 or 8 GPUs, so
    those candidates are refused with the reason, the others are ranked; every candidate refused is an
    error. The CLI says each (an adversarial pass found the whole comparison aborted by the first)."""
    w = _workload(60)
    config = kvsim.SimConfig(model="phi-4", kv_cache_bytes="20GiB", max_model_len=4096)
    tps = [{"tensor_parallel_size": tp} for tp in (1, 2, 4)]
    out = best_of(w, config, ONE, tps, workers=1)
    assert set(out.plans) == {"tensor_parallel_size=1", "tensor_parallel_size=2"}
    assert set(out.refused) == {"tensor_parallel_size=4"}
    assert "10 KV heads neither divide among 4 GPUs" in out.refused["tensor_parallel_size=4"]
    row = out.table.filter(pl.col("candidate") == "tensor_parallel_size=4").row(0, named=True)
    assert (row["rate"], row["status"], row["monotone"], row["probes"]) == (None, "refused", None, 0)
    assert out.best in out.plans
    with pytest.raises(InvalidArgumentError, match="every candidate's configuration is refused"):
        best_of(w, config, ONE, [{"tensor_parallel_size": 4}, {"tensor_parallel_size": 8}])
    # Any other bad change is the caller's mistake, raised (a review found it reported as refused).
    with pytest.raises(InvalidArgumentError, match="policy"):
        best_of(w, config, ONE, [{"tensor_parallel_size": 1}, {"policy": "bogus"}])
    argv = ["plan", "--model", "phi-4", "--kv-cache-memory-bytes", "20GiB", "--max-model-len", "4096",
            "--requests", "60", "--slo", "ttft_p99:2s", "--compare", "tensor_parallel_size=1,4"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "tensor_parallel_size=4: refused: tensor_parallel_size 4: phi-4's 10 KV heads" in text
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["compare"]["refused"]) == ["tensor_parallel_size=4"]


def test_plot_marks_the_bound_and_the_knee(real, tmp_path):
    from kvsim.analysis.plots import plan_finding

    _, _, _, r = real
    fig = r.figure()
    axes = fig.get_axes()
    assert len(axes) == 2  # one panel per SLO
    for ax, slo in zip(axes, r.slos, strict=True):
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert f"SLO: {slo.label()}" in labels
        assert any(t.startswith("knee: ") for t in labels)
    assert f"knee {r._fmt(r.value)}" in plan_finding(r)
    path = r.plot(tmp_path / "plan.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------- CLI

CLI = [
    "plan", "--model", "opt-13b", "--gpu", "a100-40gb", "--kv-cache-memory-bytes", "12GiB",
    "--max-model-len", "2048", "--workload", "sharegpt:arrival_rate=2", "--requests", "300",
    "--workers", "2",
]  # fmt: skip


def test_cli_prints_the_probes_and_the_answer(capsys, tmp_path):
    png = tmp_path / "p.png"
    assert main([*CLI, "--slo", "ttft_p99:1s", "--slo", "tpot_p99:100ms", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "round" in out
    assert "ttft_p99 (s)" in out
    assert "pass" in out
    assert "FAIL" in out
    assert "converged: highest rate meeting ttft_p99 <= 1 s, tpot_p99 <= 0.1 s" in out
    assert png.exists()
    assert f"plot: {png}" in out


def test_cli_json_is_the_api_answer(capsys):
    assert main([*CLI, "--slo", "ttft_p99:1s", "--precision", "5%", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    from kvsim.analysis.sweep import make_workload

    w = make_workload("sharegpt", {"arrival_rate": 2.0}, 300, 0)
    config = kvsim.SimConfig(model="opt-13b", gpu="a100-40gb", kv_cache_bytes=12 * 2**30, max_model_len=2048)
    api = kvsim.plan(w, config, {"ttft_p99": 1.0}, precision=0.05, workers=2)
    assert data["value"] == api.value
    assert data["status"] == "converged"
    assert len(data["probes"]) == api.probes.height
    assert data["precision"] == 0.05


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--slo", "ttfx_p99:1s"], "argument --slo: slo metric 'ttfx_p99' is not one of"),
        (["--slo", "ttft_p99:1"], "argument --slo: slo ttft_p99 '1' needs a time unit"),
        ([], "argument --slo: give at least one SLO"),
        (["--slo", "ttft_p99:1s", "--precision", "0%"], "argument --precision:"),
        (["--slo", "ttft_p99:1s", "--precision", "x"], "argument --precision:"),
        (["--slo", "ttft_p99:1s", "--max-probes", "1"], "argument --max-probes:"),
        (["--slo", "ttft_p99:1s", "--start-rate", "-2"], "argument --start-rate:"),
        (["--slo", "ttft_p99:1s", "--plot", "x.jpg"], "argument --plot:"),
        (["--slo", "goodput_fraction:0.9"], "goodput_fraction needs per-request SLOs"),
        (["--slo", "ttft_p99:1s", "--scheduler", "tcp://h:1"], "argument --scheduler: needs --executor dask"),
    ],
)
def test_cli_errors_are_one_line_exit_2(capsys, extra, needle):
    assert main([*CLI, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvsim plan: error:")
    assert "\n" not in err
    assert needle in err


def test_cli_smallest_memory_and_compare(capsys):
    assert main([*CLI, "--slo", "ttft_p99:1s", "--smallest", "num_blocks", "--rate", "2.5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["axis"] == "num_blocks"
    assert data["status"] == "converged"
    assert {p["rate"] for p in data["probes"]} == {2.5}
    assert main([*CLI, "--slo", "ttft_p99:1s", "--compare", "policy=orca-max,vllm"]) == 0
    out = capsys.readouterr().out
    assert "best: policy=vllm" in out
    assert out.index("policy=vllm  ") < out.index("policy=orca-max  ")  # ranked, best first


def test_compare_router_weights_takes_weightings_apart_with_semicolons():
    """A weighting is itself a list (`prefix=3,queue=1`): `--compare router_weights=` splits on ';'."""
    from kvsim.cli.plan import _compare

    name, candidates = _compare("router_weights=prefix=3,queue=1; queue=1;none")
    assert name == "router_weights"
    assert candidates == [
        {"router_weights": {"prefix": 3.0, "queue": 1.0}},
        {"router_weights": {"queue": 1.0}},
        {"router_weights": None},
    ]
    assert _compare("block_size=8,16")[1] == [{"block_size": 8}, {"block_size": 16}]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (
            ["--smallest", "num_blocks", "--compare", "block_size=8,16"],
            "argument --compare: not allowed with",
        ),
        (["--rate", "3"], "argument --rate: the target rate of --smallest"),
        (["--smallest", "num_blocks", "--max-rate", "3"], "argument --max-rate: applies to the rate search"),
        (["--compare", "nope=1,2"], "argument --compare: 'nope' is not a SimConfig field"),
        (["--compare", "block_size=16"], "fewer than two values"),
        (["--compare", "block_size=abc,16"], "argument --compare:"),
        (["--compare", "router_weights=prefix=3,queue=1"], "separate them with ';'"),
        (["--compare", "router_weights=prefix=3;kv=x"], "argument --compare: router_weights 'kv=x'"),
        (["--smallest", "cpu_blocks"], "argument --smallest: invalid choice"),
    ],
)
def test_cli_inverse_search_errors(capsys, extra, needle):
    assert main([*CLI, "--slo", "ttft_p99:1s", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert err.count("error:") == 1


def test_memory_the_config_refuses_fails_without_a_run():
    """A GPU share too small for the weights is memory that does not suffice, not an error."""
    w = _workload(100)
    config = kvsim.SimConfig(model="opt-13b", gpu="a100-40gb", max_model_len=2048)
    r = smallest_memory(w, config, {"ttft_p99": 2.0}, knob="gpu_memory_utilization", rate=1.0, workers=2)
    assert r.status == "converged", r.message
    refused = r.probes.filter(r.probes["refused"].is_not_null())
    assert refused.height >= 1
    assert not refused["passed"].any()
    assert "does not fit" in refused["refused"][0]
    assert "refused by the configuration" in r.message
    lo, hi = r.bracket
    assert r.value == hi
    assert hi - lo <= 0.02 * lo


def test_dask_probes_give_the_thread_probes():
    w = _workload(100)
    config = kvsim.SimConfig(**BASE)
    a = kvsim.plan(w, config, ONE, workers=2, precision=0.05)
    b = kvsim.plan(w, config, ONE, workers=2, precision=0.05, executor="dask")
    assert a.bracket == b.bracket
    assert a.probes.drop("wall_s").equals(b.probes.drop("wall_s"))


def _fleet_config(replicas: int = 1, **kw) -> kvsim.SimConfig:
    return kvsim.SimConfig(
        model="opt-13b", gpu="a100-40gb", kv_cache_bytes=2 * 2**30, replicas=replicas, **kw
    )


def test_smallest_replicas_is_the_fleet_that_passes_where_one_fewer_fails():
    """The replica search probes fleets (`kvsim.simulate_cluster` with the config's router): re-simulated,
    its answer meets the SLO at the rate and one replica fewer does not."""
    w = _workload(300, rate=6.0, seed=2)
    slo = {"ttft_p99": 2.0}
    r = smallest_replicas(w, _fleet_config(), slo, workers=2, max_replicas=64)
    assert r.status == "converged"
    n = int(r.value)
    assert n > 1  # one replica of 2 GiB does not hold 6 req/s
    ok = kvsim.simulate_cluster(w, _fleet_config(n)).summary["ttft_s_p99"]
    worse = kvsim.simulate_cluster(w, _fleet_config(n - 1)).summary["ttft_s_p99"]
    assert ok <= 2.0 < worse
    assert sorted(r.probes["replicas"].to_list())[0] == 1


def test_a_config_of_several_replicas_is_planned_as_a_fleet(monkeypatch):
    """`kvsim.plan` on a config of several replicas probes the fleet with the config's router."""
    import kvsim.engine.cluster

    real = kvsim.engine.cluster.simulate_cluster
    calls = []

    def counting(workload, config, **kwargs):
        calls.append((config.replicas, config.router, kwargs.get("router")))
        return real(workload, config, **kwargs)

    monkeypatch.setattr(kvsim.engine.cluster, "simulate_cluster", counting)
    assert default_probe(_fleet_config(1)) is simulate_probe
    assert default_probe(_fleet_config(4)) is cluster_probe
    fleet = _fleet_config(4, router="least-loaded")
    r = kvsim.plan(_workload(200, rate=4.0), fleet, {"ttft_p99": 2.0}, workers=2, max_probes=8)
    assert calls
    assert set(calls) == {(4, "least-loaded", None)}
    assert r.probes.height == len(calls)
    # A best_of candidate's probe: another router for the same fleet.
    probe = functools.partial(cluster_probe, router="prefix-affinity")
    summary = probe(_workload(50), fleet)
    assert calls[-1] == (4, "least-loaded", "prefix-affinity")
    assert summary["router"] == "prefix-affinity"


def test_cli_smallest_replicas(capsys):
    argv = ["plan", "--model", "opt-13b", "--gpu", "a100-40gb", "--kv-cache-memory-bytes", "2GiB"]
    argv += ["--workload", "sharegpt", "--requests", "300", "--slo", "ttft_p99:2s", "--workers", "2"]
    assert main([*argv, "--smallest", "replicas", "--rate", "6"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("round"))
    assert "replicas" in header  # the probes' table names the count it varies
    assert "smallest replicas meeting ttft_p99 <= 2 s" in out


def test_a_pool_that_rejects_requests_does_not_pass():
    """A rejected request is never served: a pool that admits 34 of 40 ShareGPT-like requests met
    `ttft_p99 <= 0.2 s` on those and passed (the smallest pool came out at 13 blocks, serving 1 request).
    The answer is the least pool that serves them all within the bound."""
    from kvsim.workloads.registry import make_workload, parse_workload

    w = make_workload(*parse_workload("sharegpt"), 40, 0)
    cfg = kvsim.SimConfig(num_blocks=400)
    r = smallest_memory(w, cfg, {"ttft_p99": 0.2}, knob="num_blocks", workers=1)
    assert r.status == "converged"
    rows = r.probes.sort("num_blocks")
    assert all(not p for p, rej in zip(rows["passed"], rows["rejected"], strict=True) if rej)
    answer = rows.filter(rows["num_blocks"] == r.value).row(0, named=True)
    assert answer["rejected"] == 0
    assert answer["completed"] == 40
    below = rows.filter(rows["num_blocks"] == r.value - 1).row(0, named=True)
    assert below["passed"] is False
    assert "failed for rejecting requests" in r.message
    # Against the engine directly: one block less rejects a request.
    assert kvsim.simulate(w, cfg.replace(num_blocks=r.value - 1)).summary["rejected"] > 0


def test_a_disaggregated_fleet_is_searched_and_named_as_one(capsys):
    """`--prefill-replicas 1` with one decode replica is a fleet of two (its search ran `kvsim.simulate`,
    which refused it); the header names the prefill replicas (it said '2 replicas' for 1 prefill : 2
    decode)."""
    base = ["plan", "--num-gpu-blocks-override", "400", "--requests", "30", "--workers", "1", "--max-probes",
            "3", "--slo", "ttft_p99:1s", "--prefill-replicas", "1", "--pd-link-ps-per-block", "1000"]  # fmt: skip
    for replicas in (1, 2):
        assert main([*base, "--replicas", str(replicas)]) == 0
        out = capsys.readouterr().out
        assert f"fleet: 1 prefill : {replicas} decode replicas, router round-robin" in out
    cfg = kvsim.SimConfig(num_blocks=400, prefill_replicas=1, pd_link_ps_per_block=1000)
    assert default_probe(cfg) is cluster_probe


def test_goodput_without_a_goodput_fraction_slo_is_refused_not_ignored(capsys):
    from kvsim.analysis.plan import plan

    w = kvsim.workloads.synthetic(20, arrival_rate=2, seed=0)
    with pytest.raises(InvalidArgumentError, match="read only by a goodput_fraction SLO"):
        plan(w, kvsim.SimConfig(num_blocks=400), {"ttft_p99": 2.0}, goodput={"ttft": 500})
    argv = ["plan", "--num-gpu-blocks-override", "400", "--requests", "20", "--slo", "ttft_p99:2s"]
    assert main([*argv, "--goodput", "ttft:500"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "read only by a goodput_fraction SLO" in err[0]


# ------------------------------------------------------------------- requests no probe can serve


@given(
    prompts=st.lists(st.integers(1, 80), min_size=1, max_size=24),
    samples=st.lists(st.integers(1, 4), min_size=24, max_size=24),
    max_model_len=st.integers(2, 90),
    max_num_seqs=st.integers(1, 4),
    fork=st.booleans(),
    backend=st.sampled_from(["rust", "reference"]),
)
def test_always_rejected_is_what_the_engine_rejects_whatever_the_pool(
    prompts, samples, max_model_len, max_num_seqs, fork, backend
):
    """`always_rejected` names exactly the requests the engine rejects at arrival for a prompt that
    leaves nothing to generate or more samples than running seats (with a pool that holds anything
    else), and they are rejected with a pool of any size (here also one of 8 blocks)."""
    from kvsim.engine.engine_input import always_rejected, prepare

    n = len(prompts)
    w = kvsim.Workload(
        arrival=[0.5 * i for i in range(n)],
        prompt_len=prompts,
        output_len=[5] * n,
        num_samples=samples[:n],
    )
    cfg = kvsim.SimConfig(
        num_blocks=4096,
        block_size=16,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=256,
        sampling="fork-cow" if fork else "independent",
    )
    reason = always_rejected(prepare(w, cfg), cfg)
    inp = prepare(w, cfg)
    flagged = sorted({int(r) for r in np.asarray(inp.request_row)[reason > 0]})
    reqs = kvsim.simulate(w, cfg, backend=backend).requests
    said = reqs["reject_reason"].cast(str).to_list()
    by_engine = sorted(
        i for i, r in enumerate(said) if r in ("prompt_len reaches max_model_len: no room to generate",
                                               "its samples need more running seats than max_num_seqs")
    )  # fmt: skip
    assert flagged == by_engine
    small = kvsim.simulate(w, cfg.replace(num_blocks=8), backend=backend).requests
    rejected = set(np.flatnonzero(small["status"].cast(str).to_numpy() == "rejected").tolist())
    assert set(flagged) <= rejected


def _long_prompts():
    """60 ShareGPT-like requests and a max_model_len that some prompts reach."""
    w = kvsim.workloads.synthetic(60, arrival_rate=2.0, seed=4, lengths="sharegpt-paper")
    cfg = kvsim.SimConfig(**{**BASE, "max_model_len": 400})
    over = np.asarray(w.prompt_len) >= 400
    assert 0 < over.sum() < 30
    return w, cfg, over


def test_requests_no_rate_can_serve_are_set_aside_and_the_rest_judged():
    """A workload with prompts that reach max_model_len (vLLM refuses them at its API) failed every probe
    of `kvsim plan`, whatever the rate; they are set aside, said in the answer, and each probe is judged on
    the others: its metrics are those of the same arrivals without them."""
    w, cfg, over = _long_prompts()
    slos = {"ttft_p99": 1.0}
    r = kvsim.plan(w, cfg, slos, workers=1, max_probes=6)
    n = int(over.sum())
    assert r.unservable == {"prompt_len reaches max_model_len: no room to generate": n}
    assert r.value is not None
    assert r.probes["passed"].any()
    assert f"{n:,} request(s) set aside" in r.message
    assert r.to_dict()["unservable"] == r.unservable
    rest = np.flatnonzero(~over)
    for row in r.probes.iter_rows(named=True):
        fast = at_rate(w, row["rate"])
        kept = kvsim.Workload.from_polars(fast.to_polars()[rest])
        s = kvsim.simulate(kept, cfg).summary
        assert row["rejected"] == n
        assert row["completed"] == len(rest)
        assert row["ttft_p99"] == s["ttft_s_p99"]
        assert row["passed"] is (s["ttft_s_p99"] <= 1.0 and s["rejected"] == 0)


def test_a_goodput_fraction_is_the_share_of_the_requests_that_can_be_served():
    w, cfg, over = _long_prompts()
    goodput = {"ttft": 1000, "tpot": 100}
    r = kvsim.plan(w, cfg, {"goodput_fraction": 0.9}, goodput=goodput, workers=1, max_probes=5)
    rest = np.flatnonzero(~over)
    probe = functools.partial(simulate_probe, goodput=goodput)
    for row in r.probes.iter_rows(named=True):
        kept = kvsim.Workload.from_polars(at_rate(w, row["rate"]).to_polars()[rest])
        share = probe(kept, cfg)["slo_attainment"]
        assert math.isclose(row["goodput_fraction"], share, rel_tol=1e-12)
        assert row["passed"] is (share >= 0.9)


def test_requests_set_aside_do_not_hide_a_pool_that_rejects_others():
    """A memory search still fails a pool that rejects requests it could serve with more blocks."""
    w, _, over = _long_prompts()
    cfg = kvsim.SimConfig(num_blocks=30, max_model_len=400)
    r = smallest_memory(w, cfg, {"ttft_p99": 2.0}, knob="num_blocks", low=2, workers=1, max_probes=12)
    n = int(over.sum())
    assert sum(r.unservable.values()) == n
    for row in r.probes.iter_rows(named=True):
        if row["rejected"] > n:
            assert row["passed"] is False
    assert r.probes.filter(r.probes["rejected"] > n).height > 0  # (the small pools probed)
    assert "failed for rejecting requests" in r.message


def test_a_custom_probe_sets_nothing_aside():
    """kvsim's own probes set aside what the engine's rules reject at every probe (a partial of
    `simulate_probe` too); a probe of the caller's may not run those rules: it sets nothing aside."""
    w, cfg, over = _long_prompts()
    own = kvsim.plan(w, cfg, {"ttft_p99": 1.0}, probe=functools.partial(simulate_probe, goodput=None),
                     workers=1, max_probes=3)  # fmt: skip
    assert sum(own.unservable.values()) == over.sum()

    def probe(workload, config):
        return simulate_probe(workload, config)

    r = kvsim.plan(w, cfg, {"ttft_p99": 1.0}, probe=probe, workers=1, max_probes=3)
    assert r.unservable == {}
    assert not r.probes["passed"].any()


def test_cli_says_what_it_set_aside(capsys):
    argv = ["plan", "--model", "opt-13b", "--gpu", "a100-40gb", "--kv-cache-memory-bytes", "12GiB",
            "--max-model-len", "400", "--requests", "60", "--slo", "ttft_p99:1s", "--workers", "1",
            "--max-probes", "4", "--json"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    ((reason, n),) = out["unservable"].items()
    assert reason.startswith("prompt_len reaches max_model_len")
    assert n > 0
    assert f"{n:,} request(s) set aside" in out["message"]


def test_a_selections_rate_is_its_arrivals_and_scales_compose():
    """Every other row of a 10 req/s generator arrives at ~5 req/s: the generator's `arrival_rate` no
    longer describes it (plan searched from 10 and answered ~2x too high); a window of consecutive rows
    keeps it; two scalings multiply (4 then 8 req/s read 20 where it arrives at 8)."""
    from kvsim.workloads import synthetic

    w = synthetic(2000, arrival_rate=10, seed=1)
    half = w[::2]
    span = float(half.arrival[-1] - half.arrival[0])
    assert workload_rate(half) == pytest.approx((len(half) - 1) / span)
    assert 4.5 < workload_rate(half) < 5.5
    assert workload_rate(w[100:900]) == 10.0
    twice = at_rate(at_rate(w, 4.0), 8.0)
    assert workload_rate(twice) == pytest.approx(8.0)
    assert twice.meta["time_scale"] == pytest.approx(10 / 8)


@pytest.mark.parametrize("meta", [{"arrival_rate": "x"}, {"arrival_rate": 2.0, "time_scale": 0}])
def test_a_generator_rate_in_meta_that_is_not_a_rate_is_refused_by_name(meta):
    """A hand-made meta's rate was read as float('x') (ValueError) or divided by a time_scale of 0."""
    w = kvsim.Workload(
        arrival=[0.0, 1.0, 2.0], output_len=[2] * 3, prompt_len=[8] * 3, meta={"arrivals": "poisson", **meta}
    )
    with pytest.raises(
        InvalidArgumentError, match=r"^workload meta (arrival_rate|time_scale) .* is not a positive number"
    ):
        workload_rate(w)
