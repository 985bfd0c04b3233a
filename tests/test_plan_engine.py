"""Capacity search (kvsim.plan) on the real engine: a rate that passes with the next probe above it failing
(checked by simulating again), the same on every executor, goodput, memory and replica searches, best_of's
candidates, the plot; the CLI prints the probes and the answer, bad input is one error line; fleets are
searched as fleets; requests no probe can serve are set aside and said. The search's logic on fake probes:
tests/test_plan.py."""

from __future__ import annotations

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
    simulate_probe,
    workload_rate,
)
from kvsim.analysis.plan_compare import Candidate, best_of
from kvsim.analysis.plan_smallest import smallest_memory, smallest_replicas
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError

from .plan_common import BASE, ONE
from .plan_common import workload as _workload

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
    # Each probe's 95 % interval as a bar: one per probe, from the row's low end to its high one (an
    # open end stops at the estimate, marked; 300 requests give the p99 no upper end).
    for ax, slo in zip(axes, r.slos, strict=True):
        (bars,) = [c for c in ax.collections if c.get_label() == "95 % interval"]
        segments = bars.get_segments()
        assert len(segments) == 1  # (the first bar carries the label; the rest are unlabelled)
        rows = r.probes.sort(r.axis).to_dicts()
        drawn = [c for c in ax.collections if type(c).__name__ == "LineCollection"]
        assert len(drawn) == len(rows)
        for c, row in zip(drawn, rows, strict=True):
            ((x0, y0), (_, y1)) = c.get_segments()[0]
            assert x0 == pytest.approx(row[r.axis])
            assert y0 == pytest.approx(row[f"{slo.metric}_ci_low"])
            high = row[f"{slo.metric}_ci_high"]
            assert y1 == pytest.approx(row[slo.metric] if high is None else high)
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "95 % interval" in labels
        assert "interval open (too few requests)" in labels
        # rev46 #11: each open end's triangle above the probe's marker, and past the estimate (the p99's
        # upper end open: the triangle drawn higher on the screen than the estimate).
        marks = max(c.get_zorder() for c in ax.collections if c.get_label().startswith("probe "))
        opens = [c for c in ax.collections if c.get_offsets().shape == (1, 2) and c.get_zorder() > marks]
        open_rows = [row for row in rows if row[f"{slo.metric}_ci_high"] is None]
        assert len(opens) == len(open_rows) > 0
        for c, row in zip(opens, open_rows, strict=True):
            ((x, y),) = c.get_offsets()
            assert (x, y) == pytest.approx((row[r.axis], row[slo.metric]))
            shown = c.get_offset_transform().transform((x, y))
            estimate = ax.transData.transform((x, y))
            assert shown[1] > estimate[1]
            assert shown[0] == pytest.approx(estimate[0])
    path = r.plot(tmp_path / "plan.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _markers(ax):
    """The probes' markers as drawn: (rate, passed, hollow) for each, read off the figure (passing ones
    blue, failing ones red; hollow: no face colour)."""
    from matplotlib.colors import to_rgba

    from kvsim.analysis.plots_plan import PASS_COLOR

    drawn = []
    for c in ax.collections:
        if c.get_zorder() != 3 or len(c.get_offsets()) == 0:
            continue
        passed = tuple(c.get_edgecolors()[0]) == to_rgba(PASS_COLOR)
        hollow = len(c.get_facecolors()) == 0 or c.get_facecolors()[0][3] == 0
        drawn += [(float(x), passed, hollow) for x, _ in c.get_offsets()]
    return sorted(drawn)


def test_plot_draws_the_probes_not_a_steady_state_hollow(real):
    """The probes whose run was no steady state (`steady` false: too short or overloaded) are drawn
    hollow, the rest filled, passing or failing alike, and one legend entry counts each kind; the
    markers follow the column (flipped, they flip; without it, as from another probe function, none is
    hollow and the legend says nothing of it)."""
    import copy

    _, _, _, r = real
    rows = r.probes.sort(r.axis).to_dicts()
    assert {row["steady"] for row in rows} == {True, False}  # (else this test could not fail)
    want = [(row[r.axis], row["passed"], not row["steady"]) for row in rows]
    short = sum(1 for row in rows if not row["steady"] and not row["overloaded"])
    over = sum(1 for row in rows if row["overloaded"])
    assert short > 0
    assert over > 0
    for ax in r.figure().get_axes():
        assert _markers(ax) == want
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert f"hollow: not a steady state ({short} too short, {over} overloaded)" in labels
    flipped = copy.copy(r)
    flipped.probes = r.probes.with_columns(steady=~pl.col("steady"), overloaded=pl.lit(False))
    (ax, _) = flipped.figure().get_axes()
    assert _markers(ax) == [(x, p, not h) for x, p, h in want]
    n = sum(1 for row in rows if row["steady"])
    assert f"hollow: not a steady state ({n} too short)" in [
        t.get_text() for t in ax.get_legend().get_texts()
    ]
    bare = copy.copy(r)
    bare.probes = r.probes.drop("steady", "overloaded")
    (ax, _) = bare.figure().get_axes()
    assert _markers(ax) == [(x, p, False) for x, p, _ in want]
    assert not [t for t in ax.get_legend().get_texts() if t.get_text().startswith("hollow")]


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
    blocks = [*CLI[:5], "--num-gpu-blocks-override", "983", *CLI[7:]]  # (the search's knob, not the bytes)
    assert main([*blocks, "--slo", "ttft_p99:1s", "--smallest", "num_blocks", "--rate", "2.5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["axis"] == "num_blocks"
    assert data["status"] == "converged"
    assert {p["rate"] for p in data["probes"]} == {2.5}
    assert main([*CLI, "--slo", "ttft_p99:1s", "--compare", "policy=orca-max,vllm"]) == 0
    out = capsys.readouterr().out
    assert "best: policy=vllm" in out
    assert out.index("policy=vllm  ") < out.index("policy=orca-max  ")  # ranked, best first


@pytest.mark.parametrize(
    ("searched", "pool", "flag"),
    [
        ("gpu_memory_utilization", ["--kv-cache-memory-bytes", "10GiB"], "--kv-cache-memory-bytes"),
        ("gpu_memory_utilization", ["--num-gpu-blocks-override", "900"], "--num-gpu-blocks-override"),
        ("num_blocks", ["--kv-cache-memory-bytes", "10GiB"], "--kv-cache-memory-bytes"),
        ("num_blocks", ["--gpu-memory-utilization", "0.8"], "--gpu-memory-utilization"),
        ("kv_cache_bytes", ["--num-gpu-blocks-override", "900"], "--num-gpu-blocks-override"),
        ("kv_cache_bytes", ["--gpu-memory-utilization", "0.8"], "--gpu-memory-utilization"),
    ],
)
def test_cli_smallest_memory_refuses_the_pool_flag_its_probes_drop(capsys, searched, pool, flag):
    """`--smallest` of a memory knob sets it in every probe and the pool follows it alone (`set_knob`):
    another pool flag given would be dropped without a word, so it is refused by name, one line."""
    argv = ["plan", "--model", "opt-13b", "--gpu", "a100-40gb", "--workload", "sharegpt:arrival_rate=2"]
    argv += ["--requests", "50", "--slo", "ttft_p99:1s", "--smallest", searched, "--rate", "2", *pool]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith(
        f"kvsim plan: error: argument {flag}: --smallest {searched} sizes every probe's pool"
    )
    assert "would be dropped; drop it" in err, err


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
        (
            ["--rate", "3"],
            "argument --rate: the target rate of --smallest or --split, neither of which is given",
        ),
        (
            ["--rate", "3"],
            "to search at 3 req/s, or give --start-rate 3 to start the search for the highest rate",
        ),
        (
            ["--rate", "0"],
            "argument --rate: '0' is not a positive rate in req/s, and --rate is the target rate",
        ),
        (["--rate", "-5"], "argument --rate: '-5' is not a positive rate in req/s"),
        (["--smallest", "replicas", "--rate", "0"], "argument --rate: '0' must be a positive number"),
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
    decode); with `--async-scheduling` as well."""
    base = ["plan", "--num-gpu-blocks-override", "400", "--requests", "30", "--workers", "1", "--max-probes",
            "3", "--slo", "ttft_p99:1s", "--prefill-replicas", "1", "--pd-link-ps-per-block", "1000"]  # fmt: skip
    for replicas in (1, 2):
        assert main([*base, "--replicas", str(replicas)]) == 0
        out = capsys.readouterr().out
        assert f"fleet: 1 prefill : {replicas} decode replicas, router round-robin" in out
    # under vLLM's asynchronous scheduling too (DESIGN.md §Engine, "P/D under the rule")
    assert main([*base, "--replicas", "2", "--async-scheduling"]) == 0
    assert "fleet: 1 prefill : 2 decode replicas, router round-robin" in capsys.readouterr().out
    split = [*base[:-4], "--split", "--rate", "5", "--max-gpus", "3", "--pd-link-ps-per-block", "1000"]
    assert main([*split, "--async-scheduling"]) == 0
    assert "disaggregated: 1 prefill : 1 decode = 2 GPUs" in capsys.readouterr().out
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
    assert f"{n:,} request{'' if n == 1 else 's'} set aside" in r.message
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
    assert f"{n:,} request{'' if n == 1 else 's'} set aside" in out["message"]


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
