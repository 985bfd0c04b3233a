"""Peak memory of `kvsim.simulate_cluster`, aggregated against disaggregated (issue 28 item 2).

    python -m bench.pd_memory N FLEET ROUTER [engine]

FLEET is `agg` (16 aggregated replicas) or `pd` (4 prefill : 12 decode replicas, every request
disaggregated, Llama-3.1-8B's 2 MiB blocks over 50 GB/s: `bench/test_bench_pd.py`'s fleet); ROUTER is
`round-robin` or `prefix-affinity`. The workload is the fleet benchmarks' (`bench/test_bench_cluster.py`):
N ShareGPT-like requests at 1,600/s (100/s a replica), 1,500 blocks of 16 a replica, caching on. As
`bench/memory_phases.py` does: builds the workload, returns freed heap (`malloc_trim`), resets the
kernel's peak-RSS mark (`/proc/self/clear_refs`), runs one `simulate_cluster` call and prints its peak
RSS above the RSS after the workload was built, in bytes per request. Linux only. Run each point in its
own process (one at a time: the peak is the process's). `engine` measures the engine's call alone
(`kvsim.engine.rust_engine.run_cluster` on the prepared input, above the RSS after `prepare`): what the
Rust driver holds, without the result frames.
"""

from __future__ import annotations

import gc
import sys
import time

import kvsim
from bench.memory_phases import libc, rss
from bench.test_bench_cluster import CONFIG, RATE_PER_REPLICA, REPLICAS
from bench.test_bench_pd import LINK_PS_PER_BLOCK, PREFILL
from kvsim.engine import cluster, cluster_pd, rust_engine
from kvsim.engine.engine_input import prepare
from kvsim.workloads import synthetic

FLEETS = ("agg", "pd")
ROUTERS = ("round-robin", "prefix-affinity")


def main() -> None:
    engine = sys.argv[4:] == ["engine"]
    if len(sys.argv) != 4 + engine or sys.argv[2] not in FLEETS or sys.argv[3] not in ROUTERS:
        print(
            f"usage: python -m bench.pd_memory N {'|'.join(FLEETS)} {'|'.join(ROUTERS)} [engine]",
            file=sys.stderr,
        )
        raise SystemExit(2)
    n, fleet, router = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    w = synthetic(n, arrival_rate=RATE_PER_REPLICA * REPLICAS, lengths="sharegpt-paper", seed=7)
    own = sum(a.nbytes for a in w.columns().values()) / n
    if fleet == "agg":
        kwargs: dict = {"replicas": REPLICAS}
    else:
        kwargs = {
            "replicas": REPLICAS - PREFILL,
            "prefill_replicas": PREFILL,
            "pd_threshold_tokens": 0,
            "pd_link_latency_s": 0.0,
            "pd_link_ps_per_block": LINK_PS_PER_BLOCK,
        }
    if engine:
        configs, _ = cluster._configs(CONFIG, kwargs.pop("replicas"), router, kwargs)
        spec = cluster.router_spec(configs[0])
        pd = cluster_pd._pd_spec(configs, spec)
        inp = prepare(w, configs[0])
        what, above = "run_cluster", "the prepared input"
    else:
        what, above = "simulate_cluster", "the workload"
    gc.collect()
    libc.malloc_trim(0)
    base = rss()[0]
    with open("/proc/self/clear_refs", "w") as c:
        c.write("5")  # resets VmHWM to the current RSS
    t = time.perf_counter()
    if engine:
        out = rust_engine.run_cluster(inp, configs, spec, pd=pd)
        done = int((out["columns"]["status"] == 0).sum())
    else:
        res = kvsim.simulate_cluster(w, CONFIG, router=router, **kwargs)
        done = int((res.requests["status"] == "finished").sum())
    dt = time.perf_counter() - t
    now, peak = rss()
    print(
        f"{n:,} requests, {fleet} {router}, {what}: peak {(peak - base) / n:6.1f} B/request above {above} "
        f"({own:.1f} B/request of columns), {(now - base) / n:6.1f} after it; {done:,} finished; {dt:.1f} s"
    )


if __name__ == "__main__":
    main()
