"""Data-parallel groups' cost (DESIGN.md §Data-parallel groups, "Fast paths"): Qwen3-30B-A3B at dp 2 with
expert parallelism on an H100, 3,000 ShareGPT-like requests (`sharegpt-paper`, seed 0) over two ranks at
20 and 200 requests/s, the least-loaded and round-robin routers, the Rust cluster run grouped (`dp_group`
2: the ranks step together) and apart (`dp_group` 1: the same two ranks as independent replicas), best
of R runs each (default 3); other rates may follow R. Prints each case's wall time, the steps a rank took
and a digest of every output column and counter, so that two builds' runs can be checked equal as well as
timed:

    PYTHONPATH=$PWD/python python -m bench.dp_groups [R [RATE ...]]

`one RATE ROUTER GROUP` runs one case once and prints nothing, for callgrind (results/README.md, "DP groups'
fast paths": `kvsim_core::cluster::run_cluster`'s inclusive instructions).
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import time

import numpy as np

import kvsim
from kvsim.engine import rust_engine
from kvsim.engine.cluster import prepare, router_spec
from kvsim.workloads import synthetic

N = 3000
RATES = (20.0, 200.0)
ROUTERS = ("least-loaded", "round-robin")


def config() -> kvsim.SimConfig:
    return kvsim.SimConfig(
        model="qwen3-30b-a3b", gpu="h100-80gb", enable_expert_parallel=True, data_parallel_size=2
    )


def digest(res) -> str:
    h = hashlib.sha256()
    for k in sorted(res["columns"]):
        h.update(k.encode())
        h.update(np.ascontiguousarray(np.asarray(res["columns"][k])).tobytes())
    for c in res["counters"]:
        h.update(repr(sorted(dict(c).items())).encode())
    return h.hexdigest()[:12]


def main(argv: list[str]) -> None:
    if argv[:1] == ["one"]:
        rate, router, group = float(argv[1]), argv[2], int(argv[3])
        cfg = config()
        spec = dataclasses.replace(router_spec(cfg), name=router, dp_group=group)
        inp = prepare(synthetic(N, arrival_rate=rate, lengths="sharegpt-paper", seed=0), cfg)
        rust_engine.run_cluster(inp, [cfg, cfg], spec)
        return
    repeats = int(argv[0]) if argv else 3
    rates = tuple(float(x) for x in argv[1:]) or RATES
    cfg = config()
    for rate in rates:
        w = synthetic(N, arrival_rate=rate, lengths="sharegpt-paper", seed=0)
        inp = prepare(w, cfg)
        for router in ROUTERS:
            for group, label in ((2, "grouped"), (1, "apart")):
                spec = dataclasses.replace(router_spec(cfg), name=router, dp_group=group)
                best = float("inf")
                for _ in range(repeats):
                    start = time.perf_counter()
                    res = rust_engine.run_cluster(inp, [cfg, cfg], spec)
                    best = min(best, time.perf_counter() - start)
                steps = [int(c["num_steps"]) for c in res["counters"]]
                print(
                    f"{rate:5.0f} req/s  {router:12s}  {label:7s}  {best * 1e3:8.2f} ms  "
                    f"steps {steps}  digest {digest(res)}",
                    flush=True,
                )


if __name__ == "__main__":
    main(sys.argv[1:])
