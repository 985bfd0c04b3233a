"""Cluster speed (issue 15 §5): 1,000,000 ShareGPT-like requests over 16 replicas against 16 single-replica
runs of 62,500 requests each, for round-robin and prefix-affinity; the target is a ratio of at most 1.5x.

Each replica sees the single-replica benchmark's load (`bench/test_bench_engine.py`: 100 requests/s,
1,500 blocks of 16, caching on, 1 ms iterations): the cluster's arrivals come at 16 x 100 requests/s.
Every side times the Rust core only (`kvsim.engine.rust_engine.run_cluster` against 16
`kvsim.engine.rust_engine.run` calls on inputs prepared beforehand). The sides take turns: after a
warm-up of each, `ROUNDS` rounds of singles, round-robin and prefix-affinity, one in each of the six
orders of the three (each side in each place and after each other side twice), and each side's median
is reported; a side's result is freed outside its timed span. This VM's speed drifts by tens of percent between minutes; sides
timed one after the other (three rounds of one, then three of the next) put that drift into the ratio.
At the full size the numbers go into results/README.md between the cluster-bench markers.

`KVSIM_CLUSTER_BENCH_REQUESTS` shrinks the run for a smoke check (the table is written only at the full
1,000,000): `KVSIM_CLUSTER_BENCH_REQUESTS=16000 python -m pytest bench/test_bench_cluster.py
--benchmark-enable -q`. The full run: `python -m pytest bench/test_bench_cluster.py --benchmark-enable`
(release build, a quiet machine); with `--benchmark-disable` each side runs once, untimed.
"""

from __future__ import annotations

import itertools
import os
import re
import statistics
import time
from dataclasses import dataclass

import pytest

import kvsim
from bench.conftest import RESULTS_README, _machine, _when
from kvsim.engine.engine_input import prepare
from kvsim.engine.rust_engine import run, run_cluster
from kvsim.workloads import synthetic

REQUESTS = int(os.environ.get("KVSIM_CLUSTER_BENCH_REQUESTS", "1000000"))
REPLICAS = 16
RATE_PER_REPLICA = 100.0
CONFIG = kvsim.SimConfig(num_blocks=1500, block_size=16, enable_prefix_caching=True)
TARGET = 1.5
ROUNDS = 6  # every order of the three sides (`itertools.permutations`)
ROUTERS = ("round-robin", "prefix-affinity")


@dataclass(frozen=True)
class Router:
    """The fields `run_cluster` reads (the reference's `RouterSpec`)."""

    name: str
    seed: int = 0
    refresh_ps: int = 0
    prefix_load_cap: float = 1.5
    weights: dict[str, float] | None = None
    tie_break: str = "random"


def make_inputs(requests: int) -> tuple:
    """The benchmark's prepared inputs: `requests` rows for the fleet and 16 single runs of a 16th each."""
    fleet = prepare(
        synthetic(requests, arrival_rate=RATE_PER_REPLICA * REPLICAS, lengths="sharegpt-paper", seed=7),
        CONFIG,
    )
    singles = [
        prepare(
            synthetic(
                requests // REPLICAS, arrival_rate=RATE_PER_REPLICA, lengths="sharegpt-paper", seed=100 + r
            ),
            CONFIG,
        )
        for r in range(REPLICAS)
    ]
    return fleet, singles


@pytest.fixture(scope="module")
def inputs():
    return make_inputs(REQUESTS)


def test_bench_cluster_of_sixteen_against_sixteen_single_runs(benchmark, inputs):
    # The sides are timed here, taking turns, which pytest-benchmark's rounds of one function cannot
    # do; its fixture times the warm-up and carries its options (disabled, `--benchmark-skip`).
    fleet, singles = inputs
    configs = [CONFIG] * REPLICAS
    sides = {
        "singles": lambda: [run(inp, CONFIG) for inp in singles],
        **{r: (lambda r=r: run_cluster(fleet, configs, Router(r))) for r in ROUTERS},
    }
    # The warm-up, each side once, checked: pytest-benchmark's own row (its only run under
    # --benchmark-disable); the ratios come from the rounds after it.
    benchmark.group = "cluster"
    outs = benchmark.pedantic(lambda: {side: f() for side, f in sides.items()}, rounds=1, iterations=1)
    assert all((o.status == 0).all() for o in outs["singles"])
    for router in ROUTERS:
        res = outs[router]
        assert (res["columns"]["status"] == 0).all()
        # Every replica took part (its share of the load).
        counts = [int((res["columns"]["replica"] == r).sum()) for r in range(REPLICAS)]
        assert min(counts) > 0, (router, counts)
    del outs
    if benchmark.disabled:
        return
    times: dict[str, list[float]] = {side: [] for side in sides}
    # Every order of the three sides once: each side in each place, after each other side, twice.
    for order in itertools.permutations(sides):
        for side in order:
            start = time.perf_counter()
            result = sides[side]()
            times[side].append(time.perf_counter() - start)
            del result  # freed outside the timed span
    medians = {side: statistics.median(t) for side, t in times.items()}
    for router in ROUTERS:
        print(
            f"\n{router}: cluster {medians[router]:.3f} s, {REPLICAS} single runs {medians['singles']:.3f} s, "
            f"ratio {medians[router] / medians['singles']:.2f}x; rounds "
            + ", ".join(f"{t:.2f}" for t in times[router])
            + " against "
            + ", ".join(f"{t:.2f}" for t in times["singles"])
        )
    _write(medians, times)


def _write(medians: dict[str, float], times: dict[str, list[float]]) -> None:
    if REQUESTS != 1_000_000 or not RESULTS_README.exists():
        return
    singles = medians["singles"]
    rows = []
    for router in ROUTERS:
        ratio = medians[router] / singles
        met = "yes" if ratio <= TARGET else "NO"
        rows.append(
            f"| {router} | {medians[router]:.2f} s | {singles:.2f} s | {ratio:.2f}x | <= {TARGET}x | {met} | "
            + ", ".join(f"{t:.2f}" for t in times[router])
            + " |"
        )
    block = "\n".join(
        [
            "<!-- cluster-bench:begin -->",
            "Command: `python -m pytest bench/test_bench_cluster.py --benchmark-enable` "
            f"({REQUESTS:,} requests over {REPLICAS} replicas against {REPLICAS} runs of {REQUESTS // REPLICAS:,}; "
            f"Rust core only; {ROUNDS} rounds after a warm-up, the sides taking turns, medians), {_when()}. "
            f"Machine: {_machine()}. "
            f"Load average (1 min) at the end: {os.getloadavg()[0]:.2f}. The single runs' rounds: "
            + ", ".join(f"{t:.2f}" for t in times["singles"])
            + " s.",
            "",
            "| router | cluster | 16 single runs | ratio | target | met | cluster rounds (s) |",
            "|---|---:|---:|---:|---:|---|---|",
            *rows,
            "<!-- cluster-bench:end -->",
        ]
    )
    text = RESULTS_README.read_text()
    if "<!-- cluster-bench:begin -->" in text:
        text = re.sub(
            r"<!-- cluster-bench:begin -->.*?<!-- cluster-bench:end -->", lambda _: block, text, flags=re.S
        )
    else:
        text = text.rstrip("\n") + "\n\n## Cluster speed\n\n" + block + "\n"
    RESULTS_README.write_text(text)
