"""`kvsim.simulate_cluster` (issue 15 §2, the Python layer): the fleet's knobs, the result's shapes, a
fleet of one replica equal to `simulate`, a round-robin fleet equal to independent runs of the rows each
replica got, heterogeneous replicas, the CLI's fleet section and errors, fleets in sweeps, and every
refusal naming the field and the value. The reference engine runs here; the Rust fleet against the
reference is tests/test_cluster_differential.py."""

from __future__ import annotations

import json

import hypothesis.strategies as st
import numpy as np
import polars as pl
import pytest
from hypothesis import given

import kvsim
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import CLUSTER_KNOBS, KNOBS
from kvsim.workloads import Workload, synthetic
from tests.test_engine_differential import configs, workloads

FLEET_KEYS = ("replicas", "router", "load_imbalance", "load_imbalance_requests")

# The fleet table's header, split on spaces (`kvsim run`'s `render_fleet`).
FLEET_COLUMNS = ["replica", "routed", "finished", "req/s", "hit", "rate", "TTFT", "p99", "ms", "preemptions"]


def shared_prefix_workload(n: int = 60, seed: int = 3) -> Workload:
    """Requests that start with one of a few system prompts (so routers that read the cache differ)."""
    return synthetic(
        n,
        seed=seed,
        arrival_rate=40.0,
        lengths="alpaca-paper",
        num_system_prompts=3,
        system_prompt_len=64,
        sharing_ratio=0.8,
    )


def one_sample(w: Workload) -> Workload:
    return Workload(**{**w.columns(), "num_samples": np.ones(len(w), dtype=np.int64)})


def single_keys(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in FLEET_KEYS}


# -- the knobs ----------------------------------------------------------------------------------------------------
def test_fleet_knobs_have_their_defaults_and_units():
    cfg = kvsim.SimConfig(num_blocks=16)
    assert [cfg.replicas, cfg.router, cfg.router_refresh_s, cfg.router_seed, cfg.prefix_load_cap] == [
        1,
        "round-robin",
        0.0,
        0,
        1.5,
    ]
    assert cfg.router_weights is None
    assert cfg.router_tie_break == "random"
    assert set(CLUSTER_KNOBS) <= set(KNOBS)
    assert kvsim.SimConfig(num_blocks=16, router_refresh_s="100ms").router_refresh_s == 0.1
    assert kvsim.SimConfig(num_blocks=16, router_refresh_s="2").router_refresh_s == 2.0  # bare text: seconds
    assert kvsim.SimConfig(num_blocks=16, router_refresh_s=0.25).router_refresh_s == 0.25
    w = kvsim.SimConfig(num_blocks=16, router_weights="queue=1, prefix=3").router_weights
    assert w == {"prefix": 3.0, "queue": 1.0}  # in the scorers' order
    assert list(w) == ["prefix", "queue"]
    assert kvsim.SimConfig(num_blocks=16, router_weights={"kv": 2}).router_weights == {"kv": 2.0}
    hash(kvsim.SimConfig(num_blocks=16, router_weights={"kv": 2}))  # still hashable


@pytest.mark.parametrize(
    ("kwargs", "shown"),
    [
        ({"replicas": 0}, "replicas 0"),
        ({"router": "closest"}, "router 'closest'"),
        ({"router_refresh_s": -1.0}, "router_refresh_s -1.0"),
        ({"router_refresh_s": float("inf")}, "router_refresh_s inf"),
        ({"router_refresh_s": "5 parsecs"}, "router_refresh_s '5 parsecs'"),
        ({"router_refresh_s": 1e-15}, "router_refresh_s 1e-15"),
        ({"router_seed": -1}, "router_seed -1"),
        ({"prefix_load_cap": 0.9}, "prefix_load_cap 0.9"),
        ({"prefix_load_cap": float("nan")}, "prefix_load_cap nan"),
        ({"router_weights": {"cache": 1}}, "'cache'"),
        ({"router_weights": {"kv": -1}}, "router_weights {'kv': -1}"),
        ({"router_weights": "prefix"}, "router_weights 'prefix'"),
        ({"router_weights": "prefix=x"}, "'x'"),
        ({"router_weights": {}}, "router_weights {}"),
        ({"router_tie_break": "first"}, "router_tie_break 'first'"),
    ],
)
def test_bad_fleet_knobs_name_the_field_and_the_value(kwargs, shown):
    with pytest.raises(InvalidArgumentError) as info:
        kvsim.SimConfig(num_blocks=16, **kwargs)
    msg = str(info.value)
    assert msg.startswith(next(iter(kwargs))), msg
    assert shown in msg, msg


def test_simulate_runs_one_replica_and_points_at_simulate_cluster():
    w = synthetic(5, seed=0)
    cfg = kvsim.SimConfig(num_blocks=64, replicas=2)
    with pytest.raises(InvalidArgumentError, match=r"^replicas 2: kvsim.simulate .*kvsim.simulate_cluster"):
        kvsim.simulate(w, cfg)
    with pytest.raises(InvalidArgumentError, match=r"kvsim\.simulate_cluster"):
        kvsim.simulate_stream(w, cfg, rows="memory")
    # The router's knobs alone do not make a fleet: one replica runs as before.
    assert kvsim.simulate(w, cfg.replace(replicas=1, router="least-kv")).summary["completed"] == 5


def test_sweep_ids_of_one_replica_points_do_not_change():
    """A point that names no fleet knob keeps the id it had before the knobs existed (the fleet's knobs at
    their defaults are left out of the hash); one that sets one is another point."""
    from kvsim.analysis.sweep import Point

    def pid(**cfg):
        return Point(
            config={"num_blocks": 100, **cfg}, workload="sharegpt", workload_params={}, seed=0, requests=10
        )

    assert pid().point_id() == pid(replicas=1, router="round-robin").point_id()
    # The id a point had before the fleet knobs existed: the hash of its identity without any of them.
    import hashlib
    import json

    from kvsim.model.config import CLUSTER_KNOBS

    # (nor the watermark's rule, which a point without a watermark leaves out too, nor data and expert
    # parallelism at their defaults, nor the release at the defaults')
    later = ("watermark_rule", "data_parallel_size", "enable_expert_parallel", "vllm_release")
    resolved = {k: v for k, v in pid().sim_config().resolved().items() if k not in (*CLUSTER_KNOBS, *later)}
    identity = {"config": resolved, "workload": "sharegpt", "workload_params": {}, "seed": 0, "requests": 10}
    identity["backend"] = pid().backend
    blob = json.dumps(identity, sort_keys=True, default=str)
    assert pid().point_id() == hashlib.sha256(blob.encode()).hexdigest()[:20]
    assert pid().point_id() != pid(replicas=2).point_id()
    assert pid(replicas=2).point_id() != pid(replicas=2, router="least-loaded").point_id()


# -- the result -----------------------------------------------------------------------------------------------------
def test_result_shapes():
    w = shared_prefix_workload()
    cfg = kvsim.SimConfig(num_blocks=120, block_size=16)
    res = kvsim.simulate_cluster(
        w, cfg, replicas=3, router="least-loaded", backend="reference", goodput="ttft:500"
    )
    assert isinstance(res, kvsim.ClusterResult)
    one = kvsim.simulate(w, cfg, backend="reference")
    assert res.requests.columns == [*one.requests.columns, "replica"]
    assert res.requests["replica"].dtype == pl.Int64
    assert set(res.requests["replica"].unique()) <= {0, 1, 2}
    assert len(res.replicas) == 3
    assert sum(r.summary["num_requests"] for r in res.replicas) == len(w)
    for i, r in enumerate(res.replicas):
        assert isinstance(r, kvsim.SimResult)
        assert r.requests.height == res.requests.filter(pl.col("replica") == i).height
        assert r.requests.columns == one.requests.columns
        assert r.config.replicas == 1
    # Every key of a single run's summary, and the fleet's own.
    assert set(one.summary) | set(FLEET_KEYS) <= set(res.summary)
    assert "request_goodput" in res.summary
    assert res.summary["replicas"] == 3
    assert res.summary["router"] == "least-loaded"
    assert res.config.replicas == 3
    assert res.config.router == "least-loaded"
    assert res.router.name == "least-loaded"
    s = res.summary
    assert s["num_requests"] == len(w)
    assert s["completed"] == sum(r.summary["completed"] for r in res.replicas)
    assert s["preemptions"] == sum(r.summary["preemptions"] for r in res.replicas)
    assert s["num_steps"] == sum(r.summary["num_steps"] for r in res.replicas)
    assert s["makespan_s"] == max(r.summary["makespan_s"] for r in res.replicas)
    assert s["capacity_tokens"] == 3 * cfg.capacity_tokens
    hits = sum(r.raw.counters["prefix_hit_tokens"] for r in res.replicas)
    admitted = sum(r.raw.counters["prompt_tokens_admitted"] for r in res.replicas)
    assert s["prefix_hit_rate"] == hits / admitted
    work = [r.raw.counters["sum_batched_tokens"] for r in res.replicas]
    assert s["load_imbalance"] == pytest.approx(max(work) / (sum(work) / 3))
    routed = [r.summary["num_requests"] for r in res.replicas]
    assert s["load_imbalance_requests"] == pytest.approx(max(routed) / (sum(routed) / 3))
    assert res.serving()["completed"] == s["completed"]


@given(w=workloads(), cfg=configs())
def test_one_replica_is_simulate_exactly_reference(w, cfg):
    one = outcome(lambda: kvsim.simulate(w, cfg, backend="reference"))
    fleet = outcome(lambda: kvsim.simulate_cluster(w, cfg, router="least-kv", backend="reference"))
    assert_one_replica_equal(one, fleet)


def outcome(fn):
    try:
        return fn()
    except InvalidArgumentError as exc:
        return ("raise", str(exc))


def assert_one_replica_equal(one, fleet) -> None:
    if isinstance(one, tuple) or isinstance(fleet, tuple):
        assert one == fleet
        return
    assert fleet.requests.drop("replica").equals(one.requests, null_equal=True)
    assert (fleet.requests["replica"] == 0).all()
    assert single_keys(fleet.summary) == one.summary
    assert fleet.replicas[0].summary == one.summary
    assert fleet.replicas[0].requests.equals(one.requests, null_equal=True)
    assert fleet.raw.counters == one.raw.counters
    for name in ("first_scheduled", "first_token", "finish", "generated", "status", "cached_tokens"):
        np.testing.assert_array_equal(getattr(fleet.raw, name), getattr(one.raw, name), err_msg=name)


def assert_round_robin_is_replicas_alone(w: Workload, cfg: kvsim.SimConfig, n: int, backend: str) -> None:
    """A round-robin fleet of `n` replicas of `cfg` on `w` (one sample a request): replica r gets requests
    r, r + N, ..., and its rows, counters and summary are `simulate` of exactly those rows; what a single
    run refuses, the fleet refuses."""
    try:
        fleet = kvsim.simulate_cluster(w, cfg, replicas=n, router="round-robin", backend=backend)
    except InvalidArgumentError as exc:
        with pytest.raises(InvalidArgumentError, match=str(exc)[:20]):
            kvsim.simulate(w, cfg, backend=backend)
        return
    expect = np.arange(len(w)) % n
    np.testing.assert_array_equal(fleet.requests["replica"].to_numpy(), expect)
    for r in range(n):
        rows = np.flatnonzero(expect == r)
        if not len(rows):
            assert fleet.replicas[r].summary["num_requests"] == 0
            continue
        alone = kvsim.simulate(w[rows], cfg, backend=backend)
        mine = fleet.replicas[r]
        assert mine.requests.equals(alone.requests, null_equal=True)
        assert mine.raw.counters == alone.raw.counters
        assert mine.summary == alone.summary


@given(w=workloads(), cfg=configs(), n=st.integers(1, 4))
def test_round_robin_is_independent_runs_of_each_replicas_rows(w, cfg, n):
    """Round-robin reads no state: each replica runs its rows as a replica of its own would."""
    assert_round_robin_is_replicas_alone(one_sample(w), cfg, n, "reference")


def test_heterogeneous_replicas():
    """A list of configs: one replica each; they may differ in memory and block size; the fleet's
    capacity is theirs together and each replica's summary is its own config's."""
    w = shared_prefix_workload(40)
    big = kvsim.SimConfig(num_blocks=200, block_size=16)
    small = kvsim.SimConfig(num_blocks=40, block_size=8)
    res = kvsim.simulate_cluster(w, [big, small, small], router="prefix-affinity", backend="reference")
    assert res.summary["replicas"] == 3
    assert res.summary["capacity_tokens"] == big.capacity_tokens + 2 * small.capacity_tokens
    assert [r.config.num_blocks for r in res.replicas] == [200, 40, 40]
    assert [r.config.block_size for r in res.replicas] == [16, 8, 8]
    assert isinstance(res.config, list)
    assert all(c.router == "prefix-affinity" for c in res.config)
    assert res.summary["completed"] + res.summary["rejected"] == len(w)
    with pytest.raises(InvalidArgumentError, match="replicas 2 differs from the 3 configs"):
        kvsim.simulate_cluster(w, [big, small, small], replicas=2, backend="reference")


def test_replicas_must_agree_on_the_input_and_the_router():
    w = synthetic(20, seed=1)  # prompts and outputs of hundreds of tokens
    a = kvsim.SimConfig(num_blocks=200)
    capped = kvsim.SimConfig(num_blocks=200, max_model_len=64)
    with pytest.raises(InvalidArgumentError, match=r"^max_model_len 64 of config\[1\] .*input columns"):
        kvsim.simulate_cluster(w, [a, capped], backend="reference")
    # The same input columns are fine: a cap no request reaches changes nothing.
    roomy = kvsim.SimConfig(num_blocks=2000, max_model_len=10**6)
    assert kvsim.simulate_cluster(w, [a, roomy], backend="reference").summary["replicas"] == 2
    with pytest.raises(InvalidArgumentError, match=r"^router 'random' of config\[1\] differs"):
        kvsim.simulate_cluster(w, [a, a.replace(router="random")], backend="reference")
    # ... unless the call names the router, for all of them.
    res = kvsim.simulate_cluster(
        w, [a, a.replace(router="random")], router="least-loaded", backend="reference"
    )
    assert res.summary["router"] == "least-loaded"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda w, c: kvsim.simulate_cluster(w, c, router="nearest"), "^router 'nearest'"),
        (lambda w, c: kvsim.simulate_cluster(w, c, replicas=0), "^replicas 0"),
        (lambda w, c: kvsim.simulate_cluster(w, c, replicas=True), "^replicas True"),
        (lambda w, c: kvsim.simulate_cluster(w, c, router_refresh_s=-2), "^router_refresh_s -2"),
        (lambda w, c: kvsim.simulate_cluster(w, c, prefix_load_cap=0.5), "^prefix_load_cap 0.5"),
        (lambda w, c: kvsim.simulate_cluster(w, c, router_weights={"q": 1}), "^router_weights .*'q'"),
        (lambda w, c: kvsim.simulate_cluster(w, c, router_sed=1), "'router_sed' is not .*router_seed"),
        (lambda w, c: kvsim.simulate_cluster(w, c, backend="gpu"), "^backend 'gpu'"),
        (lambda w, c: kvsim.simulate_cluster(w, [], replicas=2), "non-empty list"),
        (lambda w, c: kvsim.simulate_cluster(w, [c, "x"]), r"^config\[1\] 'x'"),
        (lambda w, c: kvsim.simulate_cluster(w, {"num_blocks": 4}), "must be a kvsim.SimConfig"),
        (lambda w, c: kvsim.simulate_cluster(w, [c, c.replace(replicas=3)]), r"^replicas 3 of config\[1\]"),
        (lambda w, c: kvsim.simulate_cluster(w, c, replicas=2, goodput="ttft:-1"), "ttft"),
    ],
)
def test_bad_calls_raise_naming_the_argument(call, match):
    with pytest.raises(InvalidArgumentError, match=match):
        call(synthetic(4, seed=0), kvsim.SimConfig(num_blocks=64))


def test_refusals_of_a_single_run_are_the_fleets():
    w = synthetic(4, seed=0)
    cfg = kvsim.SimConfig(num_blocks=64)
    beam = Workload(**{**w.columns(), "beam": np.ones(4, dtype=bool)})
    with pytest.raises(InvalidArgumentError, match="beam search"):
        kvsim.simulate_cluster(beam, cfg, replicas=2, backend="reference")


def test_routers_run_and_differ_on_shared_prefixes():
    """Every router runs; prefix-affinity keeps a system prompt's requests together, so it hits more than
    round-robin, which scatters them."""
    w = shared_prefix_workload(80)
    cfg = kvsim.SimConfig(num_blocks=200)
    hit = {}
    for router in KNOBS["router"].choices:
        res = kvsim.simulate_cluster(w, cfg, replicas=4, router=router, backend="reference")
        assert res.summary["completed"] == len(w), router
        hit[router] = res.summary["prefix_hit_rate_first_admission"]
    assert hit["prefix-affinity"] > hit["round-robin"]
    stale = kvsim.simulate_cluster(
        w, cfg, replicas=4, router="prefix-affinity", router_refresh_s="50ms", backend="reference"
    )
    assert stale.router.refresh_ps == 50 * 10**9
    assert stale.summary["completed"] == len(w)


# -- the command line ------------------------------------------------------------------------------------------------
RUN = ["run", "--requests", "60", "--num-gpu-blocks-override", "200", "--backend", "reference"]


def test_cli_fleet_section_and_json(capsys):
    argv = [*RUN, "--replicas", "3", "--router", "prefix-affinity", "--router-refresh", "100ms"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "== fleet: 3 replicas, router prefix-affinity, view refreshed every 100 ms ==" in out
    table = out.split("== fleet:", 1)[1].splitlines()
    assert table[1].split() == FLEET_COLUMNS
    assert [line.split()[0] for line in table[2:5]] == ["0", "1", "2"]
    assert "load imbalance (max / mean)" in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    fleet = data["fleet"]
    assert fleet["replicas"] == 3
    assert fleet["router"]["name"] == "prefix-affinity"
    assert fleet["router"]["refresh_ps"] == 10**11
    assert len(fleet["per_replica"]) == 3
    assert sum(r["num_requests"] for r in fleet["per_replica"]) == 60
    assert data["summary"]["load_imbalance"] == fleet["load_imbalance"]
    assert data["config"]["replicas"] == 3
    # The same numbers as the API.
    w = kvsim.analysis.sweep.make_workload("sharegpt", {}, 60, 0)
    api = kvsim.simulate_cluster(
        w,
        kvsim.SimConfig(num_blocks=200, replicas=3, router="prefix-affinity", router_refresh_s=0.1),
        backend="reference",
    )
    assert data["summary"]["ttft_s_p99"] == api.summary["ttft_s_p99"]


def test_cli_router_weights_repeat(capsys):
    argv = [
        *RUN,
        "--replicas",
        "2",
        "--router",
        "weighted",
        "--router-weight",
        "prefix=3",
        "--router-weight",
        "kv=1",
    ]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fleet"]["router"]["weights"] == {"prefix": 3.0, "kv": 1.0}
    assert data["config"]["router_weights"] == {"prefix": 3.0, "kv": 1.0}


def test_cli_one_replica_has_no_fleet_section(capsys):
    assert main([*RUN]) == 0
    assert "== fleet" not in capsys.readouterr().out
    assert main([*RUN, "--json"]) == 0
    assert "fleet" not in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        (["--replicas", "0"], "argument --replicas: replicas 0"),
        (["--replicas", "two"], "argument --replicas: replicas 'two'"),
        (["--router", "nearest"], "argument --router: router 'nearest' is not one of"),
        (["--router-refresh=-1ms"], "argument --router-refresh: router_refresh_s '-1ms'"),
        (["--router-seed", "-3"], "argument --router-seed: router_seed -3"),
        (["--prefix-load-cap", "0.5"], "argument --prefix-load-cap: prefix_load_cap 0.5"),
        (["--router-weight", "cache=1"], "argument --router-weight: router_weights 'cache=1'"),
        (["--router-weight", "prefix=-1"], "argument --router-weight: router_weights 'prefix=-1'"),
        (
            ["--router-tie-break", "first"],
            "argument --router-tie-break: router_tie_break 'first' is not one of",
        ),
    ],
)
def test_cli_fleet_errors_are_one_line_exit_2(capsys, flags, text):
    assert main([*RUN, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert text in err[0], err[0]


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_light_load_spreads_over_the_fleet(backend):
    """One request every 2 s, each done long before the next: every replica is idle at every arrival, so
    each arrival is a tie for the routers that read state. Drawn (the default) or taken in turn, the work
    spreads over the fleet (max / mean per-replica computed tokens near 1); settled low, all of it lands
    on replica 0 (imbalance 4 on 4 replicas), as it did before ties were drawn."""
    rng = np.random.default_rng(3)
    w = Workload(
        arrival=np.arange(200) * 2.0,
        prompt_len=rng.integers(16, 400, 200),
        output_len=rng.integers(1, 200, 200),
    )
    cfg = kvsim.SimConfig(num_blocks=400, replicas=4)
    for router in ("least-loaded", "least-kv", "prefix-affinity", "weighted"):
        imbalance = {}
        for tie_break in KNOBS["router_tie_break"].choices:
            res = kvsim.simulate_cluster(w, cfg, router=router, router_tie_break=tie_break, backend=backend)
            imbalance[tie_break] = res.summary["load_imbalance"]
        assert imbalance["random"] < 1.3, (router, imbalance)
        assert imbalance["round-robin"] < 1.3, (router, imbalance)
        assert imbalance["lowest"] > 3.0, (router, imbalance)


# -- sweeps ------------------------------------------------------------------------------------------------------
def test_sweep_takes_replicas_and_router_as_axes():
    from kvsim.analysis.sweep import SweepSpec, run_sweep
    from kvsim.analysis.sweep_stats import aggregate

    spec = SweepSpec(
        base={"num_blocks": 200},
        grid={"replicas": [1, 2], "router": ["round-robin", "least-loaded"]},
        workloads=["sharegpt"],
        requests=30,
        backend="reference",
    )
    frame = run_sweep(spec, executor="threads", workers=1, progress=False).frame
    assert frame.height == 4
    assert sorted(zip(frame["replicas"], frame["router"], strict=True)) == [
        (1, "least-loaded"),
        (1, "round-robin"),
        (2, "least-loaded"),
        (2, "round-robin"),
    ]
    for row in frame.iter_rows(named=True):
        res = kvsim.simulate_cluster(
            kvsim.analysis.sweep.make_workload("sharegpt", {}, 30, 0),
            kvsim.SimConfig(num_blocks=200, replicas=row["replicas"], router=row["router"]),
            backend="reference",
        )
        assert row["load_imbalance"] == res.summary["load_imbalance"]
        assert row["throughput_rps"] == res.summary["throughput_rps"]
    one = frame.filter(pl.col("replicas") == 1)
    assert (one["load_imbalance"] == 1.0).all()
    agg = aggregate(frame)
    assert {"replicas", "router"} <= set(agg.columns)
    assert agg.height == 4


def test_sweep_weights_column_is_text():
    from kvsim.analysis.sweep import SweepSpec, run_sweep

    spec = SweepSpec(
        base={"num_blocks": 200, "replicas": 2, "router": "weighted"},
        grid={"router_weights": ["prefix=1,kv=1", "none"]},
        workloads=["sharegpt"],
        requests=12,
        backend="reference",
    )
    frame = run_sweep(spec, executor="threads", workers=1, progress=False).frame
    assert frame["router_weights"].to_list() == ["prefix=1,kv=1", None]


def test_sweep_takes_the_tie_break_as_an_axis():
    from kvsim.analysis.sweep import SweepSpec, run_sweep

    spec = SweepSpec(
        base={"num_blocks": 400, "replicas": 4, "router": "least-loaded"},
        grid={"router_tie_break": ["random", "lowest"]},
        workloads=["sharegpt:arrival_rate=0.2"],
        requests=100,
        backend="rust",
    )
    frame = run_sweep(spec, executor="threads", workers=1, progress=False).frame.sort("router_tie_break")
    assert frame["router_tie_break"].to_list() == ["lowest", "random"]
    lowest, drawn = frame["load_imbalance"].to_list()
    assert lowest > 2.0, lowest  # light load: nearly everything on replica 0
    assert drawn < 1.5, drawn


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_mixed_fleets_tier_metrics_cover_its_tiers_whatever_their_order(backend):
    """A fleet of replicas with and without a CPU tier: the fleet's tier keys were built only when the first
    replica had a tier (`[plain, tiered]` reported none, `[tiered, plain]` all). They now cover every
    replica's tier in any order: chunks and moves summed over the tiers, hit rates over every replica's
    prompt tokens (a replica without a tier hits none in it), occupancy over the tiers' busy time."""
    from itertools import permutations

    from kvsim.engine.cluster import fleet_summary
    from kvsim.engine.simulate import RowStats

    w = synthetic(120, seed=5, arrival_rate=30.0, num_system_prompts=6, system_prompt_len=400)
    base = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", num_blocks=120)
    plain, tiered = base, base.replace(kv_offloading_chunks=300)
    other = base.replace(block_size=32, num_blocks=60, kv_offloading_chunks=100)
    res = kvsim.simulate_cluster(w, [plain, tiered], router="round-robin", backend=backend)
    s, mine = res.summary, res.replicas[1].summary
    assert "cpu_tier_chunks" not in res.replicas[0].summary
    assert s["cpu_tier_chunks"] == 300
    for key in ("stored_blocks", "stored_bytes", "loaded_blocks", "loaded_bytes", "cpu_hit_tokens", "loads"):
        assert s[key] == mine[key], key
    assert s["loaded_blocks"] > 0
    assert s["loaded_bytes"] == s["loaded_blocks"] * tiered.kv_offloading_block_bytes
    admitted = sum(r.raw.counters["prompt_tokens_admitted"] for r in res.replicas)
    assert s["cpu_hit_rate"] == mine["cpu_hit_tokens"] / admitted < mine["cpu_hit_rate"]
    assert s["cpu_tier_occupancy"] == pytest.approx(mine["cpu_tier_occupancy"], rel=1e-12)
    assert s["cpu_tier_peak_occupancy"] == mine["cpu_tier_peak_occupancy"]
    # The other backend's summary is the same, key for key.
    twin = kvsim.simulate_cluster(
        w, [plain, tiered], router="round-robin", backend="reference" if backend == "rust" else "rust"
    )
    assert twin.summary == s
    # The same replicas' counters in any order give the same fleet summary (three replicas: two tiers of
    # different chunks and block sizes, one without).
    res3 = kvsim.simulate_cluster(w, [plain, tiered, other], router="round-robin", backend=backend)
    reps = [(r.raw.counters, r.config) for r in res3.replicas]
    expected = {k: v for k, v in res3.summary.items() if k not in FLEET_KEYS}
    assert expected["cpu_tier_chunks"] == 400
    assert expected["stored_bytes"] == sum(r.summary["stored_bytes"] for r in res3.replicas[1:]) > 0
    peaks = [r.summary["cpu_tier_peak_occupancy"] for r in res3.replicas[1:]]
    assert expected["cpu_tier_peak_occupancy"] == max(peaks)
    for order in permutations(reps):
        stats = RowStats()  # (read once: a fresh one each time)
        stats.add(res3.requests)
        got = fleet_summary(stats, [c for c, _ in order], [cfg for _, cfg in order])
        assert got == expected, [cfg.kv_offloading_chunks for _, cfg in order]
        assert list(got) == list(expected)


def test_a_fleet_gives_group_figures_only_for_replicas_of_the_same_groups():
    """A hybrid model's per-group blocks (`mean_group_blocks_<g>`, `peak_group_blocks_<g>`) came from the
    first replica's groups over every replica's summed counters: a fleet of gpt-oss-20b (a window group and a
    full group) beside Llama-3.1-8B (one group) had them only with gpt-oss first, adding Llama's blocks to
    nothing or to another group's. Now a fleet has them only when its replicas' groups are the same, the
    sums of theirs, in any order; each replica's summary keeps its own."""
    from kvsim.engine.cluster import fleet_summary
    from kvsim.engine.simulate import RowStats

    w = synthetic(60, seed=3, arrival_rate=20.0)
    oss = kvsim.SimConfig(model="gpt-oss-20b", kv_cache_bytes="1GiB")
    llama = kvsim.SimConfig(model="llama-3.1-8b", kv_cache_bytes="1GiB")
    keys = ("mean_group_blocks_0", "peak_group_blocks_0", "mean_group_blocks_1", "peak_group_blocks_1")
    mixed = kvsim.simulate_cluster(w, [oss, llama], router="round-robin")
    assert all(k in mixed.replicas[0].summary for k in keys)
    assert not any(k.startswith(("mean_group_blocks_", "peak_group_blocks_")) for k in mixed.summary)
    stats = RowStats()
    stats.add(mixed.requests)
    reps = [(r.raw.counters, r.config) for r in mixed.replicas]
    swapped = fleet_summary(stats, [c for c, _ in reversed(reps)], [cfg for _, cfg in reversed(reps)])
    assert not any(k.startswith(("mean_group_blocks_", "peak_group_blocks_")) for k in swapped)
    same = kvsim.simulate_cluster(w, [oss, oss.replace(kv_cache_bytes="2GiB")], router="round-robin")
    for g in (0, 1):
        peaks = [r.summary[f"peak_group_blocks_{g}"] for r in same.replicas]
        assert same.summary[f"peak_group_blocks_{g}"] == max(peaks) > 0
