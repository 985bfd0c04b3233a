"""Sweep throughput: a 24-point grid of 1,000,000-request points on the thread executor, and the speed-up
of two workers over one; writes its numbers into results/README.md between the sweep-bench markers.

`KVSIM_SWEEP_BENCH_REQUESTS` shrinks the points for a quick look (the targets are asserted only at the
full 1,000,000). Run with `make bench` or `python -m pytest bench/test_bench_sweep.py --benchmark-enable`.
"""

from __future__ import annotations

import os
import re
import time

import pytest

from bench.conftest import RESULTS_README, _machine, _when, target
from kvsim.analysis.sweep import SweepSpec, parse_grid_args, run_sweep

REQUESTS = int(os.environ.get("KVSIM_SWEEP_BENCH_REQUESTS", "1000000"))
GRID = ["block_size=8,16,32,64", "policy=vllm,reserve,orca-oracle", "enable_prefix_caching=false,true"]
SCALING_GRID = ["block_size=16,32", "policy=vllm,orca-oracle"]
_NUMBERS: dict[str, float] = {}


def spec(grid: list[str]) -> SweepSpec:
    """ShareGPT-like requests at 2 req/s on the paper's OPT-13B / 12 GiB / roofline setup."""
    return SweepSpec(
        name="bench",
        grid=parse_grid_args(grid),
        base={"model": "opt-13b", "gpu": "a100-40gb", "kv_cache_bytes": 12 * 2**30, "time_model": "linear"},
        workloads=["sharegpt:arrival_rate=2"],
        requests=REQUESTS,
        seeds=1,
    )


def _write() -> None:
    if not RESULTS_README.exists() or "grid_s" not in _NUMBERS:
        return
    n = _NUMBERS
    block = "\n".join(
        [
            "<!-- sweep-bench:begin -->",
            f"Command: `python -m pytest bench/test_bench_sweep.py --benchmark-enable` "
            f"({REQUESTS:,} requests per point), {_when()}. Machine: {_machine()}.",
            "",
            "| measurement | value | target |",
            "|---|---:|---:|",
            f"| 24-point grid ({' x '.join(GRID)}), threads, 2 workers | {n['grid_s']:.1f} s | < 120 s |",
            f"| per point (median engine + summary) | {n['point_s']:.2f} s | |",
            f"| 4-point grid, 1 worker | {n.get('one_s', float('nan')):.1f} s | |",
            f"| 4-point grid, 2 workers | {n.get('two_s', float('nan')):.1f} s | |",
            f"| speed-up of 2 workers over 1 | {n.get('speedup', float('nan')):.2f}x | >= 1.7x |",
            "",
            f"Load average (1 min) before the grid: {n.get('load_before', float('nan')):.2f}, before the "
            f"scaling run: {n.get('load_scaling', float('nan')):.2f} (above ~0.5 means another process shared "
            "the 2 cores and the numbers are pessimistic).",
            "<!-- sweep-bench:end -->",
        ]
    )
    text = RESULTS_README.read_text()
    if "<!-- sweep-bench:begin -->" in text:
        text = re.sub(
            r"<!-- sweep-bench:begin -->.*?<!-- sweep-bench:end -->", lambda _: block, text, flags=re.S
        )
    else:
        text = text.rstrip("\n") + "\n\n## Sweep throughput\n\n" + block + "\n"
    RESULTS_README.write_text(text)


@pytest.mark.slow
def test_bench_sweep_24_points_threads(benchmark):
    benchmark.group = "sweep"
    benchmark.extra_info["what"] = f"24 points x {REQUESTS:,} requests, threads, 2 workers"
    _NUMBERS["load_before"] = os.getloadavg()[0]
    outcome = benchmark.pedantic(
        lambda: run_sweep(spec(GRID), executor="threads", workers=2, progress=False), rounds=1, iterations=1
    )
    frame = outcome.frame
    assert frame.height == 24
    assert (frame["completed"] + frame["rejected"] == REQUESTS).all()
    _NUMBERS["grid_s"] = outcome.wall_s
    _NUMBERS["point_s"] = float(frame["wall_s"].median())  # type: ignore[arg-type]
    _write()
    if REQUESTS == 1_000_000:  # a target, reported met or not: wall-clock time is not asserted
        target(
            "24-point sweep grid of 1,000,000 requests per point, 2 thread workers", outcome.wall_s, 120, "s"
        )


@pytest.mark.slow
def test_bench_sweep_two_workers_scale(benchmark):
    benchmark.group = "sweep-scaling"
    benchmark.extra_info["what"] = f"4 points x {REQUESTS:,} requests, 1 vs 2 thread workers"
    run_sweep(spec(["block_size=16"]), workers=1, progress=False)  # build the workload once (cached)
    _NUMBERS["load_scaling"] = os.getloadavg()[0]

    def both() -> tuple[float, float]:
        t0 = time.perf_counter()
        run_sweep(spec(SCALING_GRID), executor="threads", workers=1, progress=False)
        t1 = time.perf_counter()
        run_sweep(spec(SCALING_GRID), executor="threads", workers=2, progress=False)
        return t1 - t0, time.perf_counter() - t1

    one, two = benchmark.pedantic(both, rounds=1, iterations=1)
    _NUMBERS.update(one_s=one, two_s=two, speedup=one / two)
    _write()
    if REQUESTS == 1_000_000:
        target("sweep speed-up of 2 thread workers over 1 (4 points)", one / two, 1.7, "x", True)
