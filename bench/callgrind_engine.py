"""The engine's instruction count under callgrind (results/README.md): N requests (default 100,000) of the
million-request benchmark's setup, one `kvsim.simulate`.

    valgrind --tool=callgrind --callgrind-out-file=cg.out python -m bench.callgrind_engine 100000
    callgrind_annotate --inclusive=yes cg.out | grep 'engine::run \\['
"""

import sys

import kvsim
from kvsim.workloads import synthetic


def main(n: int) -> None:
    w = synthetic(n, arrival_rate=100, lengths="sharegpt-paper", seed=7)
    cfg = kvsim.SimConfig(num_blocks=1500, block_size=16, enable_prefix_caching=True)
    r = kvsim.simulate(w, cfg)
    print(r.summary["num_steps"], r.summary["preemptions"])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
