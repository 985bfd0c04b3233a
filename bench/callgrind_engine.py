"""The engine's instruction count under callgrind (results/README.md): N requests (default 100,000) of the
million-request benchmark's setup, one `kvsim.simulate`; with a second argument T, with a CPU tier of T
tokens (DESIGN.md §CPU tier: `kv_offloading_chunks` = T / 16, its transfers on a 64 GB/s link).

    valgrind --tool=callgrind --callgrind-out-file=cg.out python -m bench.callgrind_engine 100000 [T]
    callgrind_annotate --inclusive=yes cg.out | grep 'engine::run \\['
"""

import sys

import kvsim
from kvsim.workloads import synthetic


def main(n: int, tier_tokens: int = 0) -> None:
    w = synthetic(n, arrival_rate=100, lengths="sharegpt-paper", seed=7)
    cfg = kvsim.SimConfig(num_blocks=1500, block_size=16, enable_prefix_caching=True)
    if tier_tokens:
        # Llama-3.1-8B's 2 MiB blocks over an H100's 64 GB/s: 32.8 us a block.
        cfg = cfg.replace(kv_offloading_chunks=tier_tokens // 16, kv_offloading_ps_per_block=32_768_000)
    r = kvsim.simulate(w, cfg)
    print(r.summary["num_steps"], r.summary["preemptions"])


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 100_000,
        int(float(sys.argv[2])) if len(sys.argv) > 2 else 0,
    )
