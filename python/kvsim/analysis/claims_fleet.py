"""The fleet's claims (DESIGN.md §Claims, §Cluster): routers on the Mooncake conversation trace with 4 and
8 replicas of the same total KV memory, held against the trace's own reuse (the infinite single cache's
ceiling, `kvsim.analysis.claims_seed.mooncake_ceiling`, computed from its hash ids, not by the engine).

`kvsim.analysis.claims` runs these experiments with the others and adds these claims to claims.md; the rows land
in `results/claims/fleet-mooncake-<N>.parquet`, which `kvsim.analysis.plots_fleet.draw_fleet` reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvsim.analysis.claims_model import (
    CONFIRMED,
    DIFFERS,
    Claim,
    Experiment,
    Results,
    not_testable,
    pct,
)
from kvsim.analysis.claims_seed import checked_ceiling
from kvsim.analysis.sweep import make_workload
from kvsim.model.config import SimConfig

TRACE = "mooncake-conversation"
ROUTERS = ("round-robin", "least-loaded", "prefix-affinity")
FLEET_SIZES = (4, 8)
# The fleet's total KV memory: four H100-80GB pools of Llama-3.1-8B as vLLM 0.34.0 sizes them (the memory
# measured after warmup, vllm serve's batch limits on an H100), in usable blocks of 16 tokens (given: the
# reuse ceilings, `claims_seed`, count 16-token blocks, where 0.34.0's default block is 64), rounded down to a
# multiple of every fleet size so that it splits evenly over the replicas.
BLOCK = 16
H100_POOL = SimConfig(
    model="llama-3.1-8b", gpu="h100-80gb", block_size=BLOCK
)  # `kvsim run --block-size 16`'s 30,655 blocks, the null one counted
TOTAL_BLOCKS = 4 * H100_POOL.capacity_blocks // 8 * 8
MARGIN = 0.01  # prefix-affinity must beat round-robin's hit rate by at least one point


def fleet_experiments() -> list[Experiment]:
    """One experiment per fleet size: the routers on the whole trace, the same total memory."""
    return [
        Experiment(
            f"fleet-mooncake-{n}",
            [TRACE],
            {"router": list(ROUTERS)},
            {
                "model": "llama-3.1-8b",
                "gpu": "h100-80gb",
                "kv_cache_bytes": None,
                "num_blocks": TOTAL_BLOCKS // n + 1,
                "block_size": BLOCK,
                "replicas": n,
            },
            requests=20_000,
            seeds=1,
            why=f"{n} replicas of Llama-3.1-8B (roofline time on an H100 each) sharing {TOTAL_BLOCKS:,} usable "
            f"blocks of 16 tokens (four H100s' pools of {H100_POOL.capacity_blocks:,} usable blocks, "
            f"{H100_POOL.num_blocks:,} with the null block as `kvsim run` prints, less "
            f"{4 * H100_POOL.capacity_blocks - TOTAL_BLOCKS} so that 8 replicas split it evenly), "
            f"{TOTAL_BLOCKS // n:,} usable each ({TOTAL_BLOCKS // n + 1:,} with its null block); the whole trace "
            "by timestamp; routers with exact views",
        )
        for n in FLEET_SIZES
    ]


def ceiling(res: Results, scale: float) -> tuple[float, str | None]:
    """The trace's reuse ceiling over the requests the experiment ran that a replica's pool admits, and why
    it does not bound the runs (None if it does): `checked_ceiling`."""
    num_blocks = int(res.agg["num_blocks"][0])  # (a replica's; every router's the same)
    return checked_ceiling(res, make_workload(TRACE, {}, res.experiment.spec(scale).requests, 0), num_blocks)


def fleet_claims(results: Mapping[str, Results], scale: float) -> list[Claim]:
    """Per fleet size: prefix-affinity keeps more of the trace's reuse than round-robin, and no router
    beats the single infinite cache's ceiling; the note gives TTFT p50/p99 and load imbalance per router."""
    out: list[Claim] = []
    for n in FLEET_SIZES:
        res = results[f"fleet-mooncake-{n}"]
        cmd = res.experiment.command(scale)
        cid = f"F-mooncake-{n}"
        claim = (
            f"Prefix-affinity routing keeps more of the trace's prefix reuse than round-robin ({n} replicas, "
            "the same total KV memory), and no router exceeds the single-cache ceiling"
        )
        source = "issue 15 §4: cache-aware routers (llm-d, Dynamo, SGLang); ceiling from the trace's hash_ids"
        tol = f"prefix-affinity ≥ round-robin + {100 * MARGIN:.0f} pp; every router ≤ the ceiling"
        if res.error:
            out.append(not_testable(cid, claim, source, "-", tol, cmd, res.error))
            continue
        top, why = ceiling(res, scale)
        hit = {r: res.get("prefix_hit_rate_first_admission", router=r)[0] for r in ROUTERS}
        ok = (
            why is None
            and hit["prefix-affinity"] >= hit["round-robin"] + MARGIN
            and all(h <= top + 1e-9 for h in hit.values())
        )
        ours = "; ".join(f"{r}: {pct(h)}" for r, h in hit.items())
        note = "; ".join(
            f"{r}: TTFT p50 {res.get('ttft_s_p50', router=r)[0]:.2f} s, p99 {res.get('ttft_s_p99', router=r)[0]:.2f} s, "
            f"load imbalance {res.get('load_imbalance', router=r)[0]:.2f} (requests "
            f"{res.get('load_imbalance_requests', router=r)[0]:.2f})"
            for r in ROUTERS
        )
        out.append(
            Claim(cid, claim, source, f"qualitative; ceiling {pct(top)}", ours, tol,
                  CONFIRMED if ok else DIFFERS, cmd,
                  (f"NOT COMPARABLE: {why}; " if why else "") + "hit rate over first admissions' prompt tokens; " + note)
        )  # fmt: skip
    return out


def fleet_summary(res: Results) -> dict[str, dict[str, Any]]:
    """Per router: hit rate, TTFT p50 and p99 (s), load imbalance (what the plot draws)."""
    keys = ("prefix_hit_rate_first_admission", "ttft_s_p50", "ttft_s_p99", "load_imbalance")
    return {r: {k: res.get(k, router=r)[0] for k in keys} for r in ROUTERS}


__all__ = [
    "FLEET_SIZES",
    "ROUTERS",
    "TOTAL_BLOCKS",
    "ceiling",
    "fleet_claims",
    "fleet_experiments",
    "fleet_summary",
]
