"""What a `kvsim run` of a fleet says beyond one replica's table (`kvsim.analysis.run_report`): the fleet
table (each replica's throughput, hit rate, TTFT; a P/D fleet's prefill replicas), the disaggregation
group (transfers, the link, TTFT's parts, the pools' busy time), its `--json` records and the notes on
data-parallel ranks. DESIGN.md §Cluster and §Prefill/decode disaggregation define the figures.
"""

from __future__ import annotations

from typing import Any

from kvsim.analysis.run_report import PD_PARTS, _num
from kvsim.model.units import fmt_count


def data_parallel_pools(result: Any) -> list[tuple[str, int, list[Any]]]:
    """A fleet's replicas when they are data-parallel ranks (`data_parallel_size` above 1: a
    mixture-of-experts model's), as `[(pool, replicas, their configs)]` (pool "": an aggregated fleet, the
    only one with DP ranks: a disaggregated one is refused), else `[]`. A replica is one DP rank's engine
    (DESIGN.md §Defaults and sizing, "Data and expert parallelism"), never a group of them; the ranks of
    a group step together (§Data-parallel groups), and every replica has the group's
    `data_parallel_size` (`kvsim.engine.cluster.dp_group` refuses others)."""
    configs = (
        result.config if isinstance(result.config, list) else [result.config] * result.summary["replicas"]
    )
    if not any(c.data_parallel_size > 1 for c in configs):
        return []
    return [("", len(configs), configs)]


def _dp_groups(n: int, dp: int) -> str:
    """`2 DP groups of 2 ranks` for `n` ranks of `data_parallel_size` `dp` (a whole number of groups)."""
    return f"{n // dp} DP group{'' if n == dp else 's'} of {dp} ranks"


def _dp_phrase(result: Any) -> str:
    """The fleet line's words on its data-parallel ranks: `, each replica a data-parallel rank
    (data_parallel_size 2: 2 DP groups of 2 ranks)`; empty without data parallelism."""
    parts = []
    for pool, n, cs in data_parallel_pools(result):
        dp = cs[0].data_parallel_size
        which = f"{pool} replica" if pool else "replica"
        parts.append(f"each {which} a data-parallel rank (data_parallel_size {dp}: {_dp_groups(n, dp)})")
    return "".join(f", {p}" for p in parts)


def data_parallel_notes(result: Any) -> list[str]:
    """`kvsim run`'s notes on a fleet of data-parallel ranks: what a replica is then (one DP rank's engine,
    as vLLM runs one per rank: its own pool and scheduler, sized and timed as a rank whose routed experts
    its group shares, `kvsim.model.shard.shard` and `kvsim.model.timing.roofline_time_model`), what the
    fleet is in ranks, groups and GPUs (a replica count is a whole number of groups: `SimConfig` refuses
    another)."""
    out = []
    for pool, n, cs in data_parallel_pools(result):
        c = cs[0]
        dp, tp = c.data_parallel_size, c.tensor_parallel_size
        how = (
            "whole experts: expert parallelism"
            if c.enable_expert_parallel
            else "each expert's width split over them"
        )
        replicas = fmt_count(n, f"{pool} replica" if pool else "replica")
        text = (
            f"data_parallel_size {dp} with {replicas}: each replica is one DP rank's engine, as vLLM runs an engine "
            "per rank (its own pool and its own scheduler; a group's ranks step together, each step as long as "
            f"its slowest rank's: DESIGN.md §Data-parallel groups), sized with the routed experts spread over its group's tp x dp = {tp * dp} GPUs ({how}) "
            "and timed with every rank's tokens reaching them (the other ranks' batches taken as large as its "
            f"own); {'they are' if n > 1 else 'it is'} {fmt_count(n, 'rank')} on {fmt_count(n * tp, 'GPU')}, {_dp_groups(n, dp)}"
        )
        out.append(text)
    return out


HERD_BATCH = 4  # (simultaneous arrivals a batch must hold for `herd_notes`; all to one of N by chance: N^-3)


def herd_notes(result: Any) -> list[str]:
    """`kvsim run`'s note where the `least-kv` router sent most batches of simultaneous arrivals (at least
    `HERD_BATCH` requests at one instant: a trace's identical timestamps) each to one replica: it reads the
    blocks a replica holds, which a request routed but not yet admitted does not hold, so a batch sees one KV
    state and follows the least-used replica (DESIGN.md §Cluster, "Routers"). Said when a quarter or more of
    such batches went whole to one replica (twice what chance gives: a batch of 4 on 2 replicas, 1/8); an
    aggregated fleet only (a P/D fleet routes to decode later)."""
    import polars as pl

    s = result.summary
    if result.router.name != "least-kv" or s.get("prefill_replicas") or s["replicas"] < 2:
        return []
    batches = (
        result.requests.group_by("arrival")
        .agg(n=pl.len(), k=pl.col("replica").n_unique())
        .filter(pl.col("n") >= HERD_BATCH)
    )
    whole = batches.filter(pl.col("k") == 1)
    if not batches.height or 4 * whole.height < batches.height:
        return []
    return [
        f"least-kv sent {whole.height:,} of the {batches.height:,} batches of {HERD_BATCH} or more simultaneous "
        f"arrivals each whole to one replica ({int(whole['n'].sum()):,} requests): it reads the KV blocks a "
        "replica holds, which a request routed but not yet admitted does not hold yet, so a batch arriving at "
        "one instant sees one KV state and follows the least-used replica (DESIGN.md §Cluster, Routers); "
        "least-loaded counts the requests in flight"
    ]


def fleet_record(result: Any) -> dict[str, Any]:
    """A fleet run's own part of `kvsim run --json` (`fleet`): the router as run, the load imbalance,
    each replica's summary (DESIGN.md §Cluster), and with data parallelism what its replicas are
    (`data_parallel`: each pool's replicas, each one DP rank, their group size and the groups they make)."""
    import dataclasses

    s = result.summary
    dp: list[dict[str, Any]] = [
        {
            "pool": pool or "all",
            "replicas_are": "data-parallel ranks",
            "data_parallel_size": cs[0].data_parallel_size,
            "ranks": n,
            "groups": n // cs[0].data_parallel_size,
        }
        for pool, n, cs in data_parallel_pools(result)
    ]
    return {
        "replicas": s["replicas"],
        **({"data_parallel": dp} if dp else {}),
        "router": dataclasses.asdict(result.router),
        "load_imbalance": s["load_imbalance"],
        "load_imbalance_requests": s["load_imbalance_requests"],
        "per_replica": [r.summary for r in result.replicas],
        **(
            {"disaggregation": pd_record(s), "per_prefill_replica": prefill_rows(result)}
            if s.get("prefill_replicas")
            else {}
        ),
    }


def prefill_rows(result: Any) -> list[dict[str, Any]]:
    """A disaggregated fleet's prefill replicas, one record each: the requests routed to it, the prompt
    tokens it looked up (admitted, resumes included), its prefix hit tokens and rate, its preemptions (its
    counters, `ClusterResult.prefill_counters`)."""
    from kvsim.engine.simulate import over

    routed = result.requests["prefill_replica"].to_numpy()
    return [
        {
            "requests": int((routed == i).sum()),
            "prompt_tokens": c["prompt_tokens_admitted"],
            "prefix_hit_tokens": c["prefix_hit_tokens"],
            "prefix_hit_rate": over(c["prefix_hit_tokens"], c["prompt_tokens_admitted"]),
            "preemptions": c["num_preemptions"],
        }
        for i, c in enumerate(result.prefill_counters)
    ]


# The disaggregation's counts and its link's figures (the lab's P/D page shows these).
PD_LINK_KEYS = (
    "pd_disaggregated",
    "pd_local_prefills",
    "pd_transfers",
    "pd_transfer_blocks",
    "pd_transfer_bytes",
    "pd_link_utilization",
    "pd_link_bandwidth_utilization",
)
PD_KEYS = (
    "prefill_replicas",
    *PD_LINK_KEYS,
    "prefill_prefix_hit_tokens",
    "prefill_prompt_tokens",
    "prefill_prefix_hit_rate",
    "decode_prefix_hit_tokens",
    "decode_prompt_tokens",
    "decode_prefix_hit_rate",
    "decode_busy_fraction",
    "decode_pool_mean_batch",
    "prefill_busy_fraction",
    "prefill_pool_mean_batch",
    "pd_pool_imbalance",
)


def pd_record(s: dict[str, Any]) -> dict[str, Any]:
    """A disaggregated fleet's part of `fleet`: the TTFT split's percentiles, the transfers, the links'
    and the pools' utilisation."""
    out = {k: s[k] for k in PD_KEYS}
    for _, key in PD_PARTS:
        for q in ("p50", "p99"):
            out[f"{key}_{q}_s"] = s[f"{key}_{q}_s"]
    return out


def _ms(v: float | None) -> float | None:
    return None if v is None else 1000 * v


def _replicas(n: int) -> str:
    """`replica` or `replicas` for `n` of them (`== fleet: 1 replicas` once)."""
    return "replica" if n == 1 else "replicas"


def _requests(n: int) -> str:
    return "request" if n == 1 else "requests"


def render_pd(s: dict[str, Any]) -> str:
    """The human disaggregation section: TTFT split into its four parts (p50, p99), the transfers and
    the utilisation of the links and of each pool."""
    from kvsim.model.units import fmt_bytes

    lines = [
        f"== disaggregation: {s['prefill_replicas']} prefill : {s['replicas']} decode {_replicas(s['replicas'])}; "
        f"{s['pd_disaggregated']:,} {_requests(s['pd_disaggregated'])} routed to a prefill replica, "
        f"{s['pd_local_prefills']:,} prefilled locally ==",
        "  " + "".join(f"{h:>18}" for h in ("TTFT part", "p50 ms", "p99 ms")),
    ]
    for label, key in PD_PARTS:
        cells = (label, *(_num(_ms(s[f"{key}_{q}_s"])) for q in ("p50", "p99")))
        lines.append("  " + "".join(f"{c:>18}" for c in cells))
    lines.append(
        "  (transfer+wait: from its admission on the decode replica to the end of the decode step that sees its "
        "transfer done, as vLLM's scheduler learns of a finished receive from a step's output: the link's time "
        "and the rest of that step)"
    )
    if s["pd_local_prefills"]:
        lines.append(
            "  (a request prefilled on its decode replica has no prefill, transfer or prefill queueing part: "
            "its decode queue+step part is its whole TTFT, its queue and its prefill)"
        )
    size = s["pd_transfer_bytes"]
    # (in binary units, as every size kvsim prints: this once read decimal GB, 40.28 GB for 37.5 GiB)
    moved = fmt_count(s["pd_transfer_blocks"], "block") + ("" if size is None else f", {fmt_bytes(size)}")

    def fig(key: str, fmt: str, scale: float = 1.0) -> str:
        # (over no time or no step: None, "-")
        return "-" if s[key] is None else f"{scale * s[key]:{fmt}}"

    # (rev49: "link utilisation" counted each transfer's fixed latency as busy time, which read as the
    # bandwidth used: 25 % for 1.7 % of the bandwidth on the lab's preset of 2 ms latencies)
    lines.append(
        f"  transfers: {s['pd_transfers']:,} ({moved}); link in use {fig('pd_link_utilization', '.2f', 100)} % "
        f"of the run (latency included), bandwidth used {fig('pd_link_bandwidth_utilization', '.2f', 100)} %"
    )
    if s["pd_transfers"] < s["pd_disaggregated"]:  # (rev48b #11: 599 transfers of 600 routed, unexplained)
        lines.append(
            f"  ({s['pd_disaggregated'] - s['pd_transfers']:,} of the {s['pd_disaggregated']:,} routed to a prefill "
            "replica moved nothing: a prompt that fills no whole block, or a request the prefill replica rejected)"
        )
    lines.append(
        f"  busy time (busy / makespan): prefill replicas {fig('prefill_busy_fraction', '.1f', 100)} %, decode replicas "
        f"{fig('decode_busy_fraction', '.1f', 100)} %; mean batch: prefill {fig('prefill_pool_mean_batch', '.2f')}, "
        f"decode {fig('decode_pool_mean_batch', '.2f')}"
    )
    ratio = s["pd_pool_imbalance"]
    lines.append(
        "  busy imbalance (busier / idler side): " + ("one side idle" if ratio is None else f"{ratio:.2f}")
    )
    return "\n".join(lines)


def render_fleet(result: Any) -> str:
    """The human fleet section: one line per replica (requests routed to it, those it finished, its
    throughput, prefix hit rate, TTFT p99 and preemptions) and the load imbalance."""
    s = result.summary
    spec = result.router
    how = spec.name
    if spec.refresh_ps and spec.reads_state:  # (round-robin and random read no replica's state)
        from kvsim.model.units import fmt_duration_ps

        how += f", view refreshed every {fmt_duration_ps(spec.refresh_ps)}"
    prefill = s.get("prefill_replicas")
    if (
        prefill
    ):  # (one noun for both pools: "1 decode and 1 prefill replica", "2 decode and 1 prefill replicas")
        which = f"{s['replicas']} decode and {prefill} prefill {_replicas(s['replicas'] + prefill - 1)}"
    else:
        which = f"{s['replicas']} {_replicas(s['replicas'])}"
    lines = [f"== fleet: {which}{_dp_phrase(result)}, router {how} =="]
    # (audit54 #9: with CPU tiers the hit rate column is the GPU prefix cache's alone, and ranked a replica
    # that served the most from its tier worst: it says so, the tier's share beside it, over the same tokens)
    tiers = any("cpu_hit_rate" in r.summary for r in result.replicas)
    rate = ("GPU hit rate", "CPU tier hits") if tiers else ("hit rate",)
    head = ("replica", "routed", "finished", "req/s", *rate, "TTFT p99 ms", "preemptions")
    wide = 14 if tiers else 12  # ("GPU hit rate" fills 12 columns: 14 keep a space before it)
    lines.append("  " + "".join(f"{h:>{wide}}" if h in rate else f"{h:>12}" for h in head))
    for i, r in enumerate(result.replicas):
        x = r.summary
        ttft = x.get("ttft_s_p99")
        # (a replica that admitted no prompt has no hit rate: None, "-")
        rates = [_num(x["prefix_hit_rate"], "%")] + ([_num(x.get("cpu_hit_rate"), "%")] if tiers else [])
        cells = (
            str(i),
            f"{x['num_requests']:,}",
            f"{x['completed']:,}",
            _num(x["throughput_rps"]),
            *(f"{c:>{wide}}" for c in rates),
            _num(None if ttft is None else 1000 * ttft),
            f"{x['preemptions']:,}",
        )
        lines.append("  " + "".join(f"{c:>12}" for c in cells))
    if tiers:
        lines.append(
            "  (GPU hit rate, CPU tier hits: the replica's hit tokens on its GPU and loaded from its tier over "
            "the prompt tokens it admitted, resumes included; over its first admissions, as the CPU tier "
            "table's tagged rows: --json's per_replica prefix_hit_rate_first_admission, "
            "cpu_hit_rate_first_admission)"
        )
    if prefill:  # (p0, p1, ...: the prefill replicas; they finish no request and have no TTFT of their own)
        for i, x in enumerate(prefill_rows(result)):
            cells = (
                f"p{i}",
                f"{x['requests']:,}",
                "-",
                "-",
                _num(x["prefix_hit_rate"], "%"),
                "-",
                f"{x['preemptions']:,}",
            )
            lines.append("  " + "".join(f"{c:>12}" for c in cells))
    lines.append(  # (rev48b #8: the column summed past the fleet's throughput, unexplained)
        "  (routed: the requests routed to it, finished or rejected; req/s: its finished requests over its own "
        "end, its last step's or a later arrival it rejected (--json's per_replica makespan_s), so they need not "
        "add up to the fleet's, over the end of all)"
    )
    lines.append(
        f"  load imbalance (max / mean{' over the decode replicas' if prefill else ''}): work (computed tokens) {s['load_imbalance']:.3f}, requests "
        f"{s['load_imbalance_requests']:.3f}"
    )
    if s.get("prefill_replicas"):
        lines.append(render_pd(s))
    return "\n".join(lines)
