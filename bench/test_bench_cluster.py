"""Cluster speed (issue 15 §5): 1,000,000 ShareGPT-like requests over 16 replicas against 16 single-replica
runs of 62,500 requests each, for round-robin and prefix-affinity; the target is a ratio of at most 1.5x.

Each replica sees the single-replica benchmark's load (`bench/test_bench_engine.py`: 100 requests/s,
1,500 blocks of 16, caching on, 1 ms iterations): the cluster's arrivals come at 16 x 100 requests/s.
Both sides time the Rust core only (`kvsim.engine.rust_engine.run_cluster` against 16 `kvsim.engine.rust_engine.run`
calls on inputs prepared beforehand), the median of three after a warm-up. At the full size the numbers
go into results/README.md between the cluster-bench markers.

`KVSIM_CLUSTER_BENCH_REQUESTS` shrinks the run for a smoke check (the table is written only at the full
1,000,000): `KVSIM_CLUSTER_BENCH_REQUESTS=16000 python -m pytest bench/test_bench_cluster.py
--benchmark-enable -q`. The full run: `python -m pytest bench/test_bench_cluster.py --benchmark-enable`
(release build, a quiet machine).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import pytest

import kvsim
from bench.conftest import RESULTS_README, _machine
from kvsim.engine.engine_input import prepare
from kvsim.engine.rust_engine import run, run_cluster
from kvsim.workloads import synthetic

REQUESTS = int(os.environ.get("KVSIM_CLUSTER_BENCH_REQUESTS", "1000000"))
REPLICAS = 16
RATE_PER_REPLICA = 100.0
CONFIG = kvsim.SimConfig(num_blocks=1500, block_size=16, enable_prefix_caching=True)
TARGET = 1.5
_NUMBERS: dict[str, float] = {}


@dataclass(frozen=True)
class Router:
    """The fields `run_cluster` reads (the reference's `RouterSpec`)."""

    name: str
    seed: int = 0
    refresh_ps: int = 0
    prefix_load_cap: float = 1.5
    weights: dict[str, float] | None = None
    tie_break: str = "random"


def _timed(benchmark, key: str, f):
    """`f`'s result, timed by pytest-benchmark (median of three after a warm-up) into `_NUMBERS[key]`."""
    result = benchmark.pedantic(f, rounds=3, iterations=1, warmup_rounds=1)
    if benchmark.stats:  # None under --benchmark-disable: ran once, untimed
        _NUMBERS[key] = benchmark.stats.stats.median
    return result


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


def test_bench_sixteen_single_runs(benchmark, inputs):
    _, singles = inputs
    benchmark.group = "cluster"
    benchmark.extra_info["what"] = f"{REPLICAS} runs of {REQUESTS // REPLICAS:,} requests"
    outs = _timed(benchmark, "singles_s", lambda: [run(inp, CONFIG) for inp in singles])
    assert all((o.status == 0).all() for o in outs)


@pytest.mark.parametrize("router", ["round-robin", "prefix-affinity"])
def test_bench_cluster_of_sixteen(benchmark, inputs, router):
    fleet, _ = inputs
    benchmark.group = "cluster"
    configs = [CONFIG] * REPLICAS
    spec = Router(router)
    benchmark.extra_info["what"] = f"{REQUESTS:,} requests, {REPLICAS} replicas, {router}"
    res = _timed(benchmark, router, lambda: run_cluster(fleet, configs, spec))
    replica = res["columns"]["replica"]
    assert (res["columns"]["status"] == 0).all()
    # Every replica took part (its share of the load).
    counts = [int((replica == r).sum()) for r in range(REPLICAS)]
    assert min(counts) > 0, counts
    if router in _NUMBERS and "singles_s" in _NUMBERS:
        ratio = _NUMBERS[router] / _NUMBERS["singles_s"]
        print(
            f"\n{router}: cluster {_NUMBERS[router]:.3f} s, {REPLICAS} single runs {_NUMBERS['singles_s']:.3f} s, ratio {ratio:.2f}x"
        )
    _write()


def _write() -> None:
    if REQUESTS != 1_000_000 or not RESULTS_README.exists() or "singles_s" not in _NUMBERS:
        return
    n = _NUMBERS
    rows = []
    for router in ("round-robin", "prefix-affinity"):
        if router in n:
            ratio = n[router] / n["singles_s"]
            met = "yes" if ratio <= TARGET else "NO"
            rows.append(
                f"| {router} | {n[router]:.2f} s | {n['singles_s']:.2f} s | {ratio:.2f}x | <= {TARGET}x | {met} |"
            )
    block = "\n".join(
        [
            "<!-- cluster-bench:begin -->",
            "Command: `python -m pytest bench/test_bench_cluster.py --benchmark-enable` "
            f"({REQUESTS:,} requests over {REPLICAS} replicas against {REPLICAS} runs of {REQUESTS // REPLICAS:,}; "
            f"Rust core only, medians of three). Machine: {_machine()}. Load average (1 min) at the end: "
            f"{os.getloadavg()[0]:.2f}.",
            "",
            "| router | cluster | 16 single runs | ratio | target | met |",
            "|---|---:|---:|---:|---:|---|",
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
