"""Adversarial fleet tests (issue 15): nastier random fleets than tests/test_cluster_differential.py's
(tiny pools that preempt all the time, swap, fork-cow groups, contiguous and paged replicas in one fleet,
different block sizes, many replicas, bursts of simultaneous arrivals, zero weights, huge seeds), on
which the Rust and the reference fleets must agree exactly; and edge cases of the fleet's and the
capacity search's arguments, which must be refused with kvsim's error naming the field and the value."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import assume, given

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model.segments import output_id
from kvsim.workloads import Workload
from tests.test_cluster_api import outcome
from tests.test_cluster_differential import assert_fleets_equal

ROUTERS = kvsim.model.config.ROUTERS
CONTIGUOUS = ("static", "orca-max", "orca-pow2", "orca-oracle")


@st.composite
def bursty_workloads(draw, max_requests: int = 30) -> Workload:
    """Requests in bursts (many at one instant), sharing a few prefixes, some quoting earlier answers."""
    n = draw(st.integers(1, max_requests))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.0, 0.0001, 0.002, 0.05]), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    offsets, ids, lens = [0], [], []
    for i in range(n):
        if draw(st.booleans()):
            ids.append(draw(st.sampled_from([1, 2])))
            lens.append(draw(st.sampled_from([17, 33])))
        if i > 0 and draw(st.integers(0, 3)) == 0:
            j = draw(st.integers(0, i - 1))
            ids.append(output_id(j))
            lens.append(draw(st.integers(1, output[j])))
        ids.append(5000 + i)
        lens.append(draw(st.integers(1, 50)))
        offsets.append(len(ids))
    return Workload(
        arrival=np.cumsum(gaps),
        output_len=output,
        num_samples=draw(st.lists(st.sampled_from([1, 1, 2, 4]), min_size=n, max_size=n)),
        seg_offsets=offsets,
        segment_id=np.array(ids, dtype=np.uint64),
        segment_len=lens,
    )


@st.composite
def nasty_fleets(draw) -> list[kvsim.SimConfig]:
    """1 to 6 replicas sharing sampling and max_model_len, each with its own policy (contiguous and paged
    mixed unless fork-cow), tiny pool, block size, preemption mode and swap space, seats and budget."""
    sampling = draw(st.sampled_from(["independent", "fork-cow"]))
    max_model_len = draw(st.sampled_from([None, 120, 200]))
    linear = draw(st.booleans())
    out = []
    for _ in range(draw(st.integers(1, 6))):
        policy = "vllm" if sampling == "fork-cow" else draw(st.sampled_from(["vllm", "reserve", *CONTIGUOUS]))
        if policy == "static" and max_model_len is None:
            policy = "orca-max"
        preemption = draw(st.sampled_from(["recompute", "swap", "auto"])) if policy == "vllm" else "recompute"
        seqs = draw(st.integers(1, 6))
        budget = draw(st.sampled_from([1, 5, 16, 64, 512]))
        try:
            out.append(
                kvsim.SimConfig(
                    policy=policy,
                    sampling=sampling,
                    max_model_len=max_model_len,
                    num_blocks=draw(st.one_of(st.integers(2, 14), st.integers(15, 80))),
                    block_size=draw(st.sampled_from([1, 2, 4, 8, 16])),
                    preemption=preemption,
                    cpu_blocks=draw(st.integers(1, 12)) if preemption != "recompute" else 0,
                    swap_ps_per_block=draw(st.sampled_from([0, 10**6])),
                    enable_prefix_caching=draw(st.booleans()),
                    free_order=draw(st.sampled_from(["classic", "lifo_unhashed"])),
                    max_num_seqs=seqs,
                    max_num_batched_tokens=max(budget, seqs) if sampling == "fork-cow" else budget,
                    chunked_prefill=draw(st.booleans()),
                    admission_gate=draw(st.sampled_from(["none", "full-prompt"])),
                    watermark=draw(st.sampled_from([0.0, 0.2])),
                    append_check=draw(st.sampled_from(["exact", "one-free-block"]))
                    if policy == "vllm"
                    else "exact",
                    placement=draw(st.sampled_from(["first-fit", "buddy"]))
                    if policy in CONTIGUOUS
                    else "first-fit",
                    time_model="linear" if linear else "ticks",
                    c0_ps=draw(st.integers(1, 10**8)) if linear else None,
                    c_tok_ps=draw(st.integers(0, 10**6)) if linear else None,
                    c_ctx_ps=draw(st.integers(0, 10**4)) if linear else None,
                )
            )
        except InvalidArgumentError:
            assume(False)
    return out


def nasty_router(draw) -> dict:
    return {
        "router": draw(st.sampled_from(ROUTERS)),
        "router_refresh_s": draw(st.sampled_from([0.0, 1e-12, 0.0001, 0.003, 1.0])),
        "router_seed": draw(st.one_of(st.integers(0, 3), st.integers(2**59, 2**60))),
        "prefix_load_cap": draw(st.sampled_from([1.0, 1.0000001, 2.0, 1e300])),
        "router_weights": draw(
            st.sampled_from(
                [
                    None,
                    {"prefix": 0.0},
                    {"queue": 0.0, "kv": 0.0},
                    {"prefix": 1e-300},
                    {"kv": 1e300, "prefix": 1.0},
                ]
            )
        ),
    }


@given(w=bursty_workloads(), fleet=nasty_fleets(), data=st.data())
def test_nasty_fleets_agree(w, fleet, data):
    args = nasty_router(data.draw)
    ref = outcome(lambda: kvsim.simulate_cluster(w, fleet, backend="reference", **args))
    rust = outcome(lambda: kvsim.simulate_cluster(w, fleet, backend="rust", **args))
    assert_fleets_equal(rust, ref)


def test_prefix_hits_are_read_after_the_replica_steps_to_the_arrival():
    """Found by test_nasty_fleets_agree: the exact view once looked a replica's prefix map up before
    stepping it to the arrival, so keys its steps evict still counted (Rust saw 4 hit blocks on replica 0
    for the last unit, the reference 0, and the tie it settles differently)."""
    out = output_id(0)
    w = Workload(
        arrival=[0.0] * 6 + [0.05, 0.05, 0.0501, 0.1001],
        output_len=[31, 36, 8, 21, 27, 26, 3, 24, 27, 11],
        num_samples=[4, 1, 1, 1, 1, 1, 1, 4, 1, 1],
        seg_offsets=[0, 2, 4, 7, 8, 10, 11, 13, 15, 16, 19],
        segment_id=np.array(
            [2, 5000, out, 5001, 1, out, 5002, 5003, out, 5004, 5005, out, 5006, 1, 5007, 5008, 2, out, 5009],
            dtype=np.uint64,
        ),
        segment_len=[17, 2, 26, 50, 17, 1, 1, 30, 13, 32, 41, 7, 19, 17, 27, 35, 17, 12, 45],
    )
    common = {"sampling": "fork-cow", "max_num_batched_tokens": 512, "chunked_prefill": False}
    fleet = [
        kvsim.SimConfig(
            num_blocks=40, block_size=4, preemption="swap", cpu_blocks=4, max_num_seqs=6, **common
        ),
        kvsim.SimConfig(
            num_blocks=2, enable_prefix_caching=False, free_order="classic", max_num_seqs=3, **common
        ),
    ]
    args = {"router": "prefix-affinity", "router_seed": 1085038192329945728, "prefix_load_cap": 1.0000001}
    ref = kvsim.simulate_cluster(w, fleet, backend="reference", **args)
    rust = kvsim.simulate_cluster(w, fleet, backend="rust", **args)
    assert_fleets_equal(rust, ref)


# -- arguments that once escaped as bare Python exceptions ---------------------------------------------------------
HUGE = 10**400  # an int no float holds: float(HUGE) raises OverflowError


def _plan_module(name: str = "plan"):
    """`kvsim.analysis.plan`, or its sibling `name` (`plan_smallest`, `plan_compare`)."""
    import importlib

    return importlib.import_module(f"kvsim.analysis.{name}")


def _workload() -> Workload:
    from kvsim.workloads import synthetic

    return synthetic(20, seed=3, arrival_rate=20.0)


CFG = kvsim.SimConfig(num_blocks=200)
SLO = {"ttft_p99": 2.0}


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (
            lambda: kvsim.simulate_cluster(_workload(), CFG, replicas=2, router_weights={"prefix": HUGE}),
            "router_weights",
        ),
        (lambda: kvsim.SimConfig(router_weights={"queue": HUGE}), "router_weights"),
        (lambda: kvsim.simulate_cluster(None, CFG, replicas=2), "workload None"),
        (lambda: kvsim.simulate_cluster([1, 2], CFG, replicas=2), "workload"),
        (lambda: kvsim.simulate(None, CFG), "workload None"),
        (lambda: _plan_module().plan(_workload(), CFG, SLO, start_rate=HUGE), "start_rate"),
        (lambda: _plan_module().plan(_workload(), CFG, SLO, min_rate=HUGE), "min_rate"),
        (lambda: _plan_module().plan(_workload(), CFG, SLO, max_rate=HUGE), "max_rate"),
        (lambda: _plan_module().plan(_workload(), CFG, SLO, precision=HUGE), "precision"),
        (lambda: _plan_module().plan(_workload(), CFG, {"ttft_p99": HUGE}), "ttft_p99"),
        (
            lambda: _plan_module().plan(_workload(), CFG, {"goodput_fraction": HUGE}, goodput={"ttft": 5}),
            "goodput_fraction",
        ),
        (lambda: _plan_module().plan(_workload(), CFG, 5), "slos 5"),
        (lambda: _plan_module().plan(_workload(), CFG, None), "slos None"),
        (lambda: _plan_module().plan(None, CFG, SLO), "workload None"),
        (lambda: _plan_module("plan_smallest").smallest_replicas(_workload(), CFG, SLO, rate=HUGE), "rate"),
        (lambda: _plan_module("plan_smallest").smallest_memory(_workload(), CFG, SLO, low=HUGE), "low"),
        (lambda: _plan_module("plan_compare").best_of(_workload(), CFG, SLO, 5), "candidates 5"),
        (lambda: _plan_module("plan_smallest").smallest_replicas(_workload(), [CFG, CFG], SLO), "config"),
        (lambda: _plan_module("plan_smallest").smallest_memory(_workload(), [CFG, CFG], SLO), "config"),
    ],
)
def test_bad_arguments_are_kvsims_error_naming_them(call, needle):
    with pytest.raises(InvalidArgumentError, match=needle):
        call()


def test_plan_on_a_list_of_replica_configs_plans_the_fleet():
    """A list of configs is a heterogeneous fleet (what simulate_cluster takes): plan probes it as one,
    with the fleet's summary (never refusing it as a single run would)."""
    P = _plan_module()
    w = _workload()
    fleet = [CFG, CFG.replace(block_size=8)]
    r = P.plan(w, fleet, SLO, max_probes=4, workers=2)
    assert r.probes.height == 4
    rate = float(r.probes["rate"][0])
    direct = kvsim.simulate_cluster(P.at_rate(w, rate), fleet).summary
    assert r.probes["ttft_p99"][0] == direct["ttft_s_p99"]


_UNREACHABLE = r"""
import sys, warnings
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import distributed  # noqa: F401  (its config defaults loaded before the override)
import dask, kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.analysis import plan
from kvsim.workloads import synthetic
address = sys.argv[1]
with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
    try:
        plan.plan(synthetic(20, arrival_rate=20, seed=0), kvsim.SimConfig(num_blocks=200), {"ttft_p99": 2.0},
                  max_probes=2, executor="dask", scheduler=address)
    except InvalidArgumentError as exc:
        print("API:", exc)
    from kvsim.cli import main
    argv = ["plan", "--num-blocks", "200", "--requests", "20", "--workload", "synthetic:arrival_rate=20"]
    argv += ["--slo", "ttft_p99:2s", "--executor", "dask", "--scheduler", address]
    sys.exit(main(argv))
"""


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:1", "garbage", "nosuchproto://x:1"])
def test_an_unreachable_dask_scheduler_is_an_error_naming_it(address):
    """A scheduler that cannot be reached (or an address that is not one) is InvalidArgumentError naming
    it, and on the command line one line with exit status 2 (it was a 60-line OSError traceback). In a
    child process: a Dask client that failed to start leaves the process's event-loop state behind, and
    other tests of this process run Dask clusters."""
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-c", _UNREACHABLE, address], capture_output=True, text=True, timeout=120
    )
    assert p.stdout.startswith("API: scheduler"), (p.stdout, p.stderr[-2000:])
    assert p.returncode == 2, p.stderr[-2000:]
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "scheduler" in err


def test_a_replica_search_stopped_by_the_probe_limit_says_so_without_a_zero_percent_bracket():
    """smallest_replicas bisects integers exactly (precision 0): stopped early, its message said "before the
    bracket reached 0 %"; it says the bracket was still open, between the failing and the passing count."""
    import functools

    r = _plan_module("plan_smallest").smallest_replicas(
        _workload(),
        CFG,
        SLO,
        max_probes=3,
        workers=1,
        max_replicas=1000,
        probe=functools.partial(_replica_probe, n_star=300),
    )
    assert r.status == "probe-limit"
    assert "0 %" not in r.message
    assert "still open" in r.message


def _replica_probe(workload, config, *, n_star: int) -> dict:
    return {"ttft_s_p99": 1.0 if config.replicas >= n_star else 3.0}


@given(w=bursty_workloads(), fleet=nasty_fleets(), data=st.data())
def test_one_nasty_replica_is_simulate_exactly(w, fleet, data):
    """A fleet of one replica is `simulate`, whatever the router and its knobs (stale views included)."""
    from tests.test_cluster_api import assert_one_replica_equal

    args = nasty_router(data.draw)
    backend = data.draw(st.sampled_from(["rust", "reference"]))
    one = outcome(lambda: kvsim.simulate(w, fleet[0], backend=backend))
    alone = outcome(lambda: kvsim.simulate_cluster(w, [fleet[0]], backend=backend, **args))
    assert_one_replica_equal(one, alone)


def test_a_plan_on_a_fleet_says_it_is_a_fleet(capsys):
    """The plot's setup line and `kvsim plan`'s header name the fleet (replicas and router) a search on a
    fleet config probed: they showed one replica's pool only, as if a single replica had been planned."""
    from kvsim.cli import main

    fleet = CFG.replace(replicas=3, router="prefix-affinity")
    r = _plan_module().plan(_workload(), fleet, SLO, max_probes=2, workers=1)
    assert "3 replicas" in r.setup
    assert "prefix-affinity" in r.setup
    hetero = _plan_module().plan(_workload(), [CFG, CFG.replace(block_size=8)], SLO, max_probes=2, workers=1)
    assert "2 replicas" in hetero.setup
    single = _plan_module().plan(_workload(), CFG, SLO, max_probes=2, workers=1)
    assert "replicas" not in single.setup
    argv = ["plan", "--num-blocks", "200", "--requests", "20", "--workload", "synthetic:arrival_rate=20"]
    argv += ["--slo", "ttft_p99:2s", "--max-probes", "2", "--workers", "1", "--replicas", "3"]
    argv += ["--router", "least-loaded"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "fleet: 3 replicas, router least-loaded" in out


@given(w=bursty_workloads(), fleet=nasty_fleets(), data=st.data())
def test_fleet_summary_is_consistent_with_its_rows_and_replicas(w, fleet, data):
    """The fleet's summary agrees with its rows and its replicas' summaries: counts add up, every replica's
    rows are the fleet's rows routed to it, load imbalance is max / mean of the replicas' work and
    requests (so within [1, N]), fractions of capacity stay in [0, 1], capacity is the replicas' sum."""
    import polars as pl

    args = nasty_router(data.draw)
    res = outcome(lambda: kvsim.simulate_cluster(w, fleet, backend="rust", **args))
    if isinstance(res, tuple):
        return
    s, n = res.summary, len(fleet)
    assert s["replicas"] == n
    assert s["num_requests"] == len(w) == sum(r.summary["num_requests"] for r in res.replicas)
    assert s["completed"] == sum(r.summary["completed"] for r in res.replicas)
    assert s["rejected"] == sum(r.summary["rejected"] for r in res.replicas)
    routed = np.bincount(res.requests["replica"].to_numpy(), minlength=n)
    assert routed.tolist() == [r.requests.height for r in res.replicas]
    for i, r in enumerate(res.replicas):
        assert res.requests.filter(pl.col("replica") == i).drop("replica").equals(r.requests, null_equal=True)
    work = np.array([r.raw.counters["sum_batched_tokens"] for r in res.replicas], dtype=np.float64)
    for key, values in (("load_imbalance", work), ("load_imbalance_requests", routed.astype(np.float64))):
        expect = values.max() / values.mean() if values.mean() > 0 else 1.0
        assert s[key] == pytest.approx(expect, rel=1e-12), key
        assert 1.0 - 1e-12 <= s[key] <= n + 1e-12, key
    assert s["capacity_tokens"] == sum(c.capacity_tokens for c in fleet)
    busy = sum(r.raw.counters["busy_ps"] for r in res.replicas)
    for key in ("kv_utilization", "kv_allocated_fraction", "peak_allocated_fraction"):
        if s[key] is None:  # (a mean over no busy time is none: DESIGN.md §Metrics)
            assert busy == 0, key
            assert key != "peak_allocated_fraction"
            continue
        assert -1e-12 <= s[key] <= 1.0 + 1e-12, (key, s[key])


def test_numpy_numbers_are_numbers_to_the_capacity_search():
    """A rate, count, precision or SLO bound computed with numpy (np.float32, np.int64) is a number: it was
    refused as "must be a positive number" / "must be a whole number" / "is not a duration"."""
    P = _plan_module()
    w = _workload()
    r = P.plan(
        w,
        CFG,
        {"ttft_p99": np.float32(2.0)},
        start_rate=np.float32(20.0),
        max_rate=np.float64(80.0),
        precision=np.float32(0.25),
        max_probes=np.int64(3),
        workers=1,
    )
    assert r.probes.height == 3
    assert r.slos[0].bound == 2.0
    s = _plan_module("plan_smallest").smallest_replicas(
        w, CFG, SLO, rate=np.float32(20.0), max_replicas=np.int64(4), max_probes=2, workers=1
    )
    assert s.probes["rate"][0] == 20.0
    with pytest.raises(InvalidArgumentError, match="max_probes"):
        P.plan(w, CFG, SLO, max_probes=np.bool_(True))


def test_cli_smallest_replicas_starts_at_the_replicas_given(capsys):
    """`kvsim plan --smallest replicas --replicas 4`: the count given is where the search starts (it was
    silently ignored, the search starting at 1 whatever --replicas said)."""
    import json

    from kvsim.cli import main

    argv = ["plan", "--num-blocks", "200", "--requests", "20", "--workload", "synthetic:arrival_rate=20"]
    argv += ["--slo", "ttft_p99:2s", "--max-probes", "2", "--workers", "1", "--smallest", "replicas"]
    assert main([*argv, "--replicas", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["probes"][0]["replicas"] == 4
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["probes"][0]["replicas"] == 1


def test_smallest_memory_of_a_fleet_searches_within_the_memory_limit(monkeypatch):
    """A fleet's pools count together against the memory limit: the default cap (the config's own x 64)
    stays within what the limit lets every replica's pool hold, so no probe is refused mid-search (it
    once raised the cluster's memory error out of the whole search); a `high` beyond it is refused up
    front, naming it."""
    P = _plan_module()
    per_block = kvsim._core.POOL_BYTES_PER_BLOCK
    fleet = CFG.replace(replicas=4, num_blocks=100)
    # Room for 4 pools of 3,000 blocks, below the default cap of 100 x 64 = 6,400 blocks a replica.
    monkeypatch.setenv("KVSIM_MEMORY_LIMIT", str(4 * 3000 * per_block))
    seen: list[int] = []

    def probe(workload, config):
        # The fleet's own run (the engine refuses pools over the limit), judged as if only 5,000 blocks
        # or more held the SLO: the search climbs from 100 to its cap and finds nothing below it.
        seen.append(config.num_blocks)
        summary = dict(P.cluster_probe(workload, config))
        summary["ttft_s_p99"] = 1.0 if config.num_blocks >= 5000 else 10.0
        return summary

    r = _plan_module("plan_smallest").smallest_memory(
        _workload(), fleet, SLO, rate=20.0, probe=probe, max_probes=12
    )
    assert max(seen) == 3000, seen
    assert r.status == "above-cap", r.status
    assert r.value is None
    with pytest.raises(
        InvalidArgumentError, match="high 5000: 5000 blocks per replica are more than the 3000"
    ):
        _plan_module("plan_smallest").smallest_memory(_workload(), fleet, SLO, rate=20.0, high=5000)
    # The cap the limit sets is the pools' own, with the same rule as the engine's.
    with pytest.raises(InvalidArgumentError, match="num_blocks 12004 needs"):
        kvsim.simulate_cluster(_workload(), CFG.replace(replicas=4, num_blocks=3001))
