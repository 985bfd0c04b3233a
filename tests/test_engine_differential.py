"""The Rust engine and the Python reference agree exactly: every per-sequence column, every counter, the
request rows and the summary, on random workloads and configs (tiny pools that force preemption, heavy
prefix sharing, several samples, every policy, both free orders, every time model: ticks, linear and the
roofline with random coefficients, windowed attention classes and expert tables)."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
import numpy as np
import polars as pl
import pytest
from hypothesis import given

import kvsim
from kvsim.model.segments import output_id
from kvsim.model.timing import CHUNKED, FULL, SLIDING, AttentionClass, RooflineTimeModel
from kvsim.reference.engine import ITL_RUNS, ITL_STEPS
from kvsim.workloads import Workload, synthetic

SHARED = [(1, 24), (2, 40), (3, 7)]  # system prompts many requests start with


@st.composite
def workloads(draw, max_requests: int = 24) -> Workload:
    n = draw(st.integers(1, max_requests))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0005, 0.001, 0.003, 0.02]), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    caps = draw(st.lists(st.one_of(st.none(), st.integers(1, 80)), min_size=n, max_size=n))
    max_tokens = [o if c is None else c for o, c in zip(output, caps, strict=True)]
    offsets, ids, lens = [0], [], []
    for i in range(n):
        prefix = draw(st.sampled_from([None, *SHARED]))
        own = draw(st.integers(1, 90))
        if prefix is not None:
            ids.append(prefix[0])
            lens.append(prefix[1])
        if i > 0 and draw(st.integers(0, 4)) == 0:
            # A later turn quoting an earlier request's answer (so generated blocks can be hit).
            j = draw(st.integers(0, i - 1))
            ids.append(output_id(j))
            lens.append(draw(st.integers(1, min(output[j], max_tokens[j]))))
        ids.append(1000 + i)
        lens.append(own)
        offsets.append(len(ids))
    samples = draw(st.lists(st.sampled_from([1, 1, 1, 2, 3]), min_size=n, max_size=n))
    return Workload(
        arrival=np.cumsum(gaps),
        output_len=output,
        max_tokens=max_tokens,
        num_samples=samples,
        seg_offsets=offsets,
        segment_id=np.array(ids, dtype=np.uint64),
        segment_len=lens,
    )


@st.composite
def rooflines(draw, windows: bool = True) -> RooflineTimeModel:
    """Random roofline coefficients in every regime: memory- or compute-bound dense and expert terms (the
    crossover within a step's tokens), a random experts table (its last entry past its end) read at one to
    four DP ranks' tokens (`moe_senders`: a lone rank takes the others' batches as its own), one to three
    attention classes, windowed ones (sliding, chunked) unless `windows` is False, each with a prefilling
    sequence's own pair and key prices (or none: its decode's) and the prices of the keys it had cached
    (dense MLA's prefill path: per key, the GEMM's per key bytes and FLOPs, its weights per step), zero or
    not."""
    small = st.integers(0, 10**4)
    kinds = [FULL, SLIDING, CHUNKED] if windows else [FULL]
    classes = []
    for kind in draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=3)):
        window = 0 if kind == FULL else draw(st.integers(1, 64))
        prefill = draw(st.one_of(st.none(), small))
        context = draw(st.one_of(st.just(0), small))
        gemm, flop = (draw(st.one_of(st.just(0), small)) for _ in range(2))
        weight = draw(st.one_of(st.just(0), st.integers(0, 10**7)))
        classes.append(
            AttentionClass(
                kind,
                window,
                draw(small),
                draw(small),
                draw(small),
                prefill,
                context,
                prefill_kv_ps=draw(st.one_of(st.none(), small)),
                context_gemm_ps=gemm,
                context_flop_ps=flop,
                context_weight_ps=weight,
            )
        )
    table = draw(st.lists(st.integers(0, 10**9), max_size=40))
    return RooflineTimeModel(
        fixed_ps=draw(st.integers(0, 10**9)),
        seq_ps=draw(st.integers(0, 10**6)),
        tok_ps=draw(st.integers(0, 10**6)),
        dense_mem_ps=draw(st.integers(0, 10**9)),
        dense_mem_tok_ps=draw(st.integers(0, 10**5)),
        dense_flop_tok_ps=draw(st.integers(0, 10**8)),
        moe_mem_ps=tuple(table),
        moe_flop_tok_ps=draw(st.integers(0, 10**8)) if table else 0,
        head_mem_ps=draw(st.integers(0, 10**8)),
        head_flop_seq_ps=draw(st.integers(0, 10**7)),
        attention=tuple(classes),
        moe_senders=draw(st.integers(1, 4)),
    )


@st.composite
def configs(draw) -> kvsim.SimConfig:
    policy = draw(
        st.sampled_from(["vllm", "vllm", "reserve", "static", "orca-max", "orca-pow2", "orca-oracle"])
    )
    max_model_len = draw(st.one_of(st.none(), st.integers(20, 300)))
    if policy == "static" and max_model_len is None:
        max_model_len = 200
    time = draw(st.sampled_from(["ticks", "linear", "roofline"]))
    linear = time == "linear"
    sampling = draw(st.sampled_from(["independent", "fork-cow"])) if policy == "vllm" else "independent"
    preemption = draw(st.sampled_from(["recompute", "swap", "auto"])) if policy == "vllm" else "recompute"
    contiguous = policy in ("static", "orca-max", "orca-pow2", "orca-oracle")
    max_num_seqs = draw(st.integers(1, 8))
    budget = draw(st.sampled_from([1, 7, 32, 100, 512]))
    cfg = kvsim.SimConfig(
        placement=draw(st.sampled_from(["first-fit", "buddy"])) if contiguous else "first-fit",
        sampling=sampling,
        preemption=preemption,
        cpu_blocks=draw(st.integers(1 if preemption == "swap" else 0, 40))
        if preemption != "recompute"
        else 0,
        swap_ps_per_block=draw(st.sampled_from([0, 10**6])),
        num_blocks=draw(st.integers(2, 60)),
        block_size=draw(st.sampled_from([1, 2, 4, 16])),
        policy=policy,
        enable_prefix_caching=draw(st.booleans()),
        free_order=draw(st.sampled_from(["classic", "lifo_unhashed"])),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(budget, max_num_seqs) if sampling == "fork-cow" else budget,
        chunked_prefill=draw(st.booleans()),
        admission_gate=draw(st.sampled_from(["none", "full-prompt"])),
        waiting_over_budget=draw(st.sampled_from(["stop", "skip"])),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1, 0.25])),
        watermark_rule=draw(st.sampled_from(["while-running", "always"])),
        append_check=draw(st.sampled_from(["exact", "one-free-block"])) if policy == "vllm" else "exact",
        max_model_len=max_model_len,
        time_model="linear" if linear else "ticks",
        c0_ps=draw(st.integers(1, 10**9)) if linear else None,
        c_tok_ps=draw(st.integers(0, 10**6)) if linear else None,
        c_ctx_ps=draw(st.integers(0, 10**4)) if linear else None,
    )
    return cfg.with_roofline(draw(rooflines())) if time == "roofline" else cfg


def assert_same(w: Workload, cfg: kvsim.SimConfig, every: int = 0) -> kvsim.SimResult:
    events = every > 0  # log events in the runs that record a time series
    ref = kvsim.simulate(w, cfg, backend="reference", record_timeseries=every, record_events=events)
    rust = kvsim.simulate(w, cfg, backend="rust", record_timeseries=every, record_events=events)
    if events:
        assert rust.events is not None
        assert rust.events.equals(ref.events)
    if every:
        assert rust.timeseries is not None
        assert rust.timeseries.equals(ref.timeseries)
    if events and every == 1:
        assert_schedule_rows_give_the_batch(ref)
    for name in ("first_scheduled", "first_token", "finish", "generated", "num_preemptions", "status"):
        np.testing.assert_array_equal(getattr(rust.raw, name), getattr(ref.raw, name), err_msg=name)
    for name in ("num_swaps", "cached_tokens", "recomputed_tokens", "reject_reason"):
        np.testing.assert_array_equal(getattr(rust.raw, name), getattr(ref.raw, name), err_msg=name)
    assert rust.raw.counters == ref.raw.counters
    # ITL's record (kvsim.engine.metrics): the same step durations, run-length coded alike (lockstep spans too),
    # and the same runs of tokens in the same order.
    assert sorted(rust.raw.itl) == sorted(ref.raw.itl) == sorted((*ITL_STEPS, *ITL_RUNS))
    for name in (*ITL_STEPS, *ITL_RUNS):
        np.testing.assert_array_equal(rust.raw.itl[name], ref.raw.itl[name], err_msg=name)
    assert rust.requests.equals(ref.requests, null_equal=True)
    assert rust.summary == ref.summary
    return ref


def assert_schedule_rows_give_the_batch(res: kvsim.SimResult) -> None:
    """The log's `schedule` rows say what each step computed per sequence (a sequence scheduled without
    a row computed one token): with the time series' batch size, they give its batched tokens."""
    assert res.events is not None
    assert res.timeseries is not None
    rows = res.events.filter(pl.col("kind") == "schedule")
    assert (rows["block"] == -1).all()
    counted = (
        rows.filter(pl.col("count") > 0)
        .group_by("step")
        .agg(pl.col("count").sum().alias("tokens"), pl.len().alias("listed"))
    )
    ts = res.timeseries.join(counted, on="step", how="left").fill_null(0)
    expected = ts["tokens"] + ts["batch"] - ts["listed"]
    assert (expected == ts["batched_tokens"]).all()
    # A step's left-out sequences (count 0) were running: not in the batch.
    assert (ts["batch"] >= ts["listed"]).all()


@given(workloads(), configs(), st.sampled_from([0, 1, 3]))
def test_rust_engine_equals_reference(w, cfg, every):
    res = assert_same(w, cfg, every)
    # Every request ends: finished or rejected with a reason.
    assert set(res.requests["status"]) <= {"finished", "rejected"}
    rejected = res.requests.filter(res.requests["status"] == "rejected")
    assert rejected["reject_reason"].null_count() == 0


@given(
    workloads(max_requests=40),
    st.integers(4, 80),
    st.sampled_from([120, 160, 250]),
    st.sampled_from(["vllm", "reserve", "orca-oracle"]),
    st.sampled_from(["none", "full-prompt"]),
)
def test_skipping_prompts_over_the_budget_agrees(w, num_blocks, budget, policy, gate):
    # Chunked prefill off with budgets near the prompt sizes (up to ~150 tokens), so prompts over the
    # budget left are skipped often, alone or with preemption, sample groups and a full pool.
    cfg = kvsim.SimConfig(
        num_blocks=num_blocks,
        block_size=4,
        policy=policy,
        chunked_prefill=False,
        max_num_batched_tokens=budget,
        max_num_seqs=8,
        admission_gate=gate,
        waiting_over_budget="skip",
        max_model_len=400 if policy != "vllm" else None,
    )
    assert_same(w, cfg)


@given(workloads(max_requests=40), st.integers(2, 12), st.sampled_from([1, 4, 16]), st.booleans())
def test_tiny_pools_force_preemption_and_still_agree(w, num_blocks, block_size, fork):
    sampling = "fork-cow" if fork else "independent"
    cfg = kvsim.SimConfig(num_blocks=num_blocks, block_size=block_size, max_num_seqs=16, sampling=sampling)
    assert_same(w, cfg)


@given(
    workloads(max_requests=30),
    st.integers(3, 40),
    st.sampled_from([1, 2, 4, 16]),
    st.sampled_from(["swap", "auto", "recompute"]),
    st.integers(0, 40),
    st.sampled_from(["exact", "one-free-block"]),
)
def test_sequence_groups_agree(w, num_blocks, block_size, preemption, cpu_blocks, append_check):
    """fork-cow groups under pressure: gang growth, whole-group victims, groups swapped with their shared
    blocks and restored, recompute falling back per sample."""
    cfg = kvsim.SimConfig(
        num_blocks=num_blocks,
        block_size=block_size,
        max_num_seqs=16,
        sampling="fork-cow",
        preemption=preemption,
        cpu_blocks=max(cpu_blocks, 1) if preemption == "swap" else cpu_blocks,
        append_check=append_check,
    )
    assert_same(w, cfg, every=1)


def test_forked_sample_resuming_finds_its_own_copied_block():
    """Regression: a fork-cow sample preempted after filling its copy-on-write block must find that block
    on resume (the Rust engine once limited the lookup as if it were a first admission)."""
    w = Workload(
        arrival=np.zeros(3),
        output_len=[46, 48, 4],
        num_samples=[3, 3, 2],
        seg_offsets=[0, 2, 4, 6],
        segment_id=np.array([2, 1000, 1, 1001, 1, 1002], dtype=np.uint64),
        segment_len=[40, 41, 24, 41, 24, 44],
    )
    cfg = kvsim.SimConfig(num_blocks=9, block_size=16, max_num_seqs=16, sampling="fork-cow")
    res = assert_same(w, cfg, every=1)
    assert res.summary["preemptions"] > 0
    assert res.requests["cached_tokens"][1] > 0


@pytest.mark.parametrize(
    ("workload", "config"),
    [
        # Long outputs: lockstep spans of hundreds of steps, ring wrap-around; a pool tight enough to preempt.
        ({}, {"num_blocks": 120}),
        # Shared system prompts (real keys beside phantom ones) and prefix hits after preemption.
        ({"num_system_prompts": 3, "system_prompt_len": 64, "sharing_ratio": 0.7}, {"num_blocks": 150}),
        # Multi-turn: later prompts quote earlier outputs (no deferred keys), block 32.
        ({"turns": 3, "turn_interval": 2.0}, {"num_blocks": 200, "block_size": 32}),
        # Parallel samples forked copy-on-write, swapped out under pressure, vLLM v0's decode check.
        (
            {"num_samples": 3},
            {
                "num_blocks": 160,
                "sampling": "fork-cow",
                "preemption": "swap",
                "cpu_blocks": 60,
                "append_check": "one-free-block",
            },
        ),
        # Sample groups in lockstep: grown whole at block boundaries, swapped whole (vLLM v0's "auto"),
        # with shared system prompts; a CPU pool small enough that some groups are split and recomputed.
        (
            {"num_samples": 4, "num_system_prompts": 2, "system_prompt_len": 40, "sharing_ratio": 0.5},
            {"num_blocks": 180, "sampling": "fork-cow", "preemption": "auto", "cpu_blocks": 50},
        ),
        # Contiguous regions: no block events, far finishes become wake-ups.
        ({}, {"num_blocks": 400, "policy": "orca-oracle", "placement": "buddy"}),
        # The roofline derived for TP 2 over PCIe without peer-to-peer: the collectives staged through host
        # memory (`pcie_p2p`), their latency in the fixed term, their bytes per token and per sequence.
        (
            {},
            {
                "num_blocks": 300,
                "model": "qwen3-32b",
                "gpu": "rtx-pro-6000",
                "tensor_parallel_size": 2,
                "max_model_len": 8192,
                "pcie_p2p": False,
            },
        ),
        # A MoE rank of a DP 2 + EP deployment, calibrated: the routed experts' table read at the fused-MoE
        # kernel's measured fraction by tokens per touched expert (steep below ~2 tokens an expert), a lone
        # rank's experts at twice its tokens (`moe_senders`).
        (
            {},
            {
                "num_blocks": 400,
                "model": "qwen3-30b-a3b",
                "gpu": "rtx-pro-6000",
                "data_parallel_size": 2,
                "enable_expert_parallel": True,
                "calibration": "rtx-pro-6000-llama-3.1-8b",
                "max_model_len": 8192,
                "max_num_seqs": 24,
            },
        ),
        (
            {},
            {
                "num_blocks": 200,
                "policy": "reserve",
                "time_model": "linear",
                "c0_ps": 10**9,
                "c_tok_ps": 10**5,
                "c_ctx_ps": 10**3,
            },
        ),
    ],
)
def test_realistic_lengths_agree(workload, config):
    """Paper-like lengths (hundreds of output tokens) on a few hundred requests: what the small random
    workloads above never reach (long lockstep spans, wake-ups, many blocks per sequence)."""
    w = synthetic(150, arrival_rate=20, lengths="sharegpt-paper", seed=3, **workload)
    res = assert_same(w, kvsim.SimConfig(**{"block_size": 16, **config}))
    assert res.summary["completed"] + res.summary["rejected"] == res.summary["num_requests"]


@given(
    st.integers(1, 12),
    st.sampled_from([0.01, 0.05, 0.3]),
    st.sampled_from([16, 64, 256]),
    st.sampled_from(["vllm", "reserve", "orca-oracle", "static"]),
    st.sampled_from(["ticks", "linear", "roofline", "roofline-windows"]),
    st.sampled_from([0, 1, 5]),
    st.integers(0, 2**16),
    rooflines(windows=False),
)
def test_quiet_spans_agree(n, gap, block_size, policy, time_model, every, seed, roofline):
    """Light load with long outputs and large blocks: the Rust engine takes runs of steps in which nothing
    happens (no event, nothing waiting, no arrival) in closed form; time, the time-weighted sums, the
    time series and the rows must still equal the reference's step-by-step ones. Under the roofline a
    quiet step lasts base(batch) + max(kv, flop) · keys read, affine in the step index; a windowed class
    (its keys stop growing at the window) keeps the Rust engine in full steps."""
    linear = time_model == "linear"
    rng = np.random.default_rng(seed)
    w = Workload(
        arrival=np.cumsum(rng.choice([0.0, gap, 3 * gap], size=n)),
        output_len=rng.integers(1, 700, size=n),
        seg_offsets=np.arange(n + 1),
        segment_id=np.arange(1000, 1000 + n, dtype=np.uint64),
        segment_len=rng.integers(1, 300, size=n),
    )
    time = (
        {"time_model": "linear", "c0_ps": 7 * 10**8, "c_tok_ps": 3 * 10**5, "c_ctx_ps": 1234}
        if linear
        else {}
    )
    contiguous = policy in ("orca-oracle", "static")
    cfg = kvsim.SimConfig(
        num_blocks=4000 // block_size + 2 if not contiguous else 40_000 // block_size,
        block_size=block_size,
        policy=policy,
        max_model_len=1200 if policy == "static" else None,
        enable_prefix_caching=bool(seed % 2),
        **time,
    )
    if time_model == "roofline-windows":
        window = AttentionClass(
            SLIDING,
            1 + seed % 300,
            5000,
            700,
            9000,
            300 + seed % 500,
            seed % 3 * 40,
            prefill_kv_ps=7000 + seed % 4000,
            context_gemm_ps=seed % 2 * 30,
            context_flop_ps=seed % 5 * 20,
            context_weight_ps=seed % 3 * 10**6,
        )
        roofline = dataclasses.replace(roofline, attention=(*roofline.attention, window))
    if time_model.startswith("roofline"):
        cfg = cfg.with_roofline(roofline)
    assert_same(w, cfg, every)


def test_schedule_rows_name_chunked_prompts():
    """A token budget of 5 and ten prompts of 3 tokens: prompts go in chunks (rows with their counts),
    decodes have no rows; both engines write the same rows and they give every step's batched tokens."""
    n = 10
    w = Workload(
        arrival=np.zeros(n),
        output_len=[20] * n,
        seg_offsets=list(range(n + 1)),
        segment_id=np.arange(1, n + 1, dtype=np.uint64),
        segment_len=[3] * n,
    )
    cfg = kvsim.SimConfig(num_blocks=400, block_size=16, max_num_batched_tokens=5, max_num_seqs=16)
    res = assert_same(w, cfg, every=1)
    assert res.events is not None
    counts = res.events.filter(pl.col("kind") == "schedule")["count"]
    assert (counts > 1).any()
    assert len(counts) < res.summary["num_steps"]  # plain decodes have no row
