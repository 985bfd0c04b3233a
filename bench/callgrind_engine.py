"""The engine's instruction count under callgrind (results/README.md): N requests (default 100,000) of the
million-request benchmark's setup, one `kvsim.simulate`, under a time model (default `ticks`, the
benchmark's; `linear`: 1 ms + 0.1 us a token + 0.1 ns a context token; `roofline`: the same step times written
as a roofline, so the same schedule and only the roofline's evaluation differs); with a third argument T,
with a CPU tier of T tokens (DESIGN.md §CPU tier: `kv_offloading_chunks` = T / 16, Llama-3.1-8B's 2 MiB
blocks over an H100's 64 GB/s host link).

    valgrind --tool=callgrind --callgrind-out-file=cg.out python -m bench.callgrind_engine 100000 [MODE [T]]
    callgrind_annotate --inclusive=yes cg.out | grep 'engine::run \\['

MODE `workload` builds the workload and stops: the process's total (`callgrind_annotate cg.out | grep
'PROGRAM TOTALS'`) subtracted from a run's gives the instructions of the `kvsim.simulate` call itself, the
benchmark's measure (the engine, the input's preparation and the result's columns).
"""

import sys

import kvsim
from kvsim.workloads import synthetic

LINEAR = {"c0_ps": 10**9, "c_tok_ps": 10**5, "c_ctx_ps": 100}


def config(mode: str) -> kvsim.SimConfig:
    cfg = kvsim.SimConfig(num_blocks=1500, block_size=16, enable_prefix_caching=True)
    if mode == "ticks":
        return cfg
    if mode == "linear":
        return cfg.replace(time_model="linear", **LINEAR)
    if mode == "roofline":
        from kvsim.model.timing import FULL, AttentionClass, RooflineTimeModel

        c = LINEAR["c_ctx_ps"]  # a key read at c_ctx: decode, prefill and mixed alike; no FLOP term
        rt = RooflineTimeModel(
            LINEAR["c0_ps"], 0, LINEAR["c_tok_ps"], 0, 0, 0, (), 0, 0, 0, (AttentionClass(FULL, 0, c, 0, c),)
        )
        return cfg.with_roofline(rt)
    raise SystemExit(f"mode {mode!r} is not one of ticks, linear, roofline")


def with_tier(cfg: kvsim.SimConfig, tier_tokens: int) -> kvsim.SimConfig:
    """`cfg` with a CPU tier of `tier_tokens` tokens: Llama-3.1-8B's 2 MiB blocks of 16 tokens over an H100's
    64 GB/s host link (32.768 us a block)."""
    return cfg.replace(kv_offloading_chunks=tier_tokens // 16, kv_offloading_ps_per_block=32_768_000)


def main(n: int, mode: str = "ticks", tier_tokens: int = 0) -> None:
    w = synthetic(n, arrival_rate=100, lengths="sharegpt-paper", seed=7)
    if mode == "workload":
        print(len(w))
        return
    cfg = config(mode)
    if tier_tokens:
        cfg = with_tier(cfg, tier_tokens)
    r = kvsim.simulate(w, cfg)
    print(r.summary["num_steps"], r.summary["preemptions"], r.summary["e2e_s_p99"])


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 100_000,
        sys.argv[2] if len(sys.argv) > 2 else "ticks",
        int(float(sys.argv[3])) if len(sys.argv) > 3 else 0,
    )
