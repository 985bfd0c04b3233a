"""vLLM's asynchronous scheduling in a fleet (DESIGN.md §Engine, "Asynchronous scheduling", "In a fleet and
a data-parallel group"): both engines agree on random fleets of independent replicas behind every router
and on data-parallel groups; a group worked by hand from vLLM's `DPEngineCoreProc.run_busy_loop` and
`EngineCore.step_with_batch_queue`; what stays refused."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
import pytest
from hypothesis import given

import kvsim
from kvsim.engine.cluster import prepare, router_spec
from kvsim.reference import cluster as reference
from tests.fleet_strategies import fleet_of
from tests.test_async_scheduling import async_configs
from tests.test_cluster_api import assert_round_robin_is_replicas_alone, one_sample
from tests.test_cluster_differential import router_args
from tests.test_dp_groups import BACKENDS, MS, assert_backends_agree, fleet_run, rows
from tests.test_engine_differential import workloads

US = 10**6  # ps


def _seats(draw, base) -> dict:
    return {}


@given(w=workloads(), base=async_configs(), data=st.data())
def test_rust_fleets_equal_the_reference_under_async_scheduling(w, base, data):
    """Independent replicas (dp_group 1) behind any router, exact or refreshed: each replica follows the
    rule, and a router reads it after every step starting before the arrival."""
    n = data.draw(st.integers(1, 4))
    cfgs = data.draw(fleet_of(base, n, _seats))
    spec = router_spec(cfgs[0].replace(**router_args(data.draw)))
    assert_backends_agree(w, cfgs, spec, 1)


@given(w=workloads(), base=async_configs(), data=st.data())
def test_rust_groups_equal_the_reference_groups_under_async_scheduling(w, base, data):
    size = data.draw(st.integers(2, 3))
    n = size * data.draw(st.integers(1, 2))
    cfgs = data.draw(fleet_of(base, n, _seats))
    spec = dataclasses.replace(router_spec(cfgs[0].replace(**router_args(data.draw))), dp_group=size)
    assert_backends_agree(w, cfgs, spec, size)


@given(w=workloads(max_requests=40), data=st.data())
def test_busy_groups_with_tiny_pools_agree_under_async_scheduling(w, data):
    """Pools that preempt finishers in flight, on ranks of a group of two behind the routers reading state."""
    cfg = kvsim.SimConfig(
        num_blocks=data.draw(st.integers(2, 12)),
        block_size=data.draw(st.sampled_from([1, 4, 16])),
        max_num_seqs=data.draw(st.integers(1, 8)),
        async_scheduling=True,
    )
    router = data.draw(st.sampled_from(["least-loaded", "least-kv", "prefix-affinity", "weighted"]))
    spec = dataclasses.replace(
        router_spec(cfg), name=router, refresh_ps=data.draw(st.sampled_from([0, 2 * MS]))
    )
    group = data.draw(st.sampled_from([1, 2]))
    assert_backends_agree(w, [cfg] * 4, dataclasses.replace(spec, dp_group=group), group)


@pytest.mark.parametrize("backend", BACKENDS)
@given(w=workloads(max_requests=30), cfg=async_configs(), n=st.integers(2, 3))
def test_a_round_robin_fleet_is_its_replicas_run_alone(backend, w, cfg, n):
    """A router that reads nothing: each replica's rows, counters and summary are `simulate` of exactly
    its rows (the fleet's horizons take nothing from the rule)."""
    assert_round_robin_is_replicas_alone(one_sample(w), cfg, n, backend)


def _group_case() -> tuple[kvsim.SimConfig, kvsim.Workload]:
    cfg = kvsim.SimConfig(
        num_blocks=400, block_size=16, time_model="linear", c0_ps=MS, c_tok_ps=10 * US, c_ctx_ps=0,
        max_num_batched_tokens=2048, max_num_seqs=4,
    )  # fmt: skip
    # Round-robin: A (prompt 10, 3 tokens) and C (10, 2, arriving at 0.5 ms) on rank 0, B (1,000, 2) on rank 1.
    return cfg, rows([0, 0, 0.5], [10, 1000, 10], [3, 2, 2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_group_schedules_each_rank_a_step_ahead(backend):
    """Two ranks of a group, a line of 1 ms + 10 µs a token (a dummy batch 1.01 ms). Each rank's
    `step_with_batch_queue` schedules its batch j when the group's step j − 1 starts and learns step
    j − 1's tokens after it; the step lasts its slowest rank's batch:

    - step 0 (0 to 11 ms): A's prompt (1.1 ms) beside B's (11 ms): A's and B's first tokens at 11 ms;
    - step 1 (scheduled at 0, when C had not arrived; 11 to 12.01 ms): A's and B's decodes. B samples its
      last token (its max_tokens) at 12.01 ms;
    - step 2 (scheduled at 11: C joins): A's last decode and C's prompt, 11 tokens (1.11 ms); rank 1 passes
      B over (done at its max_tokens), an empty batch: `step_with_batch_queue` waits for step 1's output
      and `run_busy_loop` runs a dummy batch (1.01 ms) beside rank 0's: 12.01 to 13.12 ms;
    - step 3 (scheduled at 12.01): C's decode beside a dummy batch: 13.12 to 14.13 ms.

    Synchronous: step 1 (at 11 ms) takes C's prompt with A's decode (1.11 ms), C's first token at 12.11 ms,
    then A's and C's last decodes beside a dummy batch (1.02 ms): both finish at 13.13 ms."""
    cfg, w = _group_case()
    cols, counters = fleet_run(w, cfg.replace(async_scheduling=True), 2, 2, backend)
    assert list(cols["replica"]) == [0, 1, 0]
    assert list(cols["first_scheduled"]) == [0, 0, 12_010 * US]
    assert list(cols["first_token"]) == [11 * MS, 11 * MS, 13_120 * US]
    assert list(cols["finish"]) == [13_120 * US, 12_010 * US, 14_130 * US]
    assert [c["num_steps"] for c in counters] == [4, 2]
    assert [c["makespan_ps"] for c in counters] == [14_130 * US] * 2
    sync, _ = fleet_run(w, cfg, 2, 2, backend)
    assert list(sync["first_scheduled"]) == [0, 0, 11 * MS]
    assert list(sync["first_token"]) == [11 * MS, 11 * MS, 12_110 * US]
    assert list(sync["finish"]) == [13_130 * US, 12_110 * US, 13_130 * US]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rank_that_ran_a_dummy_batch_has_no_step_in_flight(backend):
    """1 ms ticks, two ranks: A (from 0, 5 tokens) and C on rank 0, B on rank 1, B and C arriving at 1.5 ms.
    Rank 0 has its step 1 in flight when step 2 is scheduled (at 1 ms), so C joins step 3 (scheduled at
    2 ms). Rank 1 ran dummy batches, which vLLM's `run_busy_loop` executes outside the batch queue: nothing
    of its own is in flight, so B joins step 2 at 2 ms, as synchronous scheduling has it."""
    cfg = kvsim.SimConfig(num_blocks=100, block_size=16, max_num_seqs=4)
    w = rows([0, 1.5, 1.5], [4, 4, 4], [5, 2, 2])
    cols, _ = fleet_run(w, cfg.replace(async_scheduling=True), 2, 2, backend)
    sync, _ = fleet_run(w, cfg, 2, 2, backend)
    assert list(cols["replica"]) == [0, 1, 0]
    assert list(cols["first_scheduled"]) == [0, 2 * MS, 3 * MS]
    assert list(sync["first_scheduled"]) == [0, 2 * MS, 2 * MS]
    assert list(cols["finish"]) == [5 * MS, 4 * MS, 5 * MS]


def test_a_fleet_and_a_disaggregated_fleet_take_the_knob():
    cfg = kvsim.SimConfig(num_blocks=100, async_scheduling=True, replicas=3)
    assert cfg.replicas == 3
    pd = kvsim.SimConfig(num_blocks=100, async_scheduling=True, replicas=2, prefill_replicas=1)
    assert (pd.prefill_replicas, pd.async_scheduling) == (1, True)


def test_the_cluster_drivers_run_a_disaggregated_fleet_under_the_rule_alike():
    """Both drivers take the rule with a prefill pool (DESIGN.md §Engine, "P/D under the rule"; worked
    cases in tests/test_pd_async.py, random fleets in tests/test_pd.py) and agree; the rule moves the
    decode side's first tokens here (the decode replica is busy when the hand-offs come)."""
    from kvsim.engine import rust_engine

    cfg = kvsim.SimConfig(num_blocks=100, block_size=16, async_scheduling=True)
    inp = prepare(rows([0, 0, 0.5, 1.5], [40, 10, 40, 40], [6, 2, 4, 3]), cfg)
    pd = reference.PdSpec(prefill_replicas=1)
    ref = reference.run_cluster(inp, [cfg], router_spec(cfg), pd=pd)
    rust = rust_engine.run_cluster(inp, [cfg], router_spec(cfg), pd=pd)
    for name in ("first_scheduled", "first_token", "finish", "generated", "status"):
        assert ref.columns[name].tolist() == rust["columns"][name].tolist(), name
    assert ref.counters == rust["counters"]
    sync = reference.run_cluster(inp, [cfg.replace(async_scheduling=False)], router_spec(cfg), pd=pd)
    assert ref.columns["first_token"].tolist() != sync.columns["first_token"].tolist()
