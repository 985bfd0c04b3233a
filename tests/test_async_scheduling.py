"""vLLM's asynchronous scheduling (`async_scheduling`, DESIGN.md §Engine, "Asynchronous scheduling"): both
engines agree on random workloads and configs with it on; hand-worked cases derived from vLLM's code
(`EngineCore.step_with_batch_queue`, `AsyncScheduler`, `Scheduler.schedule`'s running loop); refusals."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model.layers import Layer
from kvsim.workloads import Workload
from tests.test_engine_differential import assert_same, rooflines, workloads
from tests.test_hybrid_engine import STATE, toy
from tests.test_streaming import assert_stream_equals_whole

MS = 10**9  # ps; the default tick is 1 ms


@st.composite
def async_configs(draw) -> kvsim.SimConfig:
    """vLLM v1's rules (the knob's domain) with every other engine knob drawn, tiny pools included."""
    time = draw(st.sampled_from(["ticks", "linear", "roofline"]))
    linear = time == "linear"
    max_num_seqs = draw(st.integers(1, 8))
    cfg = kvsim.SimConfig(
        async_scheduling=True,
        num_blocks=draw(st.integers(2, 60)),
        block_size=draw(st.sampled_from([1, 2, 4, 16])),
        enable_prefix_caching=draw(st.booleans()),
        free_order=draw(st.sampled_from(["classic", "lifo_unhashed"])),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=draw(st.sampled_from([1, 7, 32, 100, 512])),
        chunked_prefill=draw(st.booleans()),
        admission_gate=draw(st.sampled_from(["none", "full-prompt"])),
        waiting_over_budget=draw(st.sampled_from(["stop", "skip"])),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1, 0.25])),
        watermark_rule=draw(st.sampled_from(["while-running", "always"])),
        max_model_len=draw(st.one_of(st.none(), st.integers(20, 300))),
        time_model="linear" if linear else "ticks",
        c0_ps=draw(st.integers(1, 10**9)) if linear else None,
        c_tok_ps=draw(st.integers(0, 10**6)) if linear else None,
        c_ctx_ps=draw(st.integers(0, 10**4)) if linear else None,
    )
    return cfg.with_roofline(draw(rooflines())) if time == "roofline" else cfg


@given(workloads(), async_configs(), st.sampled_from([0, 1, 3]))
def test_rust_engine_equals_reference_under_async_scheduling(w, cfg, every):
    res = assert_same(w, cfg, every)
    assert set(res.requests["status"]) <= {"finished", "rejected"}


@given(workloads(max_requests=40), st.integers(2, 12), st.sampled_from([1, 4, 16]), st.integers(1, 16))
def test_tiny_pools_preempt_finishers_in_flight_and_still_agree(w, num_blocks, block_size, seqs):
    # Pools this small preempt every step, the tail often a request whose last token is in flight.
    cfg = kvsim.SimConfig(
        num_blocks=num_blocks, block_size=block_size, max_num_seqs=seqs, async_scheduling=True
    )
    assert_same(w, cfg)


@given(workloads(), async_configs())
def test_async_scheduling_takes_no_token_off_a_request(w, cfg):
    """Placeholders change when the scheduler learns of a token, never which tokens a request gets: a
    request finished both ways has the same tokens. Which requests are preempted can differ (finishers hold
    their blocks a step longer), and with it whether a preempted request's recomputation still fits: a
    request ends differently only if the run that rejected it had preempted it, for a recomputation over
    the budget (reason 4) or the pool (5)."""
    sync = kvsim.simulate(w, cfg.replace(async_scheduling=False), backend="reference").raw
    asyn = kvsim.simulate(w, cfg, backend="reference").raw
    both = (sync.status == 0) & (asyn.status == 0)
    np.testing.assert_array_equal(asyn.generated[both], sync.generated[both])
    for i in np.flatnonzero(asyn.status != sync.status):
        rejecting = asyn if asyn.status[i] == 1 else sync
        assert rejecting.num_preemptions[i] > 0, i
        assert rejecting.reject_reason[i] in (4, 5), i


def _four() -> Workload:
    # A (prompt 10, 3 tokens, max 3), B (20, 2 of max 5: stops early), C (5, 4, max 4), D (8, 2, max 2).
    return Workload(
        arrival=np.array([0.0, 0.0005, 0.0015, 0.0031]),
        output_len=[3, 2, 4, 2],
        max_tokens=[3, 5, 4, 2],
        seg_offsets=[0, 1, 2, 3, 4],
        segment_id=np.array([1, 2, 3, 4], dtype=np.uint64),
        segment_len=[10, 20, 5, 8],
    )


@pytest.mark.parametrize("backend", ["reference", "rust"])
def test_arrivals_join_the_step_after_the_next(backend):
    """Ticks of 1 ms, a pool that never binds. vLLM's loop schedules batch j when batch j − 1 starts,
    with what `_process_input_queue` took in by then, and learns batch j − 1's tokens after it:

    - step 0 (scheduled at 0, the idle engine's wake-up): A's prompt (10);
    - step 1 (scheduled at 0 while step 0 runs): A's decode (placeholder): 1;
    - step 2 (scheduled at 1): A's decode, B's prompt (arrived 0.5): 21; A samples its 3rd token at 3;
    - step 3 (scheduled at 2): A finished in step 2 at its max_tokens (computed + 2 − placeholders =
      prompt + max_tokens): passed over; B's decode, C's prompt (arrived 1.5): 6; B's 2nd token at 4;
    - step 4 (scheduled at 3; D arrives at 3.1, too late): B stopped before its max_tokens (5), which
      vLLM cannot know: one more token, discarded; C's decode: 2;
    - step 5 (scheduled at 4): C's decode, D's prompt: 9;
    - step 6 (scheduled at 5): C's and D's decodes: 2; both reach their max_tokens at 7;
    - step 7 (scheduled at 6): both passed over, an empty batch: nothing left at 7.

    Synchronous: B, C and D are scheduled at the first step starting after they arrive (1, 2, 4)."""
    w = _four()
    cfg = kvsim.SimConfig(num_blocks=40, block_size=4, max_num_seqs=4)
    sync = kvsim.simulate(w, cfg, backend=backend).raw
    asyn = kvsim.simulate(w, cfg.replace(async_scheduling=True), backend=backend).raw
    assert list(sync.first_scheduled) == [0, MS, 2 * MS, 4 * MS]
    assert list(asyn.first_scheduled) == [0, 2 * MS, 3 * MS, 5 * MS]
    assert list(asyn.first_token) == [MS, 3 * MS, 4 * MS, 6 * MS]
    assert list(asyn.finish) == [3 * MS, 4 * MS, 7 * MS, 7 * MS]
    assert list(asyn.generated) == [3, 2, 4, 2]
    assert asyn.counters["num_steps"] == 7
    assert asyn.counters["sum_batched_tokens"] == 10 + 1 + 21 + 6 + 2 + 9 + 2
    # (synchronous: A 10 | A, B 20 | A, B, C 5 | C | C, D 8 | C, D)
    assert sync.counters["sum_batched_tokens"] == 10 + 21 + 7 + 1 + 9 + 2


@pytest.mark.parametrize("backend", ["reference", "rust"])
@pytest.mark.parametrize("a_max", [2, 5])
def test_a_finished_request_frees_its_seat_a_step_later(backend, a_max):
    """max_num_seqs 2, all arriving at 0: C (prompt 4, 10 tokens), A (4, 2 tokens), B (4, 1 token).
    Synchronous: A's 2nd token ends step 1 at 2 and frees its seat, so B's prompt runs in step 2 (at 2).
    Asynchronous: step 2 is scheduled at 1, while A's last token is in flight: A keeps its seat (vLLM frees
    it in `update_from_output` of step 1, after step 2's `schedule()`), B waits, and step 3 (scheduled at
    2) takes B in: B at 3, its token at 4. With A's max_tokens 2 vLLM passes A over in step 2; with 5 it
    cannot know A is done and schedules it one discarded token, one batched token more."""
    w = Workload(
        arrival=[0.0, 0.0, 0.0],
        prompt_len=[4, 4, 4],
        output_len=[10, 2, 1],
        max_tokens=[10, a_max, 1],
    )
    cfg = kvsim.SimConfig(num_blocks=40, block_size=4, max_num_seqs=2)
    sync = kvsim.simulate(w, cfg, backend=backend).raw
    asyn = kvsim.simulate(w, cfg.replace(async_scheduling=True), backend=backend).raw
    assert list(sync.first_scheduled) == [0, 0, 2 * MS]
    assert list(sync.finish) == [10 * MS, 2 * MS, 3 * MS]
    assert list(asyn.first_scheduled) == [0, 0, 3 * MS]
    assert list(asyn.finish) == [10 * MS, 2 * MS, 4 * MS]
    # C decodes in every step 1-9; A's prompt and 1 decode; B's prompt; A's discarded token if max 5.
    assert asyn.counters["sum_batched_tokens"] == 4 + 9 + 4 + 1 + 4 + (a_max == 5)
    assert sync.counters["sum_batched_tokens"] == 4 + 9 + 4 + 1 + 4


@pytest.mark.parametrize("backend", ["reference", "rust"])
def test_an_empty_batch_schedules_again_when_the_step_in_flight_ends(backend):
    """One request at a time (max_num_seqs 1): A (prompt 4, 2 tokens, max 2), B (4, 1) at 0. Step 2,
    scheduled at 1, has nothing (A is passed over and holds the seat): vLLM queues the empty batch,
    waits for step 1 (A frees its seat at 2) and schedules at 2, so B runs at 2 as synchronous."""
    w = Workload(arrival=[0.0, 0.0], prompt_len=[4, 4], output_len=[2, 1], max_tokens=[2, 1])
    cfg = kvsim.SimConfig(num_blocks=40, block_size=4, max_num_seqs=1, async_scheduling=True)
    raw = kvsim.simulate(w, cfg, backend=backend).raw
    assert list(raw.first_scheduled) == [0, 2 * MS]
    assert list(raw.finish) == [2 * MS, 3 * MS]
    assert raw.counters["num_steps"] == 3


def test_the_knob_is_off_by_default_and_refused_where_not_modelled():
    assert (
        kvsim.SimConfig(num_blocks=100).async_scheduling is None
    )  # (vLLM's default deployment: synchronous)
    for knobs, named in (
        ({"policy": "orca-max", "max_model_len": 200}, "policy 'orca-max'"),
        ({"preemption": "swap", "cpu_blocks": 4}, "preemption 'swap'"),
        ({"sampling": "fork-cow"}, "sampling 'fork-cow'"),
        ({"append_check": "one-free-block"}, "append_check 'one-free-block'"),
    ):
        with pytest.raises(InvalidArgumentError, match="async_scheduling") as err:
            kvsim.SimConfig(num_blocks=100, async_scheduling=True, **knobs)
        assert named in str(err.value)
    # A CPU tier takes it on one full-attention group (tests/test_offload_async_golden.py) and beside a
    # hybrid model's KV-cache groups (tests/test_offload_hybrid_async_golden.py).
    assert kvsim.SimConfig(num_blocks=100, async_scheduling=True, kv_offloading_chunks=4).async_scheduling
    # (a hybrid model takes it, Mamba groups in align mode included: tests/test_async_hybrid.py)
    ssm = toy([Layer("mamba", state=STATE), Layer("full")], "ssm")
    assert kvsim.SimConfig(model=ssm, num_blocks=200, block_size=16, async_scheduling=True).async_scheduling
    tiered = kvsim.SimConfig(
        model=ssm, num_blocks=200, block_size=16, async_scheduling=True, kv_offloading_chunks=4
    )
    assert tiered.async_scheduling
    # (a disaggregated fleet takes it: tests/test_pd_async.py)
    pd = kvsim.SimConfig(num_blocks=100, async_scheduling=True, replicas=2, prefill_replicas=1)
    assert pd.async_scheduling


@given(workloads(max_requests=30), async_configs(), st.integers(1, 31))
def test_chunked_runs_equal_whole_runs_under_async_scheduling(w, cfg, size):
    # A stream's engine pauses where a later row could join a step; the rule's earlier join must not move it.
    assert_stream_equals_whole(w, cfg, size)


@pytest.mark.parametrize("size", [1, 2])
def test_a_stream_paused_behind_a_step_in_flight_keeps_its_arrivals(size):
    """Ticks of 1 ms. A (prompt 4, 2 tokens of max 10) is scheduled at 0 and 1 and its discarded token at
    2; R (arrived 1.5, its prompt reaching max_model_len) joins the step at 2's schedule and is rejected,
    and nothing runs or waits behind the step in flight (2 to 3). Q (arrived 2) joins the step at 3, which
    was scheduled when the step at 2 started; Q2 (arrived 2.5) the step at 4. A stream cut after R pauses
    there with more input to come: the Rust engine took the arrivals up to the step's end (3) before
    pausing, where the reference's `advance` pauses first, so Q2 joined the step at 3 in the Rust stream
    alone (chunks of 1 and 2), unlike the whole run."""
    w = Workload(
        arrival=np.array([0.0, 0.0015, 0.002, 0.0025]),
        prompt_len=np.array([4, 8, 4, 4]),
        output_len=np.array([2, 2, 3, 3]),
        max_tokens=np.array([10, 10, 10, 10]),
    )
    cfg = kvsim.SimConfig(async_scheduling=True, num_blocks=100, block_size=4, max_model_len=8)
    whole = kvsim.simulate(w, cfg, backend="rust").raw
    assert list(whole.status) == [0, 1, 0, 0]  # (R rejected)
    assert list(whole.first_scheduled[[0, 2, 3]]) == [0, 3 * MS, 4 * MS]
    assert_stream_equals_whole(w, cfg, size)
