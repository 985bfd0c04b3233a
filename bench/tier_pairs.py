"""The CPU tier's wall-clock cost on the million-request benchmark, the Rust engine alone (results/README.md
§CPU tier): one prepared input of the benchmark's setup run with the tier off and with a 10^8-token tier
(`callgrind_engine.with_tier`), alternating N times (default 10) after a warm-up of each. Prints the median
of the N pairs' ratios (each pair run within a second or two of each other, so this VM's drift between
minutes cancels) with its quartiles, the medians of each, and each run's page faults (the allocator's fresh
mappings, which the kernel zeroes: a buffer of 32 MiB or more is mapped afresh every run).

    python -m bench.tier_pairs [N]

CPU time of the process (`time.process_time`: the engine's thread; the main thread waits).
"""

import resource
import sys
import time

import kvsim
from kvsim.engine import rust_engine
from kvsim.engine.engine_input import prepare
from kvsim.workloads import synthetic

from .callgrind_engine import with_tier


def main(n: int = 10) -> None:
    cfg = kvsim.SimConfig(num_blocks=1500, block_size=16, enable_prefix_caching=True)
    w = synthetic(1_000_000, arrival_rate=100, lengths="sharegpt-paper", seed=7)
    tier = with_tier(cfg, 10**8)
    runs = {"off": (prepare(w, cfg), cfg), "on": (prepare(w, tier), tier)}
    for inp, c in runs.values():
        rust_engine.run(inp, c)  # warm-ups, untimed
    secs: dict[str, list[float]] = {"off": [], "on": []}
    faults: dict[str, list[int]] = {"off": [], "on": []}
    for _ in range(n):
        for name, (inp, c) in runs.items():
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.process_time()
            rust_engine.run(inp, c)
            secs[name].append(time.process_time() - t0)
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    pairs = sorted(a / b for a, b in zip(secs["on"], secs["off"], strict=True))
    med = {k: sorted(v)[len(v) // 2] for k, v in secs.items()}
    print(
        f"tier on / off, median of {n} pairs: {pairs[len(pairs) // 2]:.3f} "
        f"(quartiles {pairs[len(pairs) // 4]:.3f}-{pairs[(3 * len(pairs)) // 4]:.3f}); "
        f"medians off {med['off']:.3f} s, on {med['on']:.3f} s; "
        f"page faults a run off {sorted(faults['off'])[n // 2]:,}, on {sorted(faults['on'])[n // 2]:,}"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
