"""The Rust cluster driver through its binding (`kvsim._core.run_cluster`, `kvsim.engine.rust_engine.run_cluster`):
one replica fed everything is the single run, round-robin over N replicas is N runs of the row subsets,
a router's picks follow its rule, and bad arguments get kvsim's errors."""

from __future__ import annotations

import _thread
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

import kvsim
from kvsim import _core
from kvsim.engine import rust_engine
from kvsim.engine.engine_input import EngineInput, prepare
from kvsim.errors import InvalidArgumentError
from kvsim.workloads import synthetic

from .test_engine_differential import configs, workloads

COLUMNS = (
    "first_scheduled", "first_token", "finish", "generated", "num_preemptions", "num_swaps",
    "cached_tokens", "recomputed_tokens", "status", "reject_reason",
)  # fmt: skip


@dataclass(frozen=True)
class Router:
    """The fields `rust_engine.run_cluster` reads (those of the reference's `RouterSpec`)."""

    name: str
    seed: int = 0
    refresh_ps: int = 0
    prefix_load_cap: float = 1.5
    weights: dict[str, float] | None = field(default=None)
    tie_break: str = "random"


def units(inp: EngineInput) -> list[range]:
    """Each row that is not a fork-cow sample, with its samples."""
    out, i, n = [], 0, len(inp)
    while i < n:
        j = i + 1
        while j < n and int(inp.fork_parent[j]) == i:
            j += 1
        out.append(range(i, j))
        i = j
    return out


def subset(inp: EngineInput, rows: list[int]) -> EngineInput:
    """The rows `rows` (whole units, in order) as an input of their own."""
    idx = np.asarray(rows, dtype=np.int64)
    lo, hi = inp.seg_offsets[idx], inp.seg_offsets[idx + 1]
    seg = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True)]).astype(np.int64)
    where = {r: k for k, r in enumerate(rows)}
    parent = np.array([-1 if p < 0 else where[int(p)] for p in inp.fork_parent[idx]], dtype=np.int64)
    return EngineInput(
        request_row=inp.request_row[idx],
        request_id=inp.request_id[idx],
        sample=np.ascontiguousarray(inp.sample[idx]),
        arrival_ps=inp.arrival_ps[idx],
        prompt_len=inp.prompt_len[idx],
        target=inp.target[idx],
        max_gen=inp.max_gen[idx],
        fork_parent=parent,
        output_seg=inp.output_seg[idx],
        seg_offsets=np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64),
        segment_id=inp.segment_id[seg],
        segment_len=inp.segment_len[seg],
    )


def run_one(inp: EngineInput, cfg: kvsim.SimConfig) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    out = rust_engine.run(inp, cfg)
    return {c: getattr(out, c) for c in COLUMNS}, dict(out.counters)


@given(
    workloads(max_requests=30), configs(), st.sampled_from(["least-loaded", "prefix-affinity", "weighted"])
)
def test_one_replica_is_the_single_run(w, cfg, router):
    inp = prepare(w, cfg)
    columns, counters = run_one(inp, cfg)
    for spec in (Router(router), Router(router, refresh_ps=2 * 10**9)):
        res = rust_engine.run_cluster(inp, [cfg], spec)
        for c in COLUMNS:
            np.testing.assert_array_equal(res["columns"][c], columns[c], err_msg=c)
        assert res["counters"] == [counters]
        assert (res["columns"]["replica"] == 0).all()
        assert res["columns"]["replica"].dtype == np.int64


@given(workloads(max_requests=30), configs(), st.integers(2, 4))
def test_round_robin_is_independent_runs_of_the_subsets(w, cfg, n):
    inp = prepare(w, cfg)
    res = rust_engine.run_cluster(inp, [cfg] * n, Router("round-robin"))
    replica = res["columns"]["replica"]
    for k, u in enumerate(units(inp)):
        assert (replica[u.start : u.stop] == k % n).all()
    for r in range(n):
        rows = [int(i) for i in np.flatnonzero(replica == r)]
        if not rows:
            assert res["counters"][r]["num_steps"] == 0
            continue
        columns, counters = run_one(subset(inp, rows), cfg)
        for c in COLUMNS:
            np.testing.assert_array_equal(res["columns"][c][rows], columns[c], err_msg=f"{c} replica {r}")
        assert res["counters"][r] == counters


def test_prefix_affinity_keeps_conversations_warm():
    w = synthetic(
        400, arrival_rate=40, lengths="sharegpt-paper", seed=3, turns=3, turn_interval=0.5,
        num_system_prompts=4, system_prompt_len=64, sharing_ratio=0.8,
    )  # fmt: skip
    cfg = kvsim.SimConfig(num_blocks=600, block_size=16)
    inp = prepare(w, cfg)
    cached = {
        name: int(rust_engine.run_cluster(inp, [cfg] * 4, Router(name))["columns"]["cached_tokens"].sum())
        for name in ("round-robin", "prefix-affinity")
    }
    assert cached["prefix-affinity"] > cached["round-robin"], cached


def test_random_routing_is_seeded():
    w = synthetic(60, arrival_rate=50, lengths="sharegpt-paper", seed=1)
    cfg = kvsim.SimConfig(num_blocks=300, block_size=16)
    inp = prepare(w, cfg)
    a = rust_engine.run_cluster(inp, [cfg] * 3, Router("random", seed=7))["columns"]["replica"]
    b = rust_engine.run_cluster(inp, [cfg] * 3, Router("random", seed=7))["columns"]["replica"]
    c = rust_engine.run_cluster(inp, [cfg] * 3, Router("random", seed=8))["columns"]["replica"]
    assert (a == b).all()
    assert not (a == c).all()
    assert set(a.tolist()) == {0, 1, 2}


def _call(**overrides: Any) -> None:
    w = synthetic(5, arrival_rate=50, lengths="sharegpt-paper", seed=1)
    cfg = kvsim.SimConfig(num_blocks=300, block_size=16)
    kw: dict[str, Any] = dict(configs=[rust_engine.config_kwargs(cfg)], router="least-loaded")
    kw.update(overrides)
    _core.run_cluster(**kw, **rust_engine.input_kwargs(prepare(w, cfg)))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(configs=[]), "configs: a cluster needs at least one replica, got 0"),
        (dict(configs="x"), "configs must be a list of dicts"),
        (dict(configs=[{"num_blocks": 10}]), r"configs\[0\]: missing key"),
        (dict(configs=[{"bogus": 1}]), r"configs\[0\]: unknown key 'bogus'"),
        (dict(router="nearest"), "router 'nearest' is not one of"),
        (dict(router=3), "router 3 must be a str"),
        (dict(router_seed=-1), "router_seed -1"),
        (dict(router_refresh_ps=-5), "router_refresh_ps -5 must be >= 0"),
        (dict(prefix_load_cap=0.5), "prefix_load_cap 0.5 must be a finite number >= 1"),
        (dict(prefix_load_cap=float("inf")), "prefix_load_cap inf"),
        (dict(prefix_load_cap="big"), "prefix_load_cap 'big' must be a number"),
        (dict(router_weights={"disk": 1.0}), "scorer 'disk' is not one of"),
        (dict(router_weights={"kv": -1.0}), r"router_weights\['kv'\] -1"),
        (dict(router_weights=[1]), "router_weights \\[1\\] must be a dict"),
        (dict(record_events=True), "record_events True"),
        (dict(timeseries_every=3), "timeseries_every 3"),
    ],
)
def test_bad_arguments_raise_kvsim_errors(overrides, message):
    with pytest.raises(InvalidArgumentError, match=message):
        _call(**overrides)


def test_a_bad_replica_config_names_the_replica():
    cfg = kvsim.SimConfig(num_blocks=300, block_size=16)
    bad = dict(rust_engine.config_kwargs(cfg), block_size=0)
    with pytest.raises(InvalidArgumentError, match=r"configs\[1\]: block_size 0"):
        _call(configs=[rust_engine.config_kwargs(cfg), bad])


# Round-robin's replicas run one after the other (a router that reads no state): Ctrl-C is read there too.
@pytest.mark.parametrize("router", ["least-loaded", "round-robin"])
def test_ctrl_c_interrupts_a_cluster_run(router):
    w = synthetic(200_000, arrival_rate=1600, lengths="sharegpt-paper", seed=2)
    cfg = kvsim.SimConfig(num_blocks=1500, block_size=16)
    inp = prepare(w, cfg)
    start = time.perf_counter()
    rust_engine.run_cluster(inp, [cfg] * 4, Router(router))
    whole = time.perf_counter() - start
    timer = threading.Timer(0.05, _thread.interrupt_main)
    timer.start()
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        rust_engine.run_cluster(inp, [cfg] * 4, Router(router))
    timer.cancel()
    # Python raises the interrupt after the call returns even if the core never read it: the run must
    # have stopped well before its end.
    assert time.perf_counter() - start < 0.6 * whole, whole
