"""A disaggregated fleet under `async_scheduling` (DESIGN.md §Engine, "Asynchronous scheduling", "P/D under
the rule"), cases worked by hand from vLLM's loop on both engines: each side's observation point for a
transfer moves from a step's start to the schedule made there (the start of the step in flight), so a
busy prefill replica frees a finished request's held blocks a step later and a busy decode replica runs a
landed request a step later; a hand-off joins the decode replica as an arrival; an empty schedule or a
stall observes as synchronous scheduling does; a prefill pool beside DP ranks stays refused. The random
fleets are tests/test_pd.py's and tests/test_pd_hybrid.py's, which draw the knob."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.workloads import Workload

BACKENDS = ("reference", "rust")
MS = 10**9  # one ticks step (ps)


def fleet(w: Workload, cfg: kvsim.SimConfig, backend: str, **kw) -> kvsim.ClusterResult:
    """One decode replica and one prefill replica, the link's time its latency alone."""
    args = {"replicas": 1, "prefill_replicas": 1, "pd_link_ps_per_block": 0, "router": "round-robin", **kw}
    return kvsim.simulate_cluster(w, cfg, backend=backend, **args)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_busy_prefill_replica_frees_a_finished_request_s_blocks_a_step_later(backend):
    """A (32 tokens, 2 blocks) prefills in step 0 on the prefill replica and finishes at f = 1 ms; C's 320
    tokens keep the replica stepping (32 a step, steps at 0, 1, ..., 10 ms). The decode replica, idle,
    admits A at 1 ms and its read ends at e = 3.5 ms. Synchronously the prefill replica frees A's blocks at
    its first step starting at or after e, 4 ms; under the rule vLLM applies `finished_sending` from the
    output of the step in flight, after the next schedule: the step at 4 ms is scheduled at 3 ms, before
    e, so the blocks are free for the step at 5 ms (its schedule made at 4 ms). They are held one step
    longer: 2 blocks x 1 ms of the prefill replica's time-weighted blocks, nothing else changes."""
    cfg = kvsim.SimConfig(num_blocks=40, block_size=16, max_num_batched_tokens=32)
    w = Workload(arrival=[0.0, 0.0], prompt_len=[32, 320], output_len=[3, 3])
    sync = fleet(w, cfg, backend, pd_link_latency_s=2.5e-3)
    rule = fleet(w, cfg.replace(async_scheduling=True), backend, pd_link_latency_s=2.5e-3)
    (s,), (r,) = sync.prefill_counters, rule.prefill_counters
    assert r["num_steps"] == s["num_steps"] == 11
    assert r["w_held_blocks"] - s["w_held_blocks"] == 2 * MS
    assert r["w_allocated"] - s["w_allocated"] == 2 * 16 * MS
    assert rule.requests.equals(sync.requests)  # (the decode replica, idle, sees the same)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_busy_decode_replica_takes_the_hand_off_and_runs_the_landed_request_a_step_later(backend):
    """A (64 tokens) prefills in two chunks of 32 on the prefill replica: f = 2 ms. D (8 tokens, below the
    threshold) decodes on the decode replica from 0 to 30 ms, which steps every 1 ms. Synchronously the
    decode step at 2 ms admits A, its read runs 2 to 4.5 ms, the step at 5 ms sees it and runs A's last
    token: first token 6 ms. Under the rule A joins as an arrival, at the first schedule made at or after
    f: the step at 3 ms (scheduled at 2 ms); its read runs 3 to 5.5 ms; the output of the step at 5 ms
    (ending at 6 ms) reports it after the step at 6 ms was scheduled, so A runs at 7 ms: first token 8 ms."""
    cfg = kvsim.SimConfig(num_blocks=40, block_size=16, max_num_batched_tokens=32)
    w = Workload(arrival=[0.0, 0.0], prompt_len=[64, 8], output_len=[3, 30])
    kw = {"pd_link_latency_s": 2.5e-3, "pd_threshold_tokens": 20}
    sync = fleet(w, cfg, backend, **kw)
    rule = fleet(w, cfg.replace(async_scheduling=True), backend, **kw)
    assert list(sync.requests["prefill_replica"]) == list(rule.requests["prefill_replica"]) == [0, -1]
    for res, admitted, first in ((sync, 2, 5), (rule, 3, 7)):
        a = res.requests.row(0, named=True)
        assert a["ttft_prefill_s"] == pytest.approx(2e-3)
        # the read, admission to seen: 3 ms either way (seen at the end of the step it ends in)
        assert res.raw.load_wait_ps[0] == 3 * MS
        assert res.raw.first_scheduled[0] == first * MS
        assert res.raw.first_token[0] == (first + 1) * MS
        # the decode side's part: the wait to be admitted, then from the read seen to the first token
        assert a["ttft_decode_s"] == pytest.approx(((admitted - 2) + (first + 1) - (admitted + 3)) * 1e-3)
    assert list(rule.raw.first_token)[1] == list(sync.raw.first_token)[1] == MS  # (D: its own first step)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("latency_ms", [0.0, 2.5])
def test_an_empty_schedule_or_a_stall_observes_as_synchronous_scheduling(backend, latency_ms):
    """A prefill pool of 3 usable blocks: A (2 blocks) prefills in step 0 and finishes at 1 ms; B (2
    blocks, arrived with it) waits for A's blocks, which the decode replica's read frees at e = 1 ms +
    the latency. At 1 ms the prefill replica's schedule is empty (B does not fit, A is passed over at its
    limit) with step 0 in flight: vLLM waits for that step's output, which finishes A and applies what
    the read reported, then schedules again; with nothing to run it waits (a stall) until e. Either way the
    free is seen at e itself, as synchronously: B's prefill is first scheduled at e (1 ms, or 3.5 ms)."""
    cfg = kvsim.SimConfig(num_blocks=4, block_size=16, max_num_batched_tokens=64)
    w = Workload(arrival=[0.0, 0.0], prompt_len=[32, 32], output_len=[3, 3])
    e = 1e-3 + latency_ms * 1e-3
    for a in (None, True):
        res = fleet(w, cfg.replace(async_scheduling=a), backend, pd_link_latency_s=latency_ms * 1e-3)
        assert list(res.requests["prefill_replica"]) == [0, 0]
        assert res.requests["ttft_prefill_queue_s"].to_list() == pytest.approx([0.0, e])
    sync = fleet(w, cfg, backend, pd_link_latency_s=latency_ms * 1e-3)
    assert res.requests.equals(sync.requests)
    assert res.prefill_counters == sync.prefill_counters


@pytest.mark.parametrize("rule", [None, True])
def test_a_disaggregated_fleet_of_data_parallel_ranks_stays_refused_with_or_without_the_rule(rule):
    """The rule lifts no other refusal: a prefill pool beside DP ranks is refused by name either way
    (DESIGN.md §Data-parallel groups)."""
    with pytest.raises(
        InvalidArgumentError, match="a disaggregated fleet of data-parallel ranks is not modelled"
    ):
        kvsim.SimConfig(
            model="qwen3-30b-a3b",
            gpu="h100-80gb",
            data_parallel_size=2,
            replicas=2,
            prefill_replicas=1,
            async_scheduling=rule,
        )
