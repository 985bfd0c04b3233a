"""The CPU tier's run representations in the engine (DESIGN.md §CPU tier): a request's private chunks
offered as one run (`prepare_store_run`), kept as a run of slots (`Slots::Run`) and a run of accesses
(`Access::span`), and a never-admitted request's lookup that stops at its private chunks unprobed. These
only pay off (and can only go wrong) where requests own private chunks: prompts that quote no output
(deferred keys), one block a chunk, LRU, no store threshold. The workloads here aim there: many requests
sharing a few prefixes then private prompts and long outputs, tiny GPU pools that preempt (a re-admitted
request probes and loads its own private chunks), tiers from one chunk to more than the traffic, so that
runs are stored, completed, re-ranked at a finish, then partly evicted, pinned by loads and re-stored.
The Rust engine must decide exactly as the Python reference on each."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
from hypothesis import given

import kvsim
from kvsim.workloads import Workload
from tests.test_engine_differential import assert_same

PREFIXES = [(1, 8), (2, 20), (3, 3)]


@st.composite
def private_workloads(draw) -> Workload:
    """Requests that share a prefix (or none) then a private prompt, long outputs, bursts of arrivals;
    no prompt quotes an output (so their private chunks are named by their rows)."""
    n = draw(st.integers(1, 28))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.0005, 0.002, 0.05]), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 70), min_size=n, max_size=n))
    offsets, ids, lens = [0], [], []
    for i in range(n):
        prefix = draw(st.sampled_from([None, *PREFIXES, PREFIXES[1]]))
        if prefix is not None:
            ids.append(prefix[0])
            lens.append(prefix[1])
        ids.append(1000 + i)
        lens.append(draw(st.integers(1, 60)))
        offsets.append(len(ids))
    samples = draw(st.lists(st.sampled_from([1, 1, 1, 1, 2]), min_size=n, max_size=n))
    return Workload(
        arrival=np.cumsum(gaps),
        output_len=output,
        num_samples=samples,
        seg_offsets=offsets,
        segment_id=np.array(ids, dtype=np.uint64),
        segment_len=lens,
    )


@st.composite
def run_tier_configs(draw) -> kvsim.SimConfig:
    """Mostly the runs' case (one block a chunk, LRU, no threshold), tiny pools and tiers."""
    return kvsim.SimConfig(
        num_blocks=draw(st.integers(6, 40)),
        block_size=draw(st.sampled_from([1, 2, 4])),
        free_order=draw(st.sampled_from(["classic", "lifo_unhashed"])),
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.sampled_from([7, 32, 512])),
        chunked_prefill=draw(st.booleans()),
        admission_gate=draw(st.sampled_from(["none", "full-prompt"])),
        kv_offloading_chunks=draw(st.sampled_from([1, 2, 3, 5, 8, 13, 30, 80, 400])),
        kv_offloading_blocks_per_chunk=draw(st.sampled_from([1, 1, 1, 2])),
        kv_offloading_eviction_policy=draw(st.sampled_from(["lru", "lru", "lru", "arc"])),
        kv_offloading_store_threshold=draw(st.sampled_from([0, 0, 0, 2])),
        # (vLLM 0.33.0 counts every offer, 0.34.0 a key once per request)
        kv_offloading_store_threshold_count=draw(st.sampled_from(["per-offer", "per-request"])),
        kv_offloading_prompt_only=draw(st.sampled_from([False, False, True])),
        kv_offloading_ps_per_block=draw(st.sampled_from([0, 10**5, 10**8, 3 * 10**9])),
        kv_offloading_latency_ps=draw(st.sampled_from([0, 6 * 10**6, 2 * 10**9])),
    )


@given(private_workloads(), run_tier_configs(), st.sampled_from([0, 3]))
def test_private_runs_decide_as_the_reference(w, cfg, every):
    res = assert_same(w, cfg, every)
    s = res.summary
    assert set(res.requests["status"]) <= {"finished", "rejected"}
    assert 0 <= s["cpu_tier_peak_occupancy"] <= 1
    assert res.requests["cpu_hit_tokens"].sum() == s["cpu_hit_tokens"]


def test_a_preempted_request_reloads_its_private_chunks():
    """A request preempted after its private chunks were stored finds them in the tier when re-admitted
    (`admitted_before`: its lookup probes them), on both engines alike: the workload of long private
    prompts through a pool that holds one of them preempts, and the tier returns tokens."""
    n = 6
    w = Workload(
        arrival=[0.0] * n,
        output_len=[40] * n,
        seg_offsets=list(range(n + 1)),
        segment_id=np.array([1000 + i for i in range(n)], dtype=np.uint64),
        segment_len=[30] * n,
    )
    cfg = kvsim.SimConfig(
        num_blocks=40, block_size=2, max_num_seqs=4, max_num_batched_tokens=64, kv_offloading_chunks=200
    )
    res = assert_same(w, cfg)
    preempted = res.raw.num_preemptions > 0
    assert preempted.any()
    # Every prompt is private: the tier's hits are re-admitted requests' own chunks.
    assert res.requests["cpu_hit_tokens"].to_numpy()[preempted].sum() > 0


def test_a_held_request_rejected_after_its_load_finishes_its_tier_record():
    """Found by `test_private_runs_decide_as_the_reference` (minimised): request 5 loads a chunk of the
    shared prefix, then is rejected (41 prompt tokens, a step of 32, chunked prefill off). vLLM frees it
    as a finished request (`_free_request` -> the connector's `request_finished` ->
    `on_request_finished`), which re-ranks the chunk it read; the Rust engine did, the reference did not
    (so its LRU later evicted another chunk, and request 13 stored two chunks where Rust stored one)."""
    reqs = [
        (36, [(2, 20), (1003, 1)]),
        (28, [(2, 20), (1004, 1)]),
        (42, [(1005, 16)]),
        (6, [(1006, 1)]),
        (1, [(1007, 1)]),
        (1, [(2, 20), (1008, 21)]),
        (8, [(1010, 1)]),
        *((1, [(1015 + i, 1)]) for i in range(6)),
        (1, [(2, 10), (1021, 1)]),
    ]
    offsets, ids, lens = [0], [], []
    for _, segs in reqs:
        ids += [i for i, _ in segs]
        lens += [n for _, n in segs]
        offsets.append(len(ids))
    w = Workload(
        arrival=[0.0] * len(reqs),
        output_len=[o for o, _ in reqs],
        seg_offsets=offsets,
        segment_id=np.array(ids, dtype=np.uint64),
        segment_len=lens,
    )
    cfg = kvsim.SimConfig(
        num_blocks=19,
        block_size=4,
        max_num_seqs=2,
        max_num_batched_tokens=32,
        chunked_prefill=False,
        admission_gate="none",
        free_order="classic",
        kv_offloading_chunks=12,
        kv_offloading_prompt_only=False,
        kv_offloading_latency_ps=0,
    )
    res = assert_same(w, cfg, 1)
    row = res.requests.row(5, named=True)
    assert (row["status"], row["cpu_hit_tokens"]) == ("rejected", 4)
    assert res.events is not None
    stores = res.events.filter((res.events["request_id"] == 13) & (res.events["kind"] == "store"))
    # The chunk request 5 read re-ranked at its rejection outlives another: request 13 stores one
    # chunk of its two (the other is held), where without the finish it stored both.
    assert stores["count"].to_list() == [1]
