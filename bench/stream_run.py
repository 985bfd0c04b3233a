"""One run for the streaming benchmark, in its own process so that its peak RSS is its own.

    python -m bench.stream_run stream|memory N

`stream`: `kvsim.simulate_stream` over `synthetic_chunks(N)` (chunks of 2**20 requests, independent),
keeping only the summary; `memory`: `synthetic(N)` then `kvsim.simulate`. Both use the million-request
benchmark's setup (ShareGPT-like lengths, Poisson at 100 requests/s, 1,500 blocks of 16, caching on).
Prints one JSON line: wall time, peak RSS (`getrusage`), and a few summary numbers.
"""

from __future__ import annotations

import json
import resource
import sys
import time

import kvsim
from kvsim.engine.streaming import synthetic_chunks
from kvsim.workloads import synthetic

CONFIG = kvsim.SimConfig(num_blocks=1500, block_size=16, enable_prefix_caching=True)
WORKLOAD = {"arrival_rate": 100, "lengths": "sharegpt-paper", "seed": 7}


def main() -> None:
    mode, n = sys.argv[1], int(sys.argv[2])
    start = time.perf_counter()
    if mode == "stream":
        res = kvsim.simulate_stream(
            synthetic_chunks(n, 1 << 20, **WORKLOAD), CONFIG, rows="none", independent_chunks=True
        )
    else:
        res = kvsim.simulate(synthetic(n, **WORKLOAD), CONFIG)
    wall = time.perf_counter() - start
    s = res.summary
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    keys = ("completed", "num_steps", "preemptions", "e2e_s_p50", "e2e_s_p99", "ttft_s_mean")
    print(json.dumps({"mode": mode, "n": n, "wall_s": wall, "peak_rss_mib": peak, **{k: s[k] for k in keys}}))


if __name__ == "__main__":
    main()
