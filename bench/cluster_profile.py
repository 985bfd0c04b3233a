"""One side of the cluster benchmark (`bench/test_bench_cluster.py`), once, for a profiler:
`python -m bench.cluster_profile N ROUTER` runs N ShareGPT-like requests over 16 replicas behind ROUTER
(`round-robin`, `prefix-affinity`, ...), `python -m bench.cluster_profile N singles` the 16 single runs
of N / 16 requests, with the benchmark's inputs and configs; `python -m bench.cluster_profile N pd-ROUTER`
the disaggregated fleet of `bench/test_bench_pd.py` (4 prefill : 12 decode replicas) on the same N requests
(`kvsim_core::cluster::pd::run_pd`). Run it under `valgrind --tool=callgrind`
(inclusive instructions of `kvsim_core::cluster::run_cluster` against those of the 16
`kvsim_core::engine::run`) or `perf record`; it prints the wall time and the steps taken.
"""

from __future__ import annotations

import sys
import time

from bench.test_bench_cluster import CONFIG, REPLICAS, Router, make_inputs
from bench.test_bench_pd import run_pd
from kvsim.engine.rust_engine import run, run_cluster


def main(argv: list[str]) -> None:
    if len(argv) != 2 or not argv[0].isdigit():
        raise SystemExit("usage: python -m bench.cluster_profile N ROUTER|pd-ROUTER|singles")
    n, which = int(argv[0]), argv[1]
    fleet, singles = make_inputs(n)
    start = time.perf_counter()
    if which == "singles":
        steps = sum(int(run(inp, CONFIG).counters["num_steps"]) for inp in singles)
    elif which.startswith("pd-"):
        res = run_pd(fleet, which[3:])
        steps = sum(int(c["num_steps"]) for c in res["counters"])
    else:
        res = run_cluster(fleet, [CONFIG] * REPLICAS, Router(which))
        steps = sum(int(c["num_steps"]) for c in res["counters"])
    print(f"{which}: {time.perf_counter() - start:.3f} s, {steps:,} steps")


if __name__ == "__main__":
    main(sys.argv[1:])
