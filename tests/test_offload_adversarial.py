"""An adversarial differential pass at the Rust CPU tier's fast paths (DESIGN.md §CPU tier, "Speed"): a
request's one-run record kept by its row (`Chunks::recs`, the rows' window) and promoted when anything else
touches it, the engine's `TierHot` (the pending flag, admissions noting `touched` blocks only while a fence
may be made, the stall), `tier_has_nothing_for` (a never-admitted request whose first chunk is private
skips the lookup), and the lazy occupancy (`flush_occupancy`). The Python reference is the spec: the
Rust engine must decide exactly as it (every column, counter, event, the summary), alone, fed in chunks
and in fleets. The workloads mix what those paths assume apart: shared prefixes shorter than a chunk,
repeated private prompts, prompts quoting earlier outputs (deferred keys), several samples, tiny pools
that preempt, tiers of one chunk and up, write-through tiers (fences), idle gaps longer than any transfer
and transfers longer than any gap."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

import kvsim
from kvsim.model.segments import output_id
from kvsim.workloads import Workload
from tests.test_engine_differential import assert_same

# (segment id, tokens): shorter than a chunk of most configs, one block, several chunks.
PREFIXES = [(1, 3), (2, 20), (3, 5), (4, 1), (5, 33)]
GAPS = [0.0, 0.0, 0.0, 0.0005, 0.002, 0.05, 0.4, 3.0]


@st.composite
def tier_workloads(draw, max_requests: int = 24, quotes: bool = True) -> Workload:
    n = draw(st.integers(1, max_requests))
    gaps = draw(st.lists(st.sampled_from(GAPS), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    quotes = (
        quotes and draw(st.integers(0, 3)) == 0
    )  # any quote turns deferred keys (and the private paths) off
    offsets, ids, lens = [0], [], []
    for i in range(n):
        # zero to two shared prefixes, stacked (a prefix of a prefix, or two in a row)
        for _ in range(draw(st.integers(0, 2))):
            seg = draw(st.sampled_from(PREFIXES))
            ids.append(seg[0])
            lens.append(seg[1])
        if quotes and i > 0 and draw(st.integers(0, 3)) == 0:
            j = draw(st.integers(0, i - 1))  # quote an earlier answer: deferred keys
            ids.append(output_id(j))
            lens.append(draw(st.integers(1, output[j])))
        if i > 0 and draw(st.integers(0, 4)) == 0:
            # an earlier request's private prompt again (a repeat: its "private" chunks shared)
            j = draw(st.integers(0, i - 1))
            ids.append(1000 + j)
            lens.append(draw(st.integers(1, 40)))
        else:
            ids.append(1000 + i)
            lens.append(draw(st.integers(1, 50)))
        offsets.append(len(ids))
    samples = draw(st.lists(st.sampled_from([1, 1, 1, 1, 2, 3]), min_size=n, max_size=n))
    return Workload(
        arrival=np.cumsum(gaps),
        output_len=output,
        num_samples=samples,
        seg_offsets=offsets,
        segment_id=np.array(ids, dtype=np.uint64),
        segment_len=lens,
    )


@st.composite
def tier_configs(draw) -> kvsim.SimConfig:
    linear = draw(st.booleans())
    return kvsim.SimConfig(
        num_blocks=draw(st.integers(5, 50)),
        block_size=draw(st.sampled_from([1, 2, 4, 8])),
        free_order=draw(st.sampled_from(["classic", "lifo_unhashed"])),
        max_num_seqs=draw(st.integers(1, 6)),
        max_num_batched_tokens=draw(st.sampled_from([3, 7, 16, 32, 512])),
        chunked_prefill=draw(st.booleans()),
        admission_gate=draw(st.sampled_from(["none", "full-prompt"])),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1])),
        max_model_len=draw(st.one_of(st.none(), st.integers(40, 200))),
        time_model="linear" if linear else "ticks",
        c0_ps=draw(st.integers(1, 10**9)) if linear else None,
        c_tok_ps=draw(st.integers(0, 10**6)) if linear else None,
        c_ctx_ps=draw(st.integers(0, 10**4)) if linear else None,
        kv_offloading_chunks=draw(st.sampled_from([1, 2, 3, 4, 6, 9, 16, 40, 500])),
        kv_offloading_blocks_per_chunk=draw(st.sampled_from([1, 1, 2, 3, 4])),
        kv_offloading_eviction_policy=draw(st.sampled_from(["lru", "lru", "arc"])),
        kv_offloading_store_threshold=draw(st.sampled_from([0, 0, 0, 2])),
        kv_offloading_prompt_only=draw(st.booleans()),
        kv_offloading_ps_per_block=draw(st.sampled_from([0, 10**5, 10**8, 3 * 10**9, 10**11])),
        kv_offloading_latency_ps=draw(st.sampled_from([0, 6 * 10**6, 2 * 10**9, 5 * 10**11])),
    )


TIER_COUNTERS = ("stores", "stored_blocks", "loads", "loaded_blocks", "flushes", "stores_failed")


@settings(deadline=None)
@given(tier_workloads(), tier_configs(), st.sampled_from([0, 0, 1, 2]))
def test_the_tiers_fast_paths_decide_as_the_reference(w, cfg, every):
    res = assert_same(w, cfg, every)
    s = res.summary
    assert 0 <= s["cpu_tier_peak_occupancy"] <= 1
    # (time-weighted over busy time: none without any, DESIGN.md §Metrics; steps may last 0 ps in `linear`)
    assert (s["cpu_tier_occupancy"] is None) == (res.raw.counters["busy_ps"] == 0)
    if s["cpu_tier_occupancy"] is not None:
        assert 0 <= s["cpu_tier_occupancy"] <= s["cpu_tier_peak_occupancy"]
    assert res.requests["cpu_hit_tokens"].sum() == s["cpu_hit_tokens"]


@settings(deadline=None)
@given(tier_workloads(max_requests=30), tier_configs(), st.integers(1, 7))
def test_a_tier_fed_in_chunks_keeps_its_occupancy(w, cfg, size):
    """Fed a few rows at a time, the run pauses at each chunk's end (the occupancy flushed there) and
    must weigh its occupancy as the whole run does, on both engines."""
    from kvsim.engine.streaming import chunks, simulate_stream

    whole = kvsim.simulate(w, cfg, backend="reference")
    for backend in ("rust", "reference"):
        res = simulate_stream(chunks(w, size), cfg, backend=backend, rows="memory")
        assert res.raw.counters == whole.raw.counters, backend
        assert res.summary == whole.summary, backend
        assert res.requests is not None
        assert res.requests.equals(whole.requests, null_equal=True), backend


@settings(deadline=None)
@given(
    tier_workloads(max_requests=30),
    tier_configs(),
    st.integers(2, 4),
    st.sampled_from(["round-robin", "least-loaded", "least-kv", "prefix-affinity", "random"]),
    st.sampled_from([0.0, 0.0, 0.001, 0.05]),
)
def test_fleets_of_tiers_pausing_at_horizons_agree(w, cfg, replicas, router, refresh):
    """Stepped replicas pause at the router's horizons (the occupancy flushed, the stall carried across)."""
    args = {"replicas": replicas, "router": router, "router_refresh_s": refresh}
    ref = kvsim.simulate_cluster(w, cfg, backend="reference", **args)
    rust = kvsim.simulate_cluster(w, cfg, backend="rust", **args)
    np.testing.assert_array_equal(rust.replica, ref.replica)
    assert [r.raw.counters for r in rust.replicas] == [r.raw.counters for r in ref.replicas]
    assert rust.raw.counters == ref.raw.counters
    assert rust.requests.equals(ref.requests, null_equal=True)
    assert rust.summary == ref.summary
    for a, b in zip(rust.replicas, ref.replicas, strict=True):
        assert a.summary == b.summary


@settings(deadline=None)
@given(tier_workloads(max_requests=30, quotes=False), tier_configs(), st.integers(1, 7))
def test_independent_chunks_skip_the_lookup_as_the_reference_looks_up(w, cfg, size):
    """Chunks that share nothing (each chunk's segment ids its own) streamed with `independent_chunks`:
    the Rust engine defers keys and admits a never-admitted request whose first chunk is private without
    a tier lookup (`tier_has_nothing_for`); the reference, fed the same chunks, looks it up."""
    from kvsim.engine.streaming import simulate_stream

    rows = np.arange(len(w))
    chunk_of = rows // size
    ids = w.segment_id.copy()
    for r in rows:
        lo, hi = w.seg_offsets[r], w.seg_offsets[r + 1]
        ids[lo:hi] += np.uint64(int(chunk_of[r]) << 32)
    w = Workload(
        arrival=w.arrival,
        output_len=w.output_len,
        num_samples=w.num_samples,
        seg_offsets=w.seg_offsets,
        segment_id=ids,
        segment_len=w.segment_len,
    )
    parts = [w[lo : lo + size] for lo in range(0, len(w), size)]
    whole = kvsim.simulate(w, cfg, backend="reference")
    for backend in ("rust", "reference"):
        res = simulate_stream(parts, cfg, backend=backend, rows="memory", independent_chunks=True)
        assert res.raw.counters == whole.raw.counters, backend
        assert res.summary == whole.summary, backend
        assert res.requests is not None
        assert res.requests.equals(whole.requests, null_equal=True), backend


def test_no_quiet_span_starts_before_a_finished_requests_last_offer():
    """Found by this file's independent-chunks test (seed 7): a request finishing with chunks left to
    offer (a store threshold of 2 had skipped them) is offered at the next step; the Rust engine's quiet
    spans (steps taken together, which offer nothing) started right after the finish and put that offer
    two steps late, so the tier held 2 chunks fewer for 2 steps of 1 ps (`w_cpu_chunks` 24000024 against
    the reference's 24000028, then; 24000030 since a flushing step computes after its wait, DESIGN.md §CPU
    tier, "Time") and the event log named steps 97 for the reference's 95."""
    w = Workload(
        arrival=np.array([0.0] * 5 + [0.0005] * 7),
        output_len=np.array([1, 3, 1, 36, 32, 1, 1, 1, 1, 1, 1, 1]),
        num_samples=np.array([2, 3] + [1] * 10),
        seg_offsets=np.array([0, 1, 2, 5, 8, 10, 11, 12, 13, 14, 15, 16, 17]),
        segment_id=np.array(
            [
                1000,
                1001,
                1,
                2,
                1002,
                4294967301,
                4294967298,
                4294968299,
                4294967301,
                4294968296,
                4294968296,
                8589935592,
                8589935599,
                8589935600,
                12884902897,
                12884902898,
                12884902899,
            ],
            dtype=np.uint64,
        ),
        segment_len=np.array([16, 31, 3, 20, 1, 33, 20, 36, 33] + [1] * 8),
    )
    cfg = kvsim.SimConfig(
        num_blocks=34,
        block_size=8,
        free_order="classic",
        kv_offloading_chunks=4,
        kv_offloading_store_threshold=2,
        kv_offloading_ps_per_block=0,
        kv_offloading_latency_ps=6_000_000,
        max_num_seqs=2,
        max_num_batched_tokens=3,
        chunked_prefill=True,
        time_model="linear",
        c0_ps=1,
        c_tok_ps=0,
        c_ctx_ps=0,
    )
    rust = kvsim.simulate(w, cfg, backend="rust", record_events=True)
    ref = kvsim.simulate(w, cfg, backend="reference", record_events=True)
    assert rust.raw.counters["w_cpu_chunks"] == ref.raw.counters["w_cpu_chunks"] == 24000030
    assert rust.events.rows() == ref.events.rows()
    assert_same(w, cfg)
