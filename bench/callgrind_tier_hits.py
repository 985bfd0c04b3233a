"""A CPU tier that is hit, under callgrind (results/README.md §CPU tier): 20,000 requests of the million-request
benchmark's setup (rate 100/s, ShareGPT-like lengths, 1,500 blocks of 16 tokens, caching on) with 40 system
prompts of 480 tokens shared by 80 % of them, and a CPU tier of CHUNKS chunks (one block each, an H100's 64 GB/s
host link for Llama-3.1-8B's 2 MiB blocks): about a third of the prompt tokens are loaded from the tier.

    valgrind --tool=callgrind --callgrind-out-file=cg.out python -m bench.callgrind_tier_hits [CHUNKS]
    callgrind_annotate --inclusive=yes cg.out | grep 'engine::run \\['
"""

import sys

import kvsim
from kvsim.workloads import synthetic


def main(chunks: int = 1_000_000) -> None:
    w = synthetic(
        20_000,
        arrival_rate=100,
        lengths="sharegpt-paper",
        num_system_prompts=40,
        system_prompt_len=480,
        sharing_ratio=0.8,
        seed=7,
    )
    cfg = kvsim.SimConfig(num_blocks=1500, block_size=16, enable_prefix_caching=True)
    cfg = cfg.replace(kv_offloading_chunks=chunks, kv_offloading_ps_per_block=32_768_000)
    r = kvsim.simulate(w, cfg)
    c = r.raw.counters
    print(r.summary["num_steps"], c["cpu_hit_tokens"], c["num_loads"], c["cpu_evictions"])


if __name__ == "__main__":
    main(int(float(sys.argv[1])) if len(sys.argv) > 1 else 1_000_000)
