"""A run's fixed cost through the binding: how long `kvsim.simulate` of a few requests takes, and a
streamed run's chunk of one row (results/README.md, section Ctrl-C: every run enters the core on a worker
thread watched for Ctrl-C, and the watcher once slept up to its 20 ms poll after the work was done).

    python -m bench.call_latency [CALLS]

Prints the median and the 90th percentile of CALLS (default 200) calls of `kvsim.simulate` on 5 ShareGPT-like
requests (Rust backend), and of `simulate_stream`'s time per chunk over 400 requests in chunks of one row.
"""

import math
import statistics
import sys
import time

import kvsim
from kvsim.engine.streaming import simulate_stream
from kvsim.workloads import synthetic


def _summary(xs: list[float]) -> str:
    xs = sorted(xs)
    return (
        f"median {1000 * statistics.median(xs):.2f} ms, p90 {1000 * xs[math.ceil(0.9 * len(xs)) - 1]:.2f} ms"
    )


def main(calls: int = 200) -> None:
    cfg = kvsim.SimConfig(num_blocks=300, block_size=16)
    few = synthetic(5, arrival_rate=10, lengths="sharegpt-paper", seed=1)
    kvsim.simulate(few, cfg)  # (warm: imports, the first call's setup)
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        kvsim.simulate(few, cfg)
        times.append(time.perf_counter() - t)
    print(f"simulate, 5 requests: {_summary(times)} a call ({calls} calls)")
    w = synthetic(400, arrival_rate=200, lengths="sharegpt-paper", seed=1)
    per_chunk = []
    for _ in range(max(1, calls // 40)):
        t = time.perf_counter()
        simulate_stream(w, cfg, chunk_size=1, independent_chunks=True, rows="memory")
        per_chunk.append((time.perf_counter() - t) / len(w))
    print(f"simulate_stream, 400 requests in chunks of one row: {_summary(per_chunk)} a chunk")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
