"""`kvsim.simulate_cluster`: a fleet of replicas behind a router on one simulated clock (DESIGN.md §Cluster).

The engines run the fleet (`kvsim.reference.cluster.run_cluster`, the Rust core's `run_cluster`); this
module turns a workload and one or several `SimConfig`s into their input, and their per-sequence columns
and per-replica counters into rows and summaries with the single run's own helpers
(`kvsim.engine.simulate.request_rows`, `RowStats`, `summary_from`), so a fleet of one replica gives exactly what
`kvsim.simulate` gives, and the two backends can only differ where the engines differ. A disaggregated
fleet's side (the prefill pool's checks and spec, the link, its rows and summary keys) is
`kvsim.engine.cluster_pd`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from kvsim.engine.cluster_pd import PD_KNOBS, _pd_result, _pd_spec
from kvsim.engine.engine_input import EngineInput, prepare
from kvsim.engine.simulate import (
    BACKENDS,
    RowStats,
    SimResult,
    moved_bytes,
    over,
    request_rows,
    summary_from,
    tier_summary,
)
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import (
    CLUSTER_KNOBS,
    PS_PER_S,
    SimConfig,
    check_whole_dp_groups,
    convert,
)
from kvsim.reference.engine import EngineOutput

# The router's knobs that `simulate_cluster(..., **router_overrides)` takes (`router` has its own keyword).
ROUTER_KNOBS = ("router_refresh_s", "router_seed", "prefix_load_cap", "router_weights", "router_tie_break")
# Fields of SimConfig that `engine_input.prepare` reads: the replicas of one fleet must agree on the
# columns they give.
INPUT_FIELDS = ("sampling", "max_model_len")
_COLUMNS = tuple(
    f.name
    for f in dataclasses.fields(EngineOutput)
    if f.name not in ("counters", "timeseries", "events", "itl")
)


@dataclass
class ClusterResult:
    """What one fleet simulation produced.

    Attributes:
        requests: one row per workload request: a single run's columns (`SimResult.requests`) plus
            `replica` (int64, 0-based: the replica its sample 0 was routed to).
        summary: the fleet's summary (DESIGN.md §Cluster): every key of a single run's summary,
            computed over all rows and all replicas' counters, plus `replicas`, `router`,
            `load_imbalance` (max / mean of the replicas' computed tokens) and `load_imbalance_requests`
            (max / mean of the requests routed to each replica); with `goodput`, its columns. A
            disaggregated fleet's (prefill_replicas > 0) adds its own keys (DESIGN.md §Prefill/decode
            disaggregation, Metrics), among them each pool's prefix hit rate (`prefill_prefix_hit_rate`,
            `decode_prefix_hit_rate`); its `prefix_hit_*` count every lookup of both pools.
        replicas: one `SimResult` per replica: the rows routed to it, its summary (its own counters and
            config) and its raw columns and counters.
        config: the fleet's configuration as run: one `SimConfig` (with `replicas` and the router's
            knobs as resolved) or, for heterogeneous replicas, the list of the replicas' configs.
        raw: every sequence's engine columns (the engine input's order) and the fleet's counters
            (sums; `makespan_ps` and the `peak_*` counters: the largest replica's).
        replica: the replica of every sequence (the engine input's order).
        router: the router as run (`kvsim.reference.cluster.RouterSpec`).
    """

    requests: pl.DataFrame
    summary: dict[str, Any]
    replicas: list[SimResult]
    config: SimConfig | list[SimConfig]
    raw: EngineOutput
    replica: np.ndarray
    router: Any
    # Prefill/decode disaggregation: the prefill replicas' counters (`replicas` holds the decode pool) and
    # the config they ran (None without a prefill pool).
    prefill_counters: list[dict[str, int]] = dataclasses.field(default_factory=list)
    prefill_config: SimConfig | None = None

    def serving(
        self,
        *,
        percentile_metrics: Any = ("ttft", "tpot", "e2el"),
        metric_percentiles: Any = (50, 90, 99),
        goodput: Any = None,
    ) -> dict[str, Any]:
        """The fleet's `vllm bench serve` metrics (ms; `kvsim.engine.metrics.serving_metrics`), over all requests,
        with the fleet's duration (the last replica's makespan). ITL: its exact mean only (the replicas'
        steps interleave, so no one time series gives every gap)."""
        from kvsim.engine.metrics import serving_metrics

        return serving_metrics(
            self.requests,
            self.raw,
            percentile_metrics=percentile_metrics,
            metric_percentiles=metric_percentiles,
            goodput=goodput,
            step_start_ps=None,
        )


def simulate_cluster(
    workload: Any,
    config: SimConfig | Sequence[SimConfig],
    *,
    replicas: int | None = None,
    router: str | None = None,
    backend: str = "rust",
    goodput: Any = None,
    prefill_config: SimConfig | None = None,
    **router_overrides: Any,
) -> ClusterResult:
    """Simulates `workload` on a fleet of replicas behind a router, on one clock (DESIGN.md §Cluster).

    Args:
        workload: a `kvsim.Workload`.
        config: a `kvsim.SimConfig` (every replica runs it; `replicas` and the router's knobs come from
            it unless given here) or a list of them, one per replica (heterogeneous replicas: they may
            differ in anything but what shapes the input, `sampling` and `max_model_len`, unless the
            workload's columns come out the same; they must agree on the router's knobs).
        replicas: how many replicas (default: `config.replicas`; with a list, None or its length).
        router: `round-robin`, `random`, `least-loaded`, `least-kv`, `prefix-affinity` or `weighted`
            (default: `config.router`).
        backend: `"rust"` (default) or `"reference"`.
        goodput: SLO bounds in ms (`{"ttft": 500, "tpot": 50}`), as `kvsim.simulate`'s, over the fleet.
        prefill_config: a disaggregated fleet's prefill replicas' config (default: the decode replicas'):
            another GPU, tensor parallelism, pool or batch limits; the same model, KV dtype, `sampling`
            and `max_model_len`; its fleet knobs are not read.
        **router_overrides: `router_refresh_s`, `router_seed`, `prefix_load_cap`, `router_weights`,
            `router_tie_break` (SimConfig's knobs of the same names, checked by the same rules), and the
            prefill pool's (DESIGN.md §Prefill/decode disaggregation): `prefill_replicas` (P > 0: a
            disaggregated fleet whose `replicas` are the decode pool; every prefill replica runs
            config[0]), `pd_threshold_tokens` (a request whose prompt part not cached on its decode
            replica is under this prefills there; 0: every request is disaggregated),
            `pd_link_bandwidth` (a decode replica's inbound link, bytes/s per GPU), `pd_link_latency_s`,
            `pd_link_ps_per_block` (a block's time on the link; unset: the model's KV bytes of a block
            on one GPU over the bandwidth).

    Returns:
        A `ClusterResult`.

    Raises:
        InvalidArgumentError: a bad backend, config, replica count, router or router knob (naming it and
            the value), replicas whose configs give the workload different input columns (naming the
            field), and everything `kvsim.simulate` refuses.
    """
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"backend {backend!r} is not one of {', '.join(map(repr, BACKENDS))}")
    configs, fleet = _configs(config, replicas, router, router_overrides)
    if goodput is not None:  # a bad SLO fails before the run
        from kvsim.engine.metrics import parse_goodput

        goodput = parse_goodput(goodput)
    spec = router_spec(configs[0])
    group = dp_group(configs)
    if group > 1:
        spec = dataclasses.replace(spec, dp_group=group)
    pd = _pd_spec(configs, spec, prefill_config)
    inp = prepare(workload, configs[0])
    _check_same_input(workload, configs, inp)
    if pd is not None and len(inp) and (int(np.max(inp.fork_parent)) >= 0 or int(np.max(inp.sample)) > 0):
        raise InvalidArgumentError(
            f"sampling {configs[0].sampling!r} with several samples a request: a disaggregated fleet "
            "(prefill_replicas > 0) routes one sequence a request (DESIGN.md §Prefill/decode disaggregation)"
        )
    columns, replica, counters, extra = _run(inp, configs, spec, backend, pd)
    result = cluster_result(
        workload, inp, columns, replica, counters[: len(configs)], configs, fleet, spec, goodput
    )
    if pd is not None:
        result.prefill_counters = counters[len(configs) :]
        result.prefill_config = pd.prefill_config or configs[0]
        result.requests = _pd_result(
            result.requests, result.summary, workload, inp, columns, extra, counters, configs, pd
        )
    return result


def _configs(
    config: Any, replicas: Any, router: Any, overrides: dict[str, Any]
) -> tuple[list[SimConfig], SimConfig | list[SimConfig]]:
    """The replicas' configs (each with `replicas=1`, the fleet's router knobs) and the fleet's config."""
    for key in overrides:
        if key not in ROUTER_KNOBS and key not in PD_KNOBS:
            import difflib

            close = difflib.get_close_matches(str(key), [*ROUTER_KNOBS, *PD_KNOBS, "router", "replicas"], n=2)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise InvalidArgumentError(
                f"{key!r} is not an argument of simulate_cluster{hint}; router knobs: {', '.join(ROUTER_KNOBS)}"
            )
    changes = {name: convert(name, value) for name, value in overrides.items()}
    if router is not None:
        changes["router"] = convert("router", router)
    if replicas is not None:
        replicas = convert("replicas", replicas)
    if isinstance(config, SimConfig):
        n = config.replicas if replicas is None else replicas
        fleet = config.replace(**changes, replicas=n) if changes or n != config.replicas else config
        one = fleet.replace(replicas=1) if n != 1 else fleet
        return [one] * n, fleet
    if not isinstance(config, list | tuple) or not config:
        raise InvalidArgumentError(
            f"config {config!r} must be a kvsim.SimConfig or a non-empty list of them (one per replica)"
        )
    for i, c in enumerate(config):
        if not isinstance(c, SimConfig):
            raise InvalidArgumentError(f"config[{i}] {c!r} is not a kvsim.SimConfig")
    n = len(config)
    if replicas is not None and replicas != n:
        raise InvalidArgumentError(
            f"replicas {replicas} differs from the {n} configs given (one per replica): leave replicas unset"
        )
    for name in CLUSTER_KNOBS:
        if name == "replicas" or name in changes:
            continue
        values = [getattr(c, name) for c in config]
        for i, v in enumerate(values):
            if v != values[0]:
                raise InvalidArgumentError(
                    f"{name} {v!r} of config[{i}] differs from config[0]'s {values[0]!r}: the replicas of one "
                    f"fleet share one router (give {name} to simulate_cluster)"
                )
    for i, c in enumerate(config):
        if c.replicas not in (1, n):
            raise InvalidArgumentError(
                f"replicas {c.replicas} of config[{i}]: each config of the list is one replica (1, or the "
                f"fleet's {n})"
            )
    each = [c.replace(**changes, replicas=1) if changes or c.replicas != 1 else c for c in config]
    return each, list(each)


def dp_group(configs: list[SimConfig]) -> int:
    """How many consecutive replicas step together (DESIGN.md §Data-parallel groups): a fleet of more than
    one replica of a mixture-of-experts model at `data_parallel_size` D > 1 is made of DP groups of D ranks
    (vLLM's `DPEngineCoreProc`); 1 otherwise (one replica, or D = 1: each steps apart).

    Raises:
        InvalidArgumentError: replicas that disagree on `data_parallel_size`, or whose count is not a
            multiple of it; ranks of one group that differ in model, quantization, `tensor_parallel_size`,
            `enable_expert_parallel` or `time_model` (`DP_SHARED`).
    """
    sizes = [c.data_parallel_size for c in configs]
    for i, d in enumerate(sizes):
        if d != sizes[0]:
            raise InvalidArgumentError(
                f"data_parallel_size {d} of config[{i}] differs from config[0]'s {sizes[0]}: the ranks of a DP "
                "group share one data_parallel_size"
            )
    d, n = sizes[0], len(configs)
    if d <= 1 or n == 1:
        return 1
    check_whole_dp_groups(n, d)
    for g in range(0, n, d):
        _check_one_group(configs, g, d)
    return d


# What the ranks of one DP group share (vLLM's DP ranks are one `vllm serve`: one model and one parallel
# config): the model (its weights' quantization too), tp, expert parallelism, and the time model that
# prices the group step. Memory, block size, caching, seats and the time model's coefficients (a group of
# mixed GPUs) may differ.
DP_SHARED = ("model", "quantization", "tensor_parallel_size", "enable_expert_parallel", "time_model")


def _check_one_group(configs: list[SimConfig], first: int, d: int) -> None:
    """Refuses a DP group (ranks `first` .. `first + d - 1`) whose ranks differ in a field of `DP_SHARED`."""
    from kvsim.model.models import resolve

    def value(c: SimConfig, name: str) -> Any:
        v = getattr(c, name)
        return resolve(c.release_model) if name == "model" and v is not None else v

    def shown(c: SimConfig, name: str) -> Any:
        v = getattr(c, name)
        return getattr(v, "name", v) if name == "model" else v

    base = configs[first]
    for i in range(first + 1, first + d):
        for name in DP_SHARED:
            if value(configs[i], name) != value(base, name):
                raise InvalidArgumentError(
                    f"{name} {shown(configs[i], name)!r} of config[{i}] differs from config[{first}]'s "
                    f"{shown(base, name)!r}: config[{first}]..config[{first + d - 1}] are one DP group "
                    f"(data_parallel_size {d}), whose ranks share one model and parallel config "
                    "(DESIGN.md §Data-parallel groups)"
                )


def router_spec(config: SimConfig) -> Any:
    """The engines' router (`kvsim.reference.cluster.RouterSpec`) from a config's router knobs."""
    from kvsim.reference.cluster import RouterSpec

    return RouterSpec(
        name=config.router,
        seed=config.router_seed,
        refresh_ps=round(config.router_refresh_s * PS_PER_S),
        prefix_load_cap=config.prefix_load_cap,
        weights=None if config.router_weights is None else dict(config.router_weights),
        tie_break=config.router_tie_break,
    )


def _check_same_input(workload: Any, configs: list[SimConfig], inp: EngineInput) -> None:
    """Refuses replicas whose configs would give the workload other input columns than config[0]'s."""
    first = configs[0]
    seen = {tuple(getattr(first, f) for f in INPUT_FIELDS)}
    for i, c in enumerate(configs):
        key = tuple(getattr(c, f) for f in INPUT_FIELDS)
        if key in seen:
            continue
        other = prepare(workload, c)
        for f in dataclasses.fields(EngineInput):
            a, b = getattr(inp, f.name), getattr(other, f.name)
            if a.shape != b.shape or not np.array_equal(a, b):
                differ = [name for name in INPUT_FIELDS if getattr(c, name) != getattr(first, name)]
                raise InvalidArgumentError(
                    " and ".join(f"{name} {getattr(c, name)!r}" for name in differ)
                    + f" of config[{i}] gives this workload other input columns ({f.name}) than config[0]'s "
                    + " and ".join(f"{getattr(first, name)!r}" for name in differ)
                    + ": the replicas of one fleet must agree on them"
                )
        seen.add(key)


def _run(
    inp: EngineInput, configs: list[SimConfig], spec: Any, backend: str, pd: Any = None
) -> tuple[dict[str, np.ndarray], np.ndarray, list[dict[str, int]], dict[str, np.ndarray]]:
    """Runs the fleet on one backend: (per-sequence columns, per-sequence replica, per-replica counters,
    the disaggregated fleet's extra columns)."""
    from kvsim.reference.cluster import PD_COLUMNS

    out: Any
    if backend == "reference":
        from kvsim.reference import cluster

        out = cluster.run_cluster(inp, configs, spec, pd=pd)
    else:
        from kvsim.engine import rust_engine

        out = rust_engine.run_cluster(inp, configs, spec, pd=pd)
    # The reference's ClusterOutput or the Rust wrapper's dict of the same fields: per-row columns (with
    # `replica`) and per-replica counters.
    columns = dict(out["columns"] if isinstance(out, dict) else out.columns)
    counters = out["counters"] if isinstance(out, dict) else out.counters
    replica = columns.pop("replica")
    extra = {name: np.asarray(columns.pop(name), dtype=np.int64) for name in PD_COLUMNS if name in columns}
    columns = {name: np.asarray(columns[name]) for name in _COLUMNS}
    replica = np.asarray(replica, dtype=np.int64)
    return columns, replica, [dict(c) for c in counters], extra


def fleet_counters(counters: Sequence[dict[str, int]]) -> dict[str, int]:
    """The fleet's counters: each replica's summed, but `makespan_ps` and the `peak_*` counters, the
    largest replica's (the fleet's duration is its last replica's)."""
    out: dict[str, int] = {}
    for c in counters:
        for key, value in c.items():
            if key == "makespan_ps" or key.startswith("peak_"):
                out[key] = max(out.get(key, value), value)
            else:
                out[key] = out.get(key, 0) + value
    return out


def cluster_result(
    workload: Any,
    inp: EngineInput,
    columns: dict[str, np.ndarray],
    replica: np.ndarray,
    counters: list[dict[str, int]],
    configs: list[SimConfig],
    fleet: SimConfig | list[SimConfig],
    spec: Any,
    goodput: Any = None,
) -> ClusterResult:
    """Rows and summaries (fleet and per replica) from what an engine's `run_cluster` returned."""
    n = len(configs)
    if len(replica) != len(inp) or len(counters) != n:
        from kvsim.errors import InternalError

        raise InternalError(
            f"the cluster engine returned {len(replica)} replicas for {len(inp)} sequences and {len(counters)} "
            f"counter sets for {n} replicas"
        )
    for a in (*columns.values(), replica):
        a.flags.writeable = False  # the rows may share their memory (polars does not copy)
    every: dict[str, Any] = columns
    raw = EngineOutput(**every, counters=fleet_counters(counters))
    rows = request_rows(workload, inp, raw, tier=any(c.kv_offloading_chunks for c in configs))
    first = inp.sample == 0
    per_request = np.zeros(len(workload), dtype=np.int64)
    per_request[inp.request_row[first]] = replica[first]
    requests = rows.with_columns(pl.Series("replica", per_request, dtype=pl.Int64))
    per_replica: list[SimResult] = []
    routed = np.bincount(per_request, minlength=n)
    for r in range(n):
        mine = replica == r
        mine_columns: dict[str, Any] = {k: v[mine] for k, v in columns.items()}
        sub = EngineOutput(**mine_columns, counters=counters[r])
        rows_r = requests.filter(pl.col("replica") == r).drop("replica")
        stats = RowStats()
        stats.add(rows_r)
        per_replica.append(
            SimResult(
                requests=rows_r,
                summary=summary_from(stats, counters[r], configs[r]),
                config=configs[r],
                raw=sub,
            )
        )
    stats = RowStats()
    stats.add(rows)
    summary = fleet_summary(stats, counters, configs)
    work = np.array([c["sum_batched_tokens"] for c in counters], dtype=np.float64)
    summary["replicas"] = n
    summary["router"] = spec.name
    summary["load_imbalance"] = _imbalance(work)
    summary["load_imbalance_requests"] = _imbalance(routed.astype(np.float64))
    if goodput is not None:
        from kvsim.engine.metrics import goodput_columns

        summary.update(goodput_columns(rows, raw, goodput))
    return ClusterResult(
        requests=requests,
        summary=summary,
        replicas=per_replica,
        config=fleet,
        raw=raw,
        replica=replica,
        router=spec,
    )


def _imbalance(values: np.ndarray) -> float:
    """max / mean (1.0 when every value is 0: nothing to balance)."""
    mean = float(values.mean()) if len(values) else 0.0
    return float(values.max()) / mean if mean > 0 else 1.0


def fleet_summary(
    stats: RowStats, counters: Sequence[dict[str, int]], configs: Sequence[SimConfig]
) -> dict[str, Any]:
    """A single run's summary keys over a fleet: the row metrics over all rows; the step and memory
    metrics from every replica's counters (sums over replicas; fractions of capacity time-weighted over
    each replica's busy time and capacity, `Σ w / Σ busy · capacity`; peaks the largest replica's; the
    duration the last replica's makespan; the CPU-tier keys over the replicas with a tier, whichever they
    are). For one replica it is `summary_from` exactly; the replicas' order changes none of the tier keys."""
    if len(counters) == 1:
        return summary_from(stats, counters[0], configs[0])
    c = fleet_counters(counters)
    s = summary_from(stats, c, configs[0])  # row metrics, duration, throughputs and the summed counts
    busy = [x["busy_ps"] for x in counters]
    caps = [cfg.capacity_tokens for cfg in configs]
    denom = sum(b * cap for b, cap in zip(busy, caps, strict=True))
    for key, name in (
        ("w_stored", "kv_utilization"),
        ("w_allocated", "kv_allocated_fraction"),
        ("w_internal", "internal_fragmentation"),
        ("w_reserved", "reservation_waste"),
        ("w_external", "external_fragmentation"),
    ):
        s[name] = over(c[key], denom)
    s["peak_allocated_fraction"] = max(
        (x["peak_allocated_tokens"] / cap if cap else 0.0) for x, cap in zip(counters, caps, strict=True)
    )
    s["capacity_tokens"] = sum(caps)
    # A hybrid model's per-group blocks (`summary_from` reads the first replica's groups): summed over
    # replicas whose groups are the same groups; a fleet whose replicas' groups differ (two models, or a
    # hybrid model beside one of a single group) has no fleet figure for them, whatever its order (each
    # replica's summary keeps its own).
    if len({cfg.kv_groups for cfg in configs}) > 1:
        for key in [k for k in s if k.startswith(("mean_group_blocks_", "peak_group_blocks_"))]:
            del s[key]
    # (each replica's mean over its busy time; one that never stepped saved none; none if none stepped)
    saved = [over(x["w_logical_blocks"] - x["w_held_blocks"], x["busy_ps"]) for x in counters]
    # (`math.fsum`: the exact sum rounded once, so the replicas' order does not move its last bit)
    s["blocks_saved_by_sharing"] = (
        math.fsum(v or 0.0 for v in saved) if any(v is not None for v in saved) else None
    )
    # CPU tiers, whichever replicas have one (a mixed fleet's first replica may have none): the hit and miss
    # rates over every replica's prompt tokens (a replica without a tier hits none in it), the moves and
    # their bytes summed, the chunks the tiers' sum, occupancy over each tier's busy time, the peak the
    # fullest tier's. The keys are there whenever some replica has a tier, as for one replica.
    tiers = [(cfg, x) for cfg, x in zip(configs, counters, strict=True) if cfg.kv_offloading_chunks]
    if tiers:
        # (the rates and counts from the fleet's counters; what a config decides is set below over the tiers)
        s.update(tier_summary(c, tiers[0][0]))
        s["cpu_tier_chunks"] = sum(cfg.kv_offloading_chunks for cfg, _ in tiers)
        s["cpu_tier_occupancy"] = over(
            sum(x["w_cpu_chunks"] for _, x in tiers),
            sum(x["busy_ps"] * cfg.kv_offloading_chunks for cfg, x in tiers),
        )
        s["cpu_tier_peak_occupancy"] = max(
            x["peak_cpu_chunks"] / cfg.kv_offloading_chunks for cfg, x in tiers
        )
        # Bytes moved: each replica's blocks at its own block's bytes (replicas may differ in block size);
        # a hybrid model's each group's blocks at the group's own bytes, counted by its engine.
        for done in ("loaded", "stored"):
            moved = [moved_bytes(cfg, x, done) for cfg, x in tiers]
            s[f"{done}_bytes"] = None if None in moved else sum(m for m in moved if m is not None)
    return s


__all__ = [
    "ClusterResult",
    "cluster_result",
    "fleet_counters",
    "fleet_summary",
    "router_spec",
    "simulate_cluster",
]
