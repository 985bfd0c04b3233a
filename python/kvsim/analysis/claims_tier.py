"""The CPU tier's claims (DESIGN.md §CPU tier, §Claims): both Mooncake traces on an H100 with two GPU pools
(vLLM's for Llama-3.1-8B, and one of 2^16 tokens) and CPU tiers of 0 to 2^26 tokens, the hit rate held against the trace's own reuse ceiling (`kvsim.analysis.claims_seed.
mooncake_ceiling`, computed from its hash ids, not by the engine) and TTFT with the loads' time charged;
and a fleet of 4 behind its routers with and without tiers.

`kvsim.analysis.claims` runs these experiments with the others; the rows land in
`results/claims/tier-mooncake.parquet` and `tier-fleet-mooncake.parquet`, which
`kvsim.analysis.plots_tier` draws (`draw_tier_hits`, `draw_tier_ttft`).
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import Any

from kvsim.analysis.claims_model import (
    CONFIRMED,
    DIFFERS,
    Claim,
    Experiment,
    Results,
    not_testable,
    order_note,
    order_verdict,
    pct,
    slack_pairs,
)
from kvsim.analysis.claims_seed import admitted, checked_ceiling, experiment_max_model_len, mooncake_ceiling
from kvsim.analysis.sweep import make_workload
from kvsim.model.config import SimConfig

TRACES = ("mooncake-conversation", "mooncake-synthetic")
# A quarter of the traces' rate: one H100 serves them without a queue that grows without end (the traces
# come from a cluster; at their own rate one GPU's TTFT is minutes).
TIME_SCALE = 4.0
# The GPU pools, in blocks of 16 (the null block counted; given: the reuse ceilings, `claims_seed`, count
# 16-token blocks, where vLLM 0.34.0's default block is 64): 2^16 tokens, and vLLM 0.34.0's for Llama-3.1-8B
# on an H100-80GB (sized from the memory measured after warmup).
H100_BLOCKS: int = SimConfig(model="llama-3.1-8b", gpu="h100-80gb", block_size=16).capacity_blocks + 1
POOLS = (2**12 + 1, H100_BLOCKS)
# The tier in chunks of one 16-token block: 0 and 2^20 to 2^26 tokens (Llama-3.1-8B's 128 KiB a token: 128
# GiB to 8 TiB of host memory). A server of 8 H100s holds about 2 TB of host memory (MLCommons inference
# v3.1, Dell XE9680 H100-SXM-80GB x8: "host_memory_capacity": "2 TB"), 256 GB a GPU: 2^21 tokens
# (256 GiB) is that share, a realistic tier; 2^24-2^26 (2-8 TiB a GPU) is more than such a server holds and
# only shows where the trace's reuse ends.
TIER_TOKENS = (0, 2**20, 2**21, 2**22, 2**24, 2**26)
TIER_CHUNKS = [t // 16 for t in TIER_TOKENS]
REALISTIC_TIER_TOKENS = 2**21
HOST_MEMORY_SOURCE = (
    "about 2 TB of host memory for 8 H100s, 256 GB a GPU (MLCommons inference v3.1, Dell XE9680 "
    "H100-SXM-80GB x8 system description)"
)
BASE = {
    "model": "llama-3.1-8b",
    "gpu": "h100-80gb",
    "kv_cache_bytes": None,
    "enable_prefix_caching": True,
    "block_size": 16,
}


def token_bytes() -> int:
    """Llama-3.1-8B's KV bytes a token (128 KiB)."""
    from kvsim.model.sizing import kv_bytes_per_token

    return int(kv_bytes_per_token(str(BASE["model"])))


def tier_label(tokens: int) -> str:
    """A tier's size in tokens and in host memory: `2^21 tokens (256 GiB)`."""
    from kvsim.model.units import fmt_bytes

    if not tokens:
        return "no tier"
    return f"2^{tokens.bit_length() - 1} tokens ({fmt_bytes(tokens * token_bytes()).replace('.0 ', ' ')})"


FLEET_ROUTERS = ("round-robin", "prefix-affinity")
FLEET_REPLICAS = 4
FLEET_TIER_TOKENS = 2**22  # per replica: 512 GiB of Llama-3.1-8B's KV in host memory
# The fleet's GPU pools: one H100-80GB's pool of Llama-3.1-8B split over the 4 replicas (a quarter of the
# fleet claims' four pools: a small GPU cache, where a CPU tier shows its gain).
FLEET_BLOCKS = SimConfig(model="llama-3.1-8b", gpu="h100-80gb", block_size=16).capacity_blocks // 8 * 8
FLEET_POOL = FLEET_BLOCKS // FLEET_REPLICAS + 1  # a replica's, the null block counted
MARGIN = 0.05  # the largest tier's hit rate within 5 points of the ceiling
CEILING_SLACK = 1e-9  # above the ceiling by more than float rounding: a bug


def tier_experiments() -> list[Experiment]:
    return [
        Experiment(
            "tier-mooncake",
            [f"{t}:time_scale={TIME_SCALE}" for t in TRACES],
            {"num_blocks": list(POOLS), "kv_offloading_chunks": TIER_CHUNKS},
            dict(BASE),
            requests=20_000,
            seeds=1,
            why=f"whole traces at a quarter of their rate (arrivals × {TIME_SCALE:g}); Llama-3.1-8B on an H100-80GB "
            f"(roofline time) with a GPU pool of 2^16 tokens and vLLM's ({(H100_BLOCKS - 1) * 16:,} tokens), each "
            "with a CPU tier of 0 and 2^20-2^26 tokens (128 GiB-8 TiB of host memory at Llama-3.1-8B's 128 KiB "
            "a token; vLLM's native offloading, LRU, prompt tokens only, transfers on the H100's 64 GB/s host "
            "link)",
        ),
        Experiment(
            "tier-fleet-mooncake",
            [TRACES[0]],
            {"router": list(FLEET_ROUTERS), "kv_offloading_chunks": [0, FLEET_TIER_TOKENS // 16]},
            {**BASE, "num_blocks": FLEET_POOL, "replicas": FLEET_REPLICAS},
            requests=20_000,
            seeds=1,
            why=f"{FLEET_REPLICAS} replicas of Llama-3.1-8B (roofline time on an H100 each) sharing one H100's "
            f"pool ({FLEET_BLOCKS:,} blocks of 16 tokens, {FLEET_POOL - 1:,} a replica: a quarter of the "
            f"fleet claims'), without and with a CPU tier of {tier_label(FLEET_TIER_TOKENS)} each; the conversation trace by "
            "timestamp",
        ),
    ]


def _rejected(res: Results) -> str:
    """How many requests the runs rejected (too long for a replica's pool), when any did: `"48 of 12,031
    requests rejected in every run; "`."""
    f = res.frame
    if "rejected" not in f.columns:
        return ""
    rejected, asked = f["rejected"].to_list(), f["num_requests"].to_list()
    lo, hi, n = int(min(rejected)), int(max(rejected)), int(max(asked))
    if not hi:
        return ""
    count = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
    return f"{count} of {n:,} requests rejected (longer than a replica's pool holds); "


def hit_rate(res: Results, **where: Any) -> float:
    """Hits over first admissions' prompt tokens: the GPU's and the tier's (the GPU's alone without one)."""
    row = res.agg
    for k, v in where.items():
        row = row.filter(row[k] == v)
    value = (
        row["hit_rate_first_admission_mean"][0] if "hit_rate_first_admission_mean" in row.columns else None
    )
    if value is None:
        value = row["prefix_hit_rate_first_admission_mean"][0]
    return float(value)


def trace_rows(res: Results, trace: str, scale: float) -> Any:
    """The trace's requests the experiment ran (timing does not enter a ceiling)."""
    return make_workload(trace, {}, res.experiment.spec(scale).requests, 0)


def pool_ceiling(workload: Any, num_blocks: int, max_model_len: int | None = None) -> float:
    """The reuse ceiling of GPU + tier hits on a pool of `num_blocks` (the null block counted): an infinite
    cache's over the requests the pool admits (under `max_model_len`, None: no limit), a hit reaching the
    prompt's last token as a load's does (`mooncake_ceiling`)."""
    return mooncake_ceiling(
        workload, capacity_blocks=num_blocks - 1, whole_prompt=True, max_model_len=max_model_len
    )


def ceiling(res: Results, requests: Any, num_blocks: int, /, **where: Any) -> tuple[float, str | None]:
    """The reuse ceiling of GPU + tier hits on a pool of `num_blocks` (the null block counted), a hit
    reaching the prompt's last token as a load's does, and why it does not bound rows `where` (None if it
    does): `checked_ceiling`."""
    return checked_ceiling(res, requests, num_blocks, whole_prompt=True, **where)


def _short(tokens: int) -> str:
    """A tier's host memory alone: `256 GiB` (`no tier` for 0)."""
    from kvsim.model.units import fmt_bytes

    return fmt_bytes(tokens * token_bytes()).replace(".0 ", " ") if tokens else "no tier"


def pool_label(num_blocks: int) -> str:
    return f"{(num_blocks - 1) * 16 // 1024}K-token pool"


def tier_claims(results: Mapping[str, Results], scale: float) -> list[Claim]:
    out: list[Claim] = []
    res = results["tier-mooncake"]
    cmd = res.experiment.command(scale)
    source = "issue 27: the trace's reuse ceiling from its hash_ids (computed, not the engine)"
    for trace in TRACES:
        cid = f"C-tier-{trace}"
        claim = (
            f"A CPU tier brings the prefix hit rate up to the trace's reuse ceiling where the GPU pool alone "
            f"keeps little of it, {trace}; the ceiling takes a tier of 2^24-2^26 tokens ({_short(2**24)} to "
            f"{_short(2**26)} of host memory a GPU), more than a server holds: what a realistic "
            f"{tier_label(REALISTIC_TIER_TOKENS)} tier reaches is reported"
        )
        label = f"{trace}:time_scale={TIME_SCALE}"
        tol = (
            f"non-decreasing in tier size on each pool (1 point of slack); never above the pool's ceiling; the "
            "largest tier within "
            f"{100 * MARGIN:.0f} pp of it"
        )
        if res.error:
            out.append(not_testable(cid, claim, source, "-", tol, cmd, res.error))
            continue
        rows = trace_rows(res, trace, scale)
        ok = True
        tops, parts, notes, realistic, against = [], [], [], [], []
        for pool in POOLS:
            top, why = ceiling(res, rows, pool, workload=label, num_blocks=pool)
            rates = [
                hit_rate(res, workload=label, num_blocks=pool, kv_offloading_chunks=c) for c in TIER_CHUNKS
            ]
            ok &= why is None
            ok &= all(b >= a - 0.01 for a, b in pairwise(rates))
            pairs = slack_pairs(rates, True, [_short(t) for t in TIER_TOKENS])
            against += [order_note(pairs, f"{pool_label(pool)} hit rate")] if pairs else []
            ok &= all(r <= top + CEILING_SLACK for r in rates) and top - rates[-1] <= MARGIN
            rejected = admitted(rows, pool - 1, max_model_len=experiment_max_model_len(res)).count(False)
            tops.append(f"{pool_label(pool)}: {pct(top)}")
            parts.append(
                f"{pool_label(pool)}: "
                + ", ".join(f"{pct(r)} ({_short(t)})" for r, t in zip(rates, TIER_TOKENS, strict=True))
            )
            mid = rates[TIER_TOKENS.index(REALISTIC_TIER_TOKENS)]
            realistic.append(f"{pool_label(pool)} {pct(mid)} of {pct(top)} ({mid / top:.0%})")
            notes.append(
                f"{pool_label(pool)}: largest tier {100 * (rates[-1] - top):+.2f} pp from its ceiling"
                + (f", {rejected:,} of {len(rows.prompt_len):,} requests rejected" if rejected else "")
                + (f"; NOT COMPARABLE: {why}" if why else "")
            )
        out.append(
            Claim(cid, claim, source, "; ".join(tops),
                  "; ".join(parts) + f"; a realistic {tier_label(REALISTIC_TIER_TOKENS)} tier: "
                  + ", ".join(realistic), tol, order_verdict(ok and not against, ok), cmd,
                  "".join(f"{a}; " for a in against) +
                  f"tier sizes in tokens: {', '.join(tier_label(t) for t in TIER_TOKENS[1:])} (Llama-3.1-8B, "
                  f"{token_bytes() // 1024} KiB a token); realistic: {HOST_MEMORY_SOURCE}; "
                  "hits (GPU + tier) over the prompt tokens of first admissions; each pool's ceiling is an "
                  "infinite cache's over the requests that pool admits (one whose peak blocks exceed the pool, or "
                  "whose prompt reaches max_model_len, is rejected at arrival: it computes nothing and counts "
                  "nowhere), its hits whole blocks up to the "
                  "prompt's last token, as a load's; " + "; ".join(notes))
        )  # fmt: skip
        cid = f"C-tier-ttft-{trace}"
        claim = (
            f"Loads from the tier cost time, yet serving hits from it beats recomputing them: mean TTFT falls "
            f"with a realistic {_short(REALISTIC_TIER_TOKENS)} tier and with the largest ({_short(TIER_TOKENS[-1])}) "
            f"on each pool, {trace}"
        )
        tol = (
            f"mean TTFT with the {tier_label(REALISTIC_TIER_TOKENS)} and the {tier_label(TIER_TOKENS[-1])} "
            "tiers each < without; mean load wait > 0"
        )
        if res.error:
            out.append(
                not_testable(cid, claim, "LMCache / vLLM offloading's TTFT claims", "-", tol, cmd, res.error)
            )
            continue
        ok = True
        parts = []
        notes = []
        for pool in POOLS:
            where = {"workload": label, "num_blocks": pool}
            mid_chunks = REALISTIC_TIER_TOKENS // 16
            off = res.get("ttft_s_mean", **where, kv_offloading_chunks=0)[0]
            mid = res.get("ttft_s_mean", **where, kv_offloading_chunks=mid_chunks)[0]
            on = res.get("ttft_s_mean", **where, kv_offloading_chunks=TIER_CHUNKS[-1])[0]
            wait = res.get("load_wait_s_mean", **where, kv_offloading_chunks=TIER_CHUNKS[-1])[0]
            p99_off = res.get("ttft_s_p99", **where, kv_offloading_chunks=0)[0]
            p99_mid = res.get("ttft_s_p99", **where, kv_offloading_chunks=mid_chunks)[0]
            p99_on = res.get("ttft_s_p99", **where, kv_offloading_chunks=TIER_CHUNKS[-1])[0]
            ok &= on < off and mid < off and wait > 0
            parts.append(
                f"{pool_label(pool)}: {off:.3g} s -> {mid:.3g} s ({_short(REALISTIC_TIER_TOKENS)}) -> {on:.3g} s "
                f"({_short(TIER_TOKENS[-1])})"
            )
            notes.append(
                f"{pool_label(pool)}: p99 {p99_off:.3g} s -> {p99_mid:.3g} s -> {p99_on:.3g} s, mean load wait "
                f"{1000 * wait:.3g} ms ({_short(TIER_TOKENS[-1])})"
            )
        out.append(
            Claim(cid, claim, "LMCache / vLLM offloading's TTFT claims (qualitative)", "lower TTFT",
                  "; ".join(parts), tol, CONFIRMED if ok else DIFFERS, cmd, "; ".join(notes))
        )  # fmt: skip
    res = results["tier-fleet-mooncake"]
    cmd = res.experiment.command(scale)
    cid = f"F-tier-mooncake-{FLEET_REPLICAS}"
    claim = f"A CPU tier on each replica raises every router's hit rate in a fleet of {FLEET_REPLICAS}"
    tol = "each router's hit rate higher with the tiers, and at most the single-cache ceiling"
    source = "issue 27 §4: the fleet's routers with CPU tiers; ceiling from the trace's hash_ids"
    if res.error:
        out.append(not_testable(cid, claim, source, "-", tol, cmd, res.error))
        return out
    chunks = FLEET_TIER_TOKENS // 16
    rate = {
        (r, c): hit_rate(res, router=r, kv_offloading_chunks=c) for r in FLEET_ROUTERS for c in (0, chunks)
    }
    # (one replica's pool: each rejects what it cannot hold, whichever the router sends it)
    top, why = ceiling(res, trace_rows(res, TRACES[0], scale), FLEET_POOL)
    ok = why is None and all(top + CEILING_SLACK >= rate[(r, chunks)] > rate[(r, 0)] for r in FLEET_ROUTERS)
    gap = {c: rate[("prefix-affinity", c)] - rate[("round-robin", c)] for c in (0, chunks)}
    ours = "; ".join(f"{r}: {pct(rate[(r, 0)])} -> {pct(rate[(r, chunks)])}" for r in FLEET_ROUTERS)
    note = (
        (f"NOT COMPARABLE: {why}; " if why else "")
        + (
            "the ceiling an infinite cache's over the requests a replica's pool admits; "
            f"prefix-affinity's lead over round-robin {100 * gap[0]:.1f} -> {100 * gap[chunks]:.1f} points; "
            + _rejected(res)
        )
        + "; ".join(
            f"{r}{' with tiers' if c else ''}: TTFT p50 {res.get('ttft_s_p50', router=r, kv_offloading_chunks=c)[0]:.3g} s, "
            f"p99 {res.get('ttft_s_p99', router=r, kv_offloading_chunks=c)[0]:.3g} s"
            for r in FLEET_ROUTERS
            for c in (0, chunks)
        )
    )
    out.append(
        Claim(cid, claim, source, f"qualitative; ceiling {pct(top)}", ours, tol, CONFIRMED if ok else DIFFERS, cmd, note)
    )  # fmt: skip
    return out


__all__ = [
    "POOLS",
    "REALISTIC_TIER_TOKENS",
    "TIER_CHUNKS",
    "TIER_TOKENS",
    "TRACES",
    "hit_rate",
    "pool_ceiling",
    "tier_claims",
    "tier_experiments",
    "tier_label",
    "token_bytes",
]
