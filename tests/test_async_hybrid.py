"""Asynchronous scheduling for a hybrid model (DESIGN.md §Engine, "Asynchronous scheduling", "A hybrid
model's windows free a step later" and "A hybrid pool keys what has arrived"): both engines agree on random
hybrid layouts (Mamba groups in align mode included), workloads and tiny pools with the rule on; cases worked
by hand from vLLM 0.33.0's `KVCacheManager.allocate_slots` (its `remove_skipped_blocks` on
`num_computed_tokens - num_in_flight_tokens`, its keys capped at `request.num_tokens`) and
`Scheduler.update_from_output` (`cache_blocks` when a step's sampled token arrives)."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

import kvsim
from kvsim.engine.cluster import router_spec
from kvsim.model.layers import Layer, MambaState
from kvsim.model.segments import output_id
from kvsim.workloads import Workload
from tests.test_dp_groups import assert_backends_agree
from tests.test_engine_differential import assert_same, workloads
from tests.test_hybrid_engine import hybrid_configs, toy
from tests.test_streaming import assert_stream_equals_whole


def asynchronous(cfg: kvsim.SimConfig) -> kvsim.SimConfig:
    """`cfg` with the rule on (Mamba groups in align mode included)."""
    return cfg.replace(async_scheduling=True)


@given(workloads(), hybrid_configs(), st.sampled_from([0, 1, 3]))
def test_rust_engine_equals_reference_on_hybrid_layouts_under_async_scheduling(w, cfg, every):
    res = assert_same(w, asynchronous(cfg), every)
    assert set(res.requests["status"]) <= {"finished", "rejected"}


@given(
    workloads(max_requests=40),
    hybrid_configs(),
    st.integers(2, 14),
    st.integers(1, 16),
)
def test_tiny_hybrid_pools_preempt_under_async_scheduling_and_still_agree(w, cfg, num_blocks, seqs):
    # Pools this small preempt every step, windows' blocks held a step longer among what they weigh.
    assert_same(w, asynchronous(cfg.replace(num_blocks=num_blocks, max_num_seqs=seqs)))


@given(w=workloads(max_requests=30), base=hybrid_configs(), data=st.data())
def test_hybrid_fleets_and_groups_agree_under_async_scheduling(w, base, data):
    """Replicas of a hybrid model behind a router reading their state, or data-parallel groups of two
    ranks: each rank frees its windows on its own step in flight."""
    cfg = asynchronous(base)
    router = data.draw(st.sampled_from(["round-robin", "least-kv", "prefix-affinity"]))
    group = data.draw(st.sampled_from([1, 2]))
    spec = dataclasses.replace(router_spec(cfg), name=router, dp_group=group)
    assert_backends_agree(w, [cfg] * 2, spec, group)


@given(workloads(max_requests=30), hybrid_configs(), st.integers(1, 31))
def test_chunked_hybrid_runs_equal_whole_runs_under_async_scheduling(w, cfg, size):
    # A stream's engine pauses between chunks; each sequence's tokens in flight must survive the pause.
    assert_stream_equals_whole(w, asynchronous(cfg), size)


SWA = toy([Layer("sliding_window", 32), Layer("full")], "swa")
LOCAL = toy([Layer("chunked_local", 64), Layer("full")], "local")


def _window_frees(model, budget: int, async_scheduling: bool, backend: str) -> tuple[list, dict]:
    cfg = kvsim.SimConfig(
        model=model,
        num_blocks=200,
        block_size=16,
        max_num_batched_tokens=budget,
        async_scheduling=async_scheduling,
    )
    w = Workload(arrival=[0.0], prompt_len=[400], output_len=[40])
    res = kvsim.simulate(w, cfg, backend=backend, record_events=True)
    ev = res.events
    window = ev.filter(ev["kind"] == "window")
    return window.group_by("step").len().sort("step").rows(), res.summary


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_window_frees_its_prompt_blocks_a_step_later(backend):
    """One 400-token prompt in one step on a sliding window of 32 (and a full group), block 16, as
    tests/test_hybrid_engine.py's window case. Synchronous: step 1's allocation (c = 400) frees
    `(400 - 31) // 16` = 23 window blocks before it takes block 25, so the window group holds 25 at most.
    vLLM 0.33.0 under `AsyncScheduler`: step 1 is scheduled while step 0 runs; `_update_after_schedule`
    made `num_computed_tokens` and `num_in_flight_tokens` 400, so `allocate_slots` frees on
    `max(0, 400 - 400)` = 0 tokens: nothing, and block 25 joins the 25 prompt blocks (26 held). Step 2
    (c = 401, step 1's token in flight) frees on 400 tokens: the 23. Each later free comes a step later too
    (the window's tail crosses block 23 at c = 415 - synchronous step 16 - and block 24 at c = 431)."""
    sync, s_sum = _window_frees(SWA, 512, False, backend)
    asyn, a_sum = _window_frees(SWA, 512, True, backend)
    assert sync == [(1, 23), (16, 1), (32, 1)]
    assert asyn == [(2, 23), (17, 1), (33, 1)]
    assert s_sum["peak_group_blocks_0"] == 25
    assert a_sum["peak_group_blocks_0"] == 26
    assert s_sum["peak_group_blocks_1"] == a_sum["peak_group_blocks_1"] == 28  # full attention: every block
    assert s_sum["num_steps"] == a_sum["num_steps"] == 40


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_prefill_chunks_free_on_the_chunk_before_the_last(backend):
    """The same prompt in chunks of 100 (budget 100). Synchronous: the allocation of chunk k + 1 frees on
    chunk k's end: 100 -> (100 - 31) // 16 = 4 blocks, 200 -> 10 (6 more), 300 -> 16 (6), then the first
    decode on 400 -> 23 (7). Under vLLM's rule the allocation of chunk k + 1 has chunk k in flight and
    frees on chunk k - 1's end: nothing at step 1, then 4, 6, 6, 7 at steps 2-5; the window group holds
    the blocks of three chunks where synchronous scheduling holds two's."""
    sync, s_sum = _window_frees(SWA, 100, False, backend)
    asyn, a_sum = _window_frees(SWA, 100, True, backend)
    assert sync[:4] == [(1, 4), (2, 6), (3, 6), (4, 7)]
    assert asyn == [(step + 1, n) for step, n in sync]
    assert (s_sum["peak_group_blocks_0"], a_sum["peak_group_blocks_0"]) == (9, 15)


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_local_chunks_leave_a_step_later(backend):
    """Chunked local attention of 64 tokens, block 16: `get_num_skipped_tokens(c)` = 64 floor(c / 64).
    Synchronous: step 1 (c = 400) frees the 24 blocks of tokens below 384; a decode then frees the chunk
    of 384-447 only past 448, which 440 tokens never reach. Asynchronous: step 1 frees on 0 tokens, step 2
    on 400: the same 24 a step later."""
    sync, s_sum = _window_frees(LOCAL, 512, False, backend)
    asyn, a_sum = _window_frees(LOCAL, 512, True, backend)
    assert sync == [(1, 24)]
    assert asyn == [(2, 24)]
    assert (s_sum["peak_group_blocks_0"], a_sum["peak_group_blocks_0"]) == (25, 26)


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_finisher_s_window_and_a_schedule_made_again_after_an_empty_batch(backend):
    """max_num_seqs 1, both at 0: A (prompt 400, 2 tokens, max 2), B (prompt 400, 3 tokens). A prefills
    at step 0; its last token (step 1) is scheduled while step 0 runs, 400 tokens in flight, so that
    allocation frees nothing, and A never allocates again: its windows keep all 26 blocks until it is
    freed (synchronous: 23 leave at step 1). Step 2's schedule (at 1 ms) passes A over and has no seat for
    B: an empty batch; vLLM waits for step 1's outputs and schedules again at 2 ms with nothing in flight:
    B's prompt (one step). B's first decode is scheduled while that step runs (400 in flight: nothing
    freed), its second on 400 tokens: 23 blocks, two steps after its admission."""
    cfg = kvsim.SimConfig(
        model=SWA,
        num_blocks=200,
        block_size=16,
        max_num_seqs=1,
        max_num_batched_tokens=512,
        async_scheduling=True,
    )
    w = Workload(arrival=[0.0, 0.0], prompt_len=[400, 400], output_len=[2, 3], max_tokens=[2, 3])
    res = kvsim.simulate(w, cfg, backend=backend, record_events=True)
    ev = res.events
    window = ev.filter(ev["kind"] == "window")
    assert window.filter(window["request_id"] == 0).height == 0
    a_frees = ev.filter((ev["kind"] == "free") & (ev["request_id"] == 0) & (ev["count"] == 0))
    assert a_frees.height == 26
    assert list(res.raw.first_scheduled) == [0, 2 * 10**9]
    b = window.filter(window["request_id"] == 1)
    assert b.group_by("step").len().rows() == [(4, 23)]
    sync = kvsim.simulate(w, cfg.replace(async_scheduling=False), backend=backend, record_events=True).events
    a_sync = sync.filter((sync["kind"] == "window") & (sync["request_id"] == 0))
    assert a_sync.group_by("step").len().rows() == [(1, 23)]


def test_mamba_groups_with_prefix_caching_take_the_rule():
    """vLLM's align mode (prefix caching on a Mamba hybrid) takes the rule, with a CPU tier beside its groups
    too (tests/test_offload_hybrid_async_golden.py), and behind a prefill pool (DESIGN.md §Engine, "P/D under
    the rule"), both engines alike."""
    state = MambaState(conv_channels=64, conv_width=3, ssm_heads=4, ssm_per_head=208)
    model = toy([Layer("mamba", state=state), Layer("full")], "ssm")
    cfg = kvsim.SimConfig(model=model, num_blocks=200, block_size=16, enable_prefix_caching=True)
    assert cfg.pool.layout.mamba_align
    on = cfg.replace(async_scheduling=True)
    w = Workload(arrival=[0.0, 0.0, 0.002], prompt_len=[50, 70, 90], output_len=[5, 4, 6])
    assert_same(w, on)
    tiered = on.replace(kv_offloading_chunks=4)
    res = assert_same(w, tiered)
    assert res.summary["stores"] > 0
    pd = {"replicas": 2, "prefill_replicas": 1, "pd_link_ps_per_block": 10**6}
    fleets = [kvsim.simulate_cluster(w, on, backend=b, **pd) for b in ("reference", "rust")]
    assert fleets[0].requests.equals(fleets[1].requests, null_equal=True)
    assert fleets[0].prefill_counters == fleets[1].prefill_counters
    assert fleets[0].summary["pd_transfers"] == 3


WIDE = toy([Layer("sliding_window", 4096), Layer("full")], "wide-window")


def _quoting(arrival: float, output_len: int) -> tuple[kvsim.SimConfig, Workload]:
    """A (a 30-token prompt, `output_len` tokens, stopping at its limit) at 0, B at `arrival` quoting A's
    prompt and its first two output tokens (32 tokens: two blocks of 16) before 10 of its own. A window
    wider than any prompt beside full attention, every block keyed (retention None): both groups key and
    hit as full attention does."""
    cfg = kvsim.SimConfig(
        model=WIDE, num_blocks=100, block_size=16, async_scheduling=True, prefix_cache_retention_interval=None
    )
    w = Workload(
        arrival=[0.0, arrival],
        output_len=[output_len, 3],
        max_tokens=[output_len, 3],
        seg_offsets=[0, 1, 4],
        segment_id=np.array([1, 1, output_id(0), 2], dtype=np.uint64),
        segment_len=[30, 30, 2, 10],
    )
    return cfg, w


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_decode_s_block_is_keyed_once_its_token_arrives(backend):
    """Ticks of 1 ms. A prefills at step 0 (sampling its output 0, token 30), computes token 30 at step 1
    (sampling token 31) and token 31 at step 2: block 1 (tokens 16-31) is full with step 2. vLLM 0.33.0
    under `AsyncScheduler`: step 2 is scheduled at 1 ms, while step 1 runs, so A's `request.num_tokens` is
    31 (token 31 has not come back) and `allocate_slots` keys up to min(32, 31) tokens: block 1 stays
    unkeyed; step 3's schedule (at 2 ms) keys it (min(33, 32)), in the running phase, before the waiting
    one. So B arriving at 1 ms (scheduled into step 2) hits 16 tokens, and at 2 ms (step 3) 32; kvsim keyed
    block 1 at step 2's allocation before this rule, 32 either way."""
    for arrival, hit, start in ((0.001, 16, 2), (0.002, 32, 3)):
        cfg, w = _quoting(arrival, 20)
        res = kvsim.simulate(w, cfg, backend=backend)
        assert res.requests["cached_tokens"].to_list() == [0, hit]
        assert list(res.raw.first_scheduled) == [0, start * 10**9]


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_finisher_keys_its_last_block_before_it_is_freed(backend):
    """A stops at its limit of 3 tokens: step 2 computes token 31 (block 1 full) and samples its last. That
    allocation keys up to 31 tokens (token 31 in flight, as above); step 3's schedule passes A over (no
    allocation), and step 2's output arriving after it runs `update_from_output`'s `cache_blocks` at
    `num_computed_tokens - num_in_flight_tokens` = 32 before A is freed: block 1 goes back keyed, and B (at
    10 ms, A long gone) hits 32 tokens. Without that key, block 1 would be freed unkeyed and B hit 16."""
    cfg, w = _quoting(0.01, 3)
    res = kvsim.simulate(w, cfg, backend=backend)
    assert res.requests["cached_tokens"].to_list() == [0, 32]
    assert list(res.raw.finish) == [3 * 10**9, 13 * 10**9]
