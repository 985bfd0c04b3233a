"""The training runs of the extension's profile-guided build (`scripts/pgo_build.sh`; DESIGN.md §The
build: profile-guided): the engine's paths a user's runs take, each run a few seconds in the instrumented
build, so that the compiler lays out and inlines for where the time goes. Deliberately not the
benchmarks' workloads (`bench/`): other seeds, request counts, pools and tier sizes, plus paths the
benchmarks never take (a tier hit often, a model and GPU with the roofline clock, a hybrid model, a fleet,
P/D, another policy).

    python scripts/pgo_train.py
"""

from __future__ import annotations

import time

import kvsim
from kvsim.workloads import synthetic


def main() -> None:
    t0 = time.perf_counter()
    # Token-counted pools on the ticks clock: ShareGPT-like traffic under pressure, caching on and off,
    # with a CPU tier of 2^23 tokens (fills, rarely hit) and one of 2^16 tokens behind shared prompts
    # (hit often, loads wait).
    pool = kvsim.SimConfig(num_blocks=1200, block_size=16, enable_prefix_caching=True)
    tier = {"kv_offloading_ps_per_block": 30_000_000}
    sharegpt = synthetic(150_000, arrival_rate=90, lengths="sharegpt-paper", seed=11)
    kvsim.simulate(sharegpt, pool)
    kvsim.simulate(sharegpt, pool.replace(enable_prefix_caching=False))
    kvsim.simulate(sharegpt, pool.replace(kv_offloading_chunks=2**23 // 16, **tier))
    shared = synthetic(
        40_000, arrival_rate=60, num_system_prompts=24, system_prompt_len=1200, turns=2, seed=12
    )
    kvsim.simulate(shared, pool.replace(num_blocks=900))
    kvsim.simulate(shared, pool.replace(num_blocks=900, kv_offloading_chunks=2**16 // 16, **tier))
    kvsim.simulate(
        shared,
        pool.replace(
            num_blocks=900, kv_offloading_chunks=2**14 // 16, kv_offloading_eviction_policy="arc", **tier
        ),
    )
    kvsim.simulate(sharegpt, pool.replace(policy="orca-max"))
    # Models on GPUs (the roofline clock): dense, hybrid sliding-window, a CPU tier sized in bytes, a
    # fleet behind a prefix-aware router, prefill/decode disaggregation.
    chat = synthetic(20_000, arrival_rate=20, lengths="sharegpt-paper", seed=13)
    llama = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb")
    kvsim.simulate(chat, llama)
    kvsim.simulate(chat, llama.replace(kv_offloading_size="8GiB"))
    kvsim.simulate(chat, kvsim.SimConfig(model="gemma-3-12b", gpu="h100-80gb"))
    kvsim.simulate_cluster(shared, llama.replace(replicas=4, router="prefix-affinity"))
    kvsim.simulate_cluster(chat, llama.replace(replicas=3, prefill_replicas=1))
    print(f"pgo_train: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
