"""Disaggregated fleet speed (issue 28 item 7): ShareGPT-like requests over a 16-replica disaggregated
fleet (4 prefill : 12 decode replicas) against 16 single-replica runs of a 16th of them each (the 16
singles of `bench/test_bench_cluster.py`: the same inputs, `make_inputs`); the target is a ratio of at
most 2x.

The split: under the benchmark's time model (1 ms a step, whatever the batch) a prompt takes one or two
steps of a prefill replica and its output ~200 steps of a decode replica, so a decode-heavy split is the
one that serves this load: 4 prefill replicas see 400 requests/s each (one prefill every 2.5 steps), the
12 decode replicas 133 requests/s each, near the singles' 100. Every request is disaggregated
(`threshold_tokens` 0). Its KV blocks cross a link at Llama-3.1-8B's 2 MiB a block of 16 tokens (32 layers x
8 KV heads x 128 x 2 (K, V) x 2 bytes x 16 tokens, its config.json) over 50 GB/s (the default
`pd_link_bandwidth`, DESIGN.md §Prefill/decode disaggregation): 41.94 us a block. The routers: round-robin
(reads nothing) and prefix-affinity (reads every replica's prefix map, both pools).

The sides take turns as in `test_bench_cluster.py` (every order, medians); the stable measure is
callgrind's instruction count (`python -m bench.cluster_profile 100000 pd-round-robin`, results/README.md
§Disaggregated fleet speed). `KVSIM_PD_BENCH_REQUESTS` sets the size (default 100,000):
`python -m pytest bench/test_bench_pd.py --benchmark-enable -s`.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time

import pytest

from bench.test_bench_cluster import CONFIG, REPLICAS, Router, make_inputs
from kvsim.engine.rust_engine import run, run_cluster
from kvsim.reference.cluster import PdSpec

REQUESTS = int(os.environ.get("KVSIM_PD_BENCH_REQUESTS", "100000"))
PREFILL = 4
DECODE = REPLICAS - PREFILL
# Llama-3.1-8B: 2 * 32 layers * 8 KV heads * 128 dims * 2 bytes = 131,072 B a token; 16 tokens a block;
# over 50e9 B/s, in picoseconds.
LINK_PS_PER_BLOCK = round(131_072 * 16 * 10**12 / 50e9)
PD = PdSpec(PREFILL, threshold_tokens=0, link_latency_ps=0, link_ps_per_block=LINK_PS_PER_BLOCK)
TARGET = 2.0
ROUTERS = ("round-robin", "prefix-affinity")


def run_pd(fleet, router: str) -> dict:
    """The disaggregated side: `fleet` over DECODE decode and PREFILL prefill replicas behind `router`."""
    return run_cluster(fleet, [CONFIG] * DECODE, Router(router), PD)


@pytest.fixture(scope="module")
def inputs():
    return make_inputs(REQUESTS)


def test_bench_pd_fleet_of_sixteen_against_sixteen_single_runs(benchmark, inputs):
    fleet, singles = inputs
    sides = {
        "singles": lambda: [run(inp, CONFIG) for inp in singles],
        **{r: (lambda r=r: run_pd(fleet, r)) for r in ROUTERS},
    }
    benchmark.group = "pd"
    outs = benchmark.pedantic(lambda: {side: f() for side, f in sides.items()}, rounds=1, iterations=1)
    assert all((o.status == 0).all() for o in outs["singles"])
    for router in ROUTERS:
        cols = outs[router]["columns"]
        assert (cols["status"] == 0).all()
        # Every request went through a prefill replica (threshold 0), and every replica of each pool
        # took part.
        assert (cols["prefill_replica"] >= 0).all()
        for name, n in (("replica", DECODE), ("prefill_replica", PREFILL)):
            counts = [int((cols[name] == r).sum()) for r in range(n)]
            assert min(counts) > 0, (router, name, counts)
    del outs
    if benchmark.disabled:
        return
    times: dict[str, list[float]] = {side: [] for side in sides}
    for order in itertools.permutations(sides):
        for side in order:
            start = time.perf_counter()
            result = sides[side]()
            times[side].append(time.perf_counter() - start)
            del result  # freed outside the timed span
    medians = {side: statistics.median(t) for side, t in times.items()}
    for router in ROUTERS:
        ratio = medians[router] / medians["singles"]
        print(
            f"\npd {PREFILL}:{DECODE} {router}: {medians[router]:.3f} s, {REPLICAS} single runs "
            f"{medians['singles']:.3f} s, ratio {ratio:.2f}x (target <= {TARGET}x)"
        )
