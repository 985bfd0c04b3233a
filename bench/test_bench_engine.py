"""Engine speed: the million-request run, Rust against the reference on one workload, and the floor.

The workload is the paper's ShareGPT means (161.31 in / 337.99 out, lognormal spread), Poisson arrivals at
100 requests/s, policy `vllm`, prefix caching on, block 16, 1 ms iterations, and a 1,500-block pool that
is too small at the arrival peaks, so preemptions keep happening. Run with `make bench` (release build).
"""

from __future__ import annotations

import resource
import time

import pytest

import kvsim
from kvsim import _core
from kvsim.workloads import synthetic

from .conftest import measure, record, target

CONFIG = kvsim.SimConfig(num_blocks=1500, block_size=16, enable_prefix_caching=True)


def workload(n: int):
    return synthetic(n, arrival_rate=100, lengths="sharegpt-paper", seed=7)


@pytest.fixture(scope="module")
def million():
    return workload(1_000_000)


def test_million_requests(benchmark, million):
    benchmark.group = "engine-1M"
    # One untimed run first (the process's first million-row arrays fault their pages in), then the median
    # of three: this VM's wall clock varies by tens of percent between minutes.
    result = benchmark.pedantic(
        kvsim.simulate, args=(million, CONFIG), rounds=3, iterations=1, warmup_rounds=1
    )
    s = result.summary
    # Sane: everything finished, the pool was under pressure, prefixes were found after preemptions.
    assert s["completed"] == 1_000_000
    assert s["preemptions"] > 0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    benchmark.extra_info.update(
        what="1,000,000 ShareGPT-like requests, vllm, caching on, block 16, 1500 blocks",
        steps=s["num_steps"],
        preemptions=s["preemptions"],
        block_allocations=result.raw.counters["num_block_allocations"],
        peak_rss_mib=rss,
    )
    if benchmark.stats:
        what = (
            f"kvsim.simulate, 1,000,000 requests ({s['num_steps']:,} steps, {s['preemptions']:,} preemptions)"
        )
        target(what, benchmark.stats.stats.median, 2.0, "s")
    target("peak RSS of the process after the 1,000,000-request run", rss, 1024, "MiB")


def test_million_requests_with_a_rarely_hit_cpu_tier(million):
    """Issue 27's speed target on the million-request benchmark: a CPU tier of 10^8 tokens (6,250,000
    chunks) that is rarely hit (no shared prefixes) but stores every prompt chunk (write-through) costs at
    most 10 % over the tier off. Over a million requests it fills (~9.6 chunks a request) and evicts from
    then on. The two runs alternate, five of each after a warm-up of each, and the ratio is the median of
    the five pairs' (each pair run within seconds: this VM's speed drifts between minutes, by more than the
    target's margin); `python -m bench.tier_pairs` measures the engine alone the same way, and `python -m
    bench.callgrind_engine` counts the instructions of 100,000 of them, where the tier never fills
    (results/README.md §CPU tier)."""
    from .callgrind_engine import with_tier

    tier_cfg = with_tier(CONFIG, 10**8)
    kvsim.simulate(million, CONFIG)  # warm-ups, untimed
    on = kvsim.simulate(million, tier_cfg)
    off_s, on_s = [], []
    for _ in range(5):
        for cfg, times in ((CONFIG, off_s), (tier_cfg, on_s)):
            t0 = time.perf_counter()
            kvsim.simulate(million, cfg)
            times.append(time.perf_counter() - t0)
    # The setup is what the target says: every prompt chunk stored, loads rare.
    c = on.raw.counters
    assert on.summary["completed"] == 1_000_000
    assert c["num_stores"] > 900_000
    assert c["num_loads"] < 10_000
    ratio = sorted(on / off for on, off in zip(on_s, off_s, strict=True))[2]
    measure("kvsim.simulate, 1,000,000 requests, tier off (median of five)", sorted(off_s)[2], "s")
    target(
        f"the same with a 10^8-token CPU tier ({int(c['num_stores']):,} stores, {int(c['num_loads']):,} loads, "
        f"{int(c['cpu_evictions']):,} chunks evicted) over the tier off (median of five pairs)",
        ratio,
        1.10,
        "x",
    )


def test_engine_within_5x_of_the_free_list_floor(benchmark, million):
    """The engine's time per allocated block against a loop that only pops and pushes as many blocks, and
    against the step floor: the least work of any engine that advances step by step (the same steps and,
    but for the preemptions, the same block allocations, with nothing else done)."""
    from kvsim.engine.engine_input import prepare
    from kvsim.engine.rust_engine import check_step_floor, run, step_floor_unchecked

    inp = prepare(million, CONFIG)
    check_step_floor(inp, CONFIG)  # private prompts, one sample, ticks: the floor models this run
    run(inp, CONFIG)  # warm-up, untimed
    times, step_times = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        out = run(inp, CONFIG)
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        least = step_floor_unchecked(inp, CONFIG)
        step_times.append(time.perf_counter() - t0)
    engine_s = sorted(times)[1]  # the median of three: this VM's wall clock varies by tens of percent
    step_s = sorted(step_times)[1]
    ops = int(out.counters["num_block_allocations"])
    # The step floor simulates the same run: the same steps; no more blocks (it skips preemptions).
    assert least["steps"] == out.counters["num_steps"]
    assert 0.99 * ops <= least["block_allocations"] <= ops
    benchmark.group = "engine-floor"
    checksum = benchmark.pedantic(_core.free_list_floor, args=(CONFIG.num_blocks, ops), rounds=3)
    assert checksum > 0
    floor_s = benchmark.stats.stats.median if benchmark.stats else float("nan")
    benchmark.extra_info.update(
        what=f"{ops:,} block pops+pushes",
        engine_s=engine_s,
        floor_s=floor_s,
        step_floor_s=step_s,
        engine_over_floor=engine_s / floor_s,
    )
    target(f"engine time over a free list popping and pushing its {ops:,} blocks", engine_s / floor_s, 5, "x")
    measure(
        f"step floor (the least work of a step-exact engine: {least['steps']:,} steps, "
        f"{least['block_allocations']:,} blocks) over the free list",
        step_s / floor_s,
        "x",
    )
    measure("engine time over the step floor", engine_s / step_s, "x")


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_engine_20k_rust_against_reference(benchmark, backend):
    w = workload(20_000)
    benchmark.group = "engine-20k"
    benchmark.extra_info["what"] = "20,000 ShareGPT-like requests, vllm, caching on, 1500 blocks"
    rounds = 3 if backend == "rust" else 1
    result = benchmark.pedantic(kvsim.simulate, args=(w, CONFIG), kwargs={"backend": backend}, rounds=rounds)
    assert result.summary["completed"] == 20_000
    record(benchmark, "engine-20k", backend)
