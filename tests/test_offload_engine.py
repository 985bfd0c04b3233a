"""The CPU tier in the engines (DESIGN.md §CPU tier): the Rust engine and the Python reference agree
exactly on random tier sizes, chunk sizes, eviction policies, store thresholds, link times and traffic
(alone and in fleets, scheduling synchronously or asynchronously), and the tier's rules hold as properties: a request whose prefix the tier holds
waits for its load, and nothing else; the tier off is today's engine; occupancy stays within the tier."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.workloads import Workload, synthetic
from tests.test_engine_differential import assert_same, workloads


@st.composite
def tier_configs(draw) -> kvsim.SimConfig:
    linear = draw(st.booleans())
    budget = draw(st.sampled_from([7, 32, 100, 512]))
    return kvsim.SimConfig(
        num_blocks=draw(st.integers(4, 60)),
        block_size=draw(st.sampled_from([1, 2, 4, 16])),
        free_order=draw(st.sampled_from(["classic", "lifo_unhashed"])),
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=budget,
        chunked_prefill=draw(st.booleans()),
        admission_gate=draw(st.sampled_from(["none", "full-prompt"])),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1])),
        max_model_len=draw(st.one_of(st.none(), st.integers(60, 300))),
        time_model="linear" if linear else "ticks",
        c0_ps=draw(st.integers(1, 10**9)) if linear else None,
        c_tok_ps=draw(st.integers(0, 10**6)) if linear else None,
        c_ctx_ps=draw(st.integers(0, 10**4)) if linear else None,
        kv_offloading_chunks=draw(st.integers(1, 40)),
        kv_offloading_blocks_per_chunk=draw(st.sampled_from([1, 1, 2, 3])),
        kv_offloading_eviction_policy=draw(st.sampled_from(["lru", "arc"])),
        kv_offloading_store_threshold=draw(st.sampled_from([0, 0, 2, 3])),
        # (vLLM 0.33.0 counts every offer, 0.34.0 a key once per request)
        kv_offloading_store_threshold_count=draw(st.sampled_from(["per-offer", "per-request"])),
        kv_offloading_prompt_only=draw(st.booleans()),
        kv_offloading_ps_per_block=draw(st.sampled_from([0, 0, 10**5, 10**8, 3 * 10**9])),
        kv_offloading_latency_ps=draw(st.sampled_from([0, 6 * 10**6, 2 * 10**9])),
        # vLLM's `AsyncScheduler` with its connector (DESIGN.md §Engine, "Asynchronous scheduling", *With a
        # CPU tier*) or its `Scheduler`
        async_scheduling=draw(st.sampled_from([None, None, True])),
    )


@given(workloads(), tier_configs(), st.sampled_from([0, 1, 3]))
def test_rust_engine_equals_reference_with_a_cpu_tier(w, cfg, every):
    res = assert_same(w, cfg, every)
    s = res.summary
    assert set(res.requests["status"]) <= {"finished", "rejected"}
    assert 0 <= s["cpu_tier_peak_occupancy"] <= 1
    assert s["loaded_blocks"] >= s["loads"]
    assert s["stored_blocks"] >= s["stores"]  # (the names DESIGN.md §Metrics gives)
    assert s["stored_bytes"] is None or s["stored_bytes"] >= s["stored_blocks"]
    # Every token a request took from the tier was loaded: whole chunks beyond its GPU hits.
    assert res.requests["cpu_hit_tokens"].sum() == s["cpu_hit_tokens"]
    assert (res.requests["load_wait_s"] >= 0).all()
    # Blocks held outside the running list (a held request's, a finisher's waiting for the batch in flight
    # under async_scheduling) count among those the tables cover: sharing never saves fewer than none.
    assert s["blocks_saved_by_sharing"] is None or s["blocks_saved_by_sharing"] >= 0


@given(
    workloads(max_requests=30),
    tier_configs(),
    st.integers(2, 4),
    st.sampled_from(["round-robin", "least-loaded", "least-kv", "prefix-affinity", "random"]),
)
def test_a_fleet_of_replicas_with_cpu_tiers_agrees(w, cfg, replicas, router):
    cfg = cfg.replace(replicas=replicas, router=router)
    ref = kvsim.simulate_cluster(w, cfg, backend="reference")
    rust = kvsim.simulate_cluster(w, cfg, backend="rust")
    assert rust.requests.equals(ref.requests, null_equal=True)
    assert rust.summary == ref.summary


@given(workloads(), tier_configs())
def test_no_tier_is_todays_engine(w, cfg):
    """`kv_offloading_chunks=0` is the engine without a tier: the same decisions, no tier columns."""
    off = cfg.replace(kv_offloading_chunks=0)
    plain = kvsim.SimConfig(**{k: v for k, v in off.to_dict().items() if not k.startswith("kv_offloading")})
    a = kvsim.simulate(w, off, record_events=True)
    b = kvsim.simulate(w, plain, record_events=True)
    assert a.events.equals(b.events)
    assert a.summary == b.summary
    assert "cpu_hit_tokens" not in a.requests.columns


def shared_prefix_workload(gap_s: float) -> Workload:
    """A 64-token prefix; 20 private requests of 40 tokens in between push it out of a 12-block GPU pool
    (their full blocks cycle through the free queue); then the prefix again."""
    ids, lens, offsets = [], [], [0]
    arrival = []
    for i in range(22):
        if i in (0, 21):
            ids.append(7)
            lens.append(64)
        ids.append(100 + i)
        lens.append(40)
        offsets.append(len(ids))
        arrival.append(i * gap_s)
    return Workload(
        arrival=arrival, output_len=[2] * 22, seg_offsets=offsets, segment_id=ids, segment_len=lens
    )


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_a_hit_in_the_tier_waits_for_its_load(backend):
    """The last request finds its 64-token prefix in the tier, not on the GPU: it loads 4 blocks of 16,
    waits the link's time (latency + 4 blocks × 50 ms) neither running nor computing, then computes only
    its own 40 tokens."""
    w = shared_prefix_workload(0.01)
    base = dict(num_blocks=13, block_size=16, max_num_seqs=2, kv_offloading_latency_ps=5 * 10**9)
    cfg = kvsim.SimConfig(**base, kv_offloading_chunks=64, kv_offloading_ps_per_block=50 * 10**9)
    res = kvsim.simulate(w, cfg, backend=backend, record_events=True)
    last = res.requests.row(21, named=True)
    assert last["cpu_hit_tokens"] == 64
    assert last["cached_tokens"] == 0
    assert last["load_wait_s"] >= 0.205  # 5 ms + 4 × 50 ms, seen at the first step end after it
    assert last["first_scheduled"] - last["arrival"] >= 0.205
    ev = res.events.filter(res.events["request_id"] == 21)
    loads = ev.filter(ev["kind"] == "load")
    assert loads["count"].to_list() == [4]
    sched = ev.filter(ev["kind"] == "schedule")
    assert sched["count"].to_list()[0] == 40  # only its own tokens are computed
    # Without the tier the prefix is computed again.
    plain = kvsim.simulate(w, kvsim.SimConfig(**base), backend=backend)
    assert plain.requests.row(21, named=True)["cached_tokens"] == 0
    assert plain.summary["prefix_hit_tokens"] == res.summary["prefix_hit_tokens"]


@pytest.mark.parametrize("record_events", [False, True])
def test_a_decode_block_taken_from_a_finished_requests_store_waits_for_it(record_events):
    """vLLM's flush in a decode step: req-4 finishes at step 10 with its prompt's last store still on the
    link (until 15 ms: every store waits 2 ms behind the ones before it), which fences its blocks; that
    step's decode block for req-2 is one of them, so the step waits until the store ends, then computes
    for its 1 ms (vLLM's worker order: DESIGN.md §CPU tier, "Time"). The Rust engine's decode steps
    without an event log take such a block in their fast path, which once skipped the fence (found by a
    3,000-example hypothesis run of the fleet test): both engines, with the log and without, flush once
    and end at 16 ms (15 ms when a flushing step lasted until its compute or its flush ended)."""
    w = Workload(
        arrival=[0.0, 0.0025, 0.0025, 0.0065],
        output_len=[9, 8, 8, 2],
        seg_offsets=[0, 1, 2, 5, 6],
        segment_id=[1002, 1005, 1, 3, 1000, 1000],
        segment_len=[35, 6, 3, 5, 1, 22],
    )
    cfg = kvsim.SimConfig(
        num_blocks=48,
        block_size=2,
        max_num_seqs=4,
        max_num_batched_tokens=16,
        kv_offloading_chunks=40,
        kv_offloading_ps_per_block=0,
        kv_offloading_latency_ps=2 * 10**9,
    )
    for backend in ("rust", "reference"):
        c = kvsim.simulate(w, cfg, backend=backend, record_events=record_events).raw.counters
        assert (c["num_flushes"], c["makespan_ps"]) == (1, 16 * 10**9), backend


@pytest.mark.parametrize("record_events", [True, False])
def test_a_decode_block_a_finished_requests_last_offer_reads_waits_for_its_store(record_events):
    """vLLM's flush for a store made at the finish: req-1's second sample (a 50-token prompt, 48 tokens hit
    on the GPU) finishes in step 6 with its prompt's chunks not yet stored (the 40-chunk ARC tier had no
    room when it offered them), so step 7 offers them as its last stores, and block 48, one of them, is
    the decode block req-0 takes in that very step: step 7 waits until that store ends (0.140042 s), then
    computes for its tick (1 ms), so step 8 starts at 0.141042 s, not at its tick's 0.119036 s. The Rust
    engine's decode steps in lockstep mode watched the step's new blocks only while a fence stood, not
    while a finished request's last offer waited (found by the adversarial pass,
    `test_the_tiers_fast_paths_decide_as_the_reference`): both engines, with the log and without, flush
    four times and end at 0.145048 s."""
    w = Workload(
        arrival=[0.0] * 8,
        output_len=[6, 1, 1, 1, 1, 1, 1, 1],
        num_samples=[1, 3, 1, 1, 1, 1, 1, 1],
        seg_offsets=[0, 1, 3, 4, 5, 6, 7, 8, 9],
        segment_id=[1000, 3, 1001, 1000, 1000, 1000, 1000, 1000, 1007],
        segment_len=[42, 5, 45, 1, 1, 1, 1, 1, 1],
    )
    cfg = kvsim.SimConfig(
        num_blocks=49,
        block_size=2,
        max_num_seqs=4,
        max_num_batched_tokens=16,
        kv_offloading_chunks=40,
        kv_offloading_eviction_policy="arc",
        kv_offloading_ps_per_block=3 * 10**9,
        kv_offloading_latency_ps=6 * 10**6,
    )
    for backend in ("rust", "reference"):
        res = kvsim.simulate(w, cfg, backend=backend, record_events=record_events)
        c = res.raw.counters
        assert (c["num_flushes"], c["makespan_ps"]) == (4, 145_048_000_000), backend
        if record_events:
            step8 = res.events.filter(res.events["step"] == 8)["time_s"]
            assert step8.min() == pytest.approx(0.141042), backend


def test_a_loads_blocks_are_not_watched_past_its_step():
    """A load admitted in a lockstep step that offers nothing (nobody scheduled, nothing pending) noted its
    GPU hits and new blocks for vLLM's flush, and nothing cleared them until a later step's offer, where a
    store fenced at a finish in between met them and counted a flush the reference does not (found by the
    adversarial pass: 21 flushes against 20, every time alike). Both engines, 20 flushes, 10 loads (12
    when a flushing step's loads started at its start rather than after its wait)."""
    w = Workload(
        arrival=[0.0] * 6 + [0.05] + [0.45] * 7,
        output_len=[18, 46, 60, 60, 24, 5, 24, 4, 28, 28, 31, 24, 4, 31],
        num_samples=[1, 1, 3, 1, 1, 1, 1, 1, 2, 3, 3, 1, 3, 2],
        seg_offsets=[0, 1, 2, 4, 6, 7, 10, 12, 14, 15, 18, 19, 22, 25, 28],
        segment_id=[
            *[1000, 1000, 1, 1002, 1, 1003, 1004, 1, 1, 1000, 5, 1000, 5, 1007, 1008, 2, 3, 1000],
            1010,
            5,
            1,
            1000,
            1,
            4,
            1012,
            1,
            4,
            1012,
        ],
        segment_len=[
            *[1, 1, 3, 11, 3, 1, 6, 3, 3, 30, 33, 11, 33, 16, 42, 20, 5, 29, 33, 33, 3, 24, 3, 1],
            24,
            3,
            1,
            5,
        ],
    )
    cfg = kvsim.SimConfig(
        num_blocks=49,
        block_size=2,
        free_order="classic",
        admission_gate="none",
        max_num_seqs=4,
        max_num_batched_tokens=16,
        kv_offloading_chunks=40,
        kv_offloading_eviction_policy="arc",
        kv_offloading_ps_per_block=3 * 10**9,
    )
    for backend in ("rust", "reference"):
        c = kvsim.simulate(w, cfg, backend=backend).raw.counters
        assert (c["num_flushes"], c["num_loads"], c["makespan_ps"]) == (20, 10, 1_165_162_000_000), backend


def test_the_tier_is_sized_from_host_memory_as_vllm_sizes_it():
    """64 GiB of Llama-3.1-8B at block 16: a chunk is 16 tokens × 128 KiB = 2 MiB (a multiple of 4 KiB),
    so 32,768 chunks; a block moves over an H100's host link (64 GB/s one way) in 2 MiB / 64 GB/s."""
    cfg = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", kv_offloading_size="64GiB", block_size=16)
    assert cfg.kv_offloading_chunk_bytes == 2 * 2**20
    assert cfg.kv_offloading_chunks == 32_768
    link = kvsim.gpus.resolve("h100-80gb").pcie_bandwidth
    assert cfg.kv_offloading_ps_per_block == round(2 * 2**20 * 10**12 / link)
    # vLLM's flag is GiB: a bare number is GiB.
    assert (
        kvsim.SimConfig(
            block_size=16, model="llama-3.1-8b", gpu="h100-80gb", kv_offloading_size=64
        ).kv_offloading_chunks
        == 32_768
    )


def test_an_mla_latent_on_tp_ranks_is_kept_once_in_the_tier_as_vllm_keeps_it():
    """vLLM 0.33.0's replicated layout (`offloading/config.py` `replicated_layout`, `CPUOffloadingSpec`
    `num_copies`): DeepSeek-V3's MLA latent is the same on every TP rank, so on CUDA at tp 8 a chunk is one
    copy, 16 tokens x 61 layers x 1,152 B = 1,124,352 B padded to 4 KiB, and 64 GiB hold 8x the chunks of a
    copy a rank; ROCm keeps a copy a rank (no shared region), as does a model with per-head KV. A store
    moves one rank's bytes (only rank 0 writes), a load every rank's."""
    mla = kvsim.SimConfig(
        model="deepseek-v3", gpu="h200", tensor_parallel_size=8, kv_offloading_size=64, block_size=16
    )
    assert mla.kv_offloading_replicated
    assert mla.kv_offloading_chunk_bytes == 1_126_400
    assert mla.kv_offloading_chunks == 64 * 2**30 // 1_126_400 == 61_008
    assert mla.kv_offloading_store_block_bytes == 1_124_352
    assert mla.kv_offloading_block_bytes == 8 * 1_124_352
    # With DP ranks (DeepSeek-V3 takes them: its experts) the replicated layout is off (TP alone): a copy a rank.
    dp2 = mla.replace(data_parallel_size=2)
    assert not dp2.kv_offloading_replicated
    assert dp2.kv_offloading_copies == 8
    assert dp2.kv_offloading_chunk_bytes == dp2.kv_offloading_store_block_bytes == 8 * 1_124_352
    assert dp2.kv_offloading_chunks == 64 * 2**30 // (8 * 1_124_352) == 7_639
    rocm = kvsim.SimConfig(
        model="deepseek-v3", gpu="mi300x", tensor_parallel_size=8, kv_offloading_size=64, block_size=16
    )
    assert not rocm.kv_offloading_replicated
    assert rocm.kv_offloading_chunk_bytes == 8 * 1_124_352
    # One host's mp executor: past a host's GPUs (HGX H200: 8; a GB200 NVL72 compute tray: 4) vLLM runs the
    # Ray or multi-node executor, and the tier keeps a copy a rank.
    # (tp 32 splits DeepSeek-V3's fp8 experts below a 128-wide block: vLLM refuses it, and so does kvsim)
    for gpu, tp in (("h200", 16), ("b200", 16), ("gb200", 8)):
        wide = kvsim.SimConfig(
            block_size=16, model="deepseek-v3", gpu=gpu, tensor_parallel_size=tp, kv_offloading_size=64
        )
        assert not wide.kv_offloading_replicated
        assert wide.kv_offloading_store_block_bytes == wide.kv_offloading_block_bytes
        per_rank = wide.kv_offloading_block_bytes // tp
        assert wide.kv_offloading_chunk_bytes == -(-tp * per_rank // 4096) * 4096
    # (at tp 4 DeepSeek-V3's fp8 weights, its MLA's bf16 kv_b_proj copy and the activations leave room for one
    # request of 27,072 tokens: 16,384 fit)
    tray = kvsim.SimConfig(
        block_size=16,
        model="deepseek-v3",
        gpu="gb200",
        tensor_parallel_size=4,
        max_model_len=16384,
        kv_offloading_size=64,
    )
    assert tray.kv_offloading_replicated
    assert kvsim.gpus.get("gb200").gpus_per_host == 4
    gqa = kvsim.SimConfig(
        block_size=16, model="llama-3.1-70b", gpu="h200", tensor_parallel_size=4, kv_offloading_size=64
    )
    assert not gqa.kv_offloading_replicated
    # (80 layers x 2 of the 8 KV heads a GPU x 128 x K and V x 2 B, 16 tokens, a copy on each of 4 ranks)
    assert (
        gqa.kv_offloading_chunk_bytes == gqa.kv_offloading_store_block_bytes == 4 * 16 * 80 * 2 * 128 * 2 * 2
    )
    # The bytes a run moved: stores at one rank's, loads at every rank's.
    w = synthetic(60, arrival_rate=50, num_system_prompts=2, system_prompt_len=600, seed=3)
    small = mla.replace(num_blocks=300, kv_offloading_size=None, kv_offloading_chunks=2000)
    s = kvsim.simulate(w, small).summary
    assert s["stored_bytes"] == s["stored_blocks"] * 1_124_352 > 0
    assert s["loaded_bytes"] == s["loaded_blocks"] * 8 * 1_124_352 > 0


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (dict(kv_offloading_size="1GiB"), "needs a model"),
        (dict(kv_offloading_chunks=10, policy="reserve"), "policy 'reserve' does not apply"),
        (dict(kv_offloading_chunks=10, enable_prefix_caching=False), "enable_prefix_caching False"),
        (dict(kv_offloading_chunks=10, waiting_over_budget="skip"), "waiting_over_budget 'skip'"),
        (dict(kv_offloading_chunks=10, preemption="swap", cpu_blocks=4), "preemption 'swap'"),
        (dict(kv_offloading_chunks=10, kv_offloading_eviction_policy="fifo"), "is not one of 'lru', 'arc'"),
    ],
)
def test_what_the_tier_cannot_model_is_refused_by_name(changes, says):
    with pytest.raises(InvalidArgumentError, match=says):
        kvsim.SimConfig(num_blocks=20, **changes)


@pytest.mark.parametrize("size", ["1MiB", "1B", 0.001, "2097151B"])
def test_a_tier_of_less_than_one_chunk_is_refused_not_run_as_none(size):
    """Llama-3.1-8B's chunk is 2 MiB: a smaller tier would hold nothing, and ran as no tier at all (the
    tier's checks skipped with it); 0 is no tier, and one chunk runs."""
    with pytest.raises(
        InvalidArgumentError, match=r"holds no CPU-tier chunk .*2\.0 MiB.*or 0 for no tier"
    ) as e:
        kvsim.SimConfig(model="llama-3.1-8b", block_size=16, kv_cache_bytes="2GiB", kv_offloading_size=size)
    # The least size it names holds a chunk (it said 0.001953 GiB, rounded down, itself refused).
    least = float(str(e.value).split("give at least ", 1)[1].split(" GiB", 1)[0])
    assert (
        kvsim.SimConfig(
            model="llama-3.1-8b", block_size=16, kv_cache_bytes="2GiB", kv_offloading_size=least
        ).kv_offloading_chunks
        == 1
    )
    assert (
        kvsim.SimConfig(
            model="llama-3.1-8b", block_size=16, kv_cache_bytes="2GiB", kv_offloading_size=0
        ).kv_offloading_chunks
        == 0
    )
    one = kvsim.SimConfig(
        model="llama-3.1-8b", block_size=16, kv_cache_bytes="2GiB", kv_offloading_size="2MiB"
    )
    assert one.kv_offloading_chunks == 1


def test_more_tier_more_hits_on_repeated_prefixes():
    """Eight prefixes visited round-robin through a GPU pool that holds two: a tier that holds them all
    turns the misses into hits, one that holds fewer adds nothing (LRU over a cycle)."""
    ids, lens, offsets, arrival = [], [], [0], []
    for i in range(64):
        ids += [1 + i % 8, 1000 + i]
        lens += [48, 4]
        offsets.append(len(ids))
        arrival.append(i * 0.05)
    w = Workload(arrival=arrival, output_len=[2] * 64, seg_offsets=offsets, segment_id=ids, segment_len=lens)
    base = dict(num_blocks=10, block_size=16, max_num_seqs=1)
    plain = kvsim.simulate(w, kvsim.SimConfig(**base)).summary["prefix_hit_rate_first_admission"]
    rates = {}
    for chunks in (1, 24):
        s = kvsim.simulate(w, kvsim.SimConfig(**base, kv_offloading_chunks=chunks)).summary
        rates[chunks] = s["hit_rate_first_admission"]
    # LRU over a cycle of 8 prefixes: a tier of fewer than 8 prefixes (3 chunks each) never hits.
    assert rates[1] == plain
    assert np.isclose(rates[24], 48 * 56 / (52 * 64))  # every visit after the first of each prefix hits


@given(workloads(max_requests=30), tier_configs(), st.integers(1, 31))
def test_a_streamed_run_with_a_tier_equals_the_whole_run(w, cfg, size):
    """Fed in chunks (`simulate_stream`), a run with a CPU tier makes the same decisions as the whole run
    on both engines: a stalled engine waits for rows not fed yet rather than jumping past them."""
    from kvsim.engine.streaming import chunks, simulate_stream

    whole = kvsim.simulate(w, cfg, backend="reference")
    for backend in ("rust", "reference"):
        res = simulate_stream(chunks(w, size), cfg, backend=backend, rows="memory")
        assert res.requests is not None
        assert res.requests.equals(whole.requests, null_equal=True), backend
        assert res.summary == whole.summary, backend
        assert res.raw.counters == whole.raw.counters, backend


def test_a_fleets_tier_metrics_are_over_every_replicas_tier():
    """The fleet summary: the tiers' chunks summed, occupancy time-weighted over each replica's busy time
    and tier (so between the replicas' own), the peak the fullest replica's."""
    from kvsim.workloads import synthetic

    w = synthetic(300, arrival_rate=50, lengths="sharegpt-paper", seed=3)
    cfg = kvsim.SimConfig(num_blocks=300, block_size=16, enable_prefix_caching=True, kv_offloading_chunks=400)
    r = kvsim.simulate_cluster(w, cfg, replicas=3, router="round-robin")
    s, each = r.summary, [x.summary for x in r.replicas]
    assert s["cpu_tier_chunks"] == 3 * 400
    occ = [x["cpu_tier_occupancy"] for x in each]
    assert min(occ) <= s["cpu_tier_occupancy"] <= max(occ)
    assert 0 < s["cpu_tier_occupancy"] <= 1
    assert s["cpu_tier_peak_occupancy"] == max(x["cpu_tier_peak_occupancy"] for x in each)
    assert s["stores"] == sum(x["stores"] for x in each)


def test_a_mixed_fleets_tier_bytes_are_each_replicas_at_its_block_size():
    """Replicas of 16- and 32-token blocks: each moves its blocks at its own block's bytes (2 and 4 MiB for
    Llama-3.1-8B), and the fleet's bytes are their sum (it priced every replica's blocks at replica 0's)."""
    from kvsim.workloads import synthetic

    w = synthetic(
        400, arrival_rate=50, lengths="sharegpt-paper", num_system_prompts=4, system_prompt_len=512, seed=3
    )
    base = dict(model="llama-3.1-8b", gpu="h100-80gb", enable_prefix_caching=True, kv_offloading_size="1GiB")
    cfgs = [
        kvsim.SimConfig(num_blocks=600, block_size=16, **base),
        kvsim.SimConfig(num_blocks=300, block_size=32, **base),
    ]
    r = kvsim.simulate_cluster(w, cfgs, router="round-robin")
    each = [x.summary for x in r.replicas]
    assert cfgs[1].kv_offloading_block_bytes == 2 * cfgs[0].kv_offloading_block_bytes
    assert all(x["stored_blocks"] > 0 for x in each)
    for done in ("stored", "loaded"):
        assert r.summary[f"{done}_bytes"] == sum(x[f"{done}_bytes"] for x in each), done
    assert r.summary["stored_bytes"] != r.summary["stored_blocks"] * cfgs[0].kv_offloading_block_bytes


def test_the_summary_names_transfers_as_design_does():
    """DESIGN.md §Metrics: `loads`, `loaded_blocks`, `loaded_bytes`, `stores`, `stored_blocks`,
    `stored_bytes`; the blocks are the engine's counters and the bytes the blocks' host bytes."""
    from kvsim.workloads import synthetic

    w = synthetic(200, arrival_rate=50, lengths="sharegpt-paper", seed=5)
    cfg = kvsim.SimConfig(
        model="llama-3.1-8b",
        gpu="h100-80gb",
        num_blocks=400,
        enable_prefix_caching=True,
        kv_offloading_size=1,
    )
    r = kvsim.simulate(w, cfg)
    s, c = r.summary, r.raw.counters
    assert s["stored_blocks"] == c["stored_blocks"] > 0
    assert s["loaded_blocks"] == c["loaded_blocks"]
    assert s["stored_bytes"] == s["stored_blocks"] * cfg.kv_offloading_block_bytes
    assert s["loaded_bytes"] == s["loaded_blocks"] * cfg.kv_offloading_block_bytes
    assert not any(k.startswith("storeed") for k in s)
