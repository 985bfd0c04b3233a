"""One side of the cluster benchmark (`bench/test_bench_cluster.py`), once, for a profiler:
`python -m bench.cluster_profile N ROUTER` runs N ShareGPT-like requests over 16 replicas behind ROUTER
(`round-robin`, `prefix-affinity`, ...), `python -m bench.cluster_profile N singles` the 16 single runs
of N / 16 requests, with the benchmark's inputs and configs. Run it under `valgrind --tool=callgrind`
(inclusive instructions of `kvsim_core::cluster::run_cluster` against those of the 16
`kvsim_core::engine::run`) or `perf record`; it prints the wall time and the steps taken.
"""

from __future__ import annotations

import sys
import time

from bench.test_bench_cluster import CONFIG, RATE_PER_REPLICA, REPLICAS, Router
from kvsim.engine.engine_input import prepare
from kvsim.engine.rust_engine import run, run_cluster
from kvsim.workloads import synthetic


def main(argv: list[str]) -> None:
    if len(argv) != 2 or not argv[0].isdigit():
        raise SystemExit("usage: python -m bench.cluster_profile N ROUTER|singles")
    n, which = int(argv[0]), argv[1]
    if which == "singles":
        inputs = [
            prepare(
                synthetic(
                    n // REPLICAS, arrival_rate=RATE_PER_REPLICA, lengths="sharegpt-paper", seed=100 + r
                ),
                CONFIG,
            )
            for r in range(REPLICAS)
        ]
        start = time.perf_counter()
        steps = sum(int(run(inp, CONFIG).counters["num_steps"]) for inp in inputs)
    else:
        fleet = prepare(
            synthetic(n, arrival_rate=RATE_PER_REPLICA * REPLICAS, lengths="sharegpt-paper", seed=7), CONFIG
        )
        start = time.perf_counter()
        res = run_cluster(fleet, [CONFIG] * REPLICAS, Router(which))
        steps = sum(int(c["num_steps"]) for c in res["counters"])
    print(f"{which}: {time.perf_counter() - start:.3f} s, {steps:,} steps")


if __name__ == "__main__":
    main(sys.argv[1:])
