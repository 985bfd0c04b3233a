"""`kvsim.simulate`: run a workload under a config on either backend; rows, summary, time series.

Both backends receive the same `EngineInput` (see engine_input.py) and return the same raw columns and
integer counters; everything derived from them (per-request rows, the summary) is computed here once,
so the two backends can only differ where the engines differ.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kvsim.engine.engine_input import EngineInput, prepare
from kvsim.engine.exact import Mean, Quantiles
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import MAX_TIME_PS, PS_PER_S, SimConfig
from kvsim.reference.engine import EVENT_KINDS, FINISHED, REJECT_REASONS, REJECTED, EngineOutput

BACKENDS = ("rust", "reference")
# Code -> text, as series so rows are labelled by one gather, without a Python loop per request. Enums:
# one byte a row (a string column takes 16), compared with strings as before (`status == "finished"`).
REASON_DTYPE = pl.Enum([REJECT_REASONS[k] for k in range(1, max(REJECT_REASONS) + 1)])
STATUS_DTYPE = pl.Enum(["finished", "rejected"])
_REASON_TEXT = pl.Series([None, *REASON_DTYPE.categories], dtype=REASON_DTYPE)
_STATUS_TEXT = pl.Series(["finished", "rejected"], dtype=STATUS_DTYPE)


@dataclass
class SimResult:
    """What one simulation produced.

    Attributes:
        requests: one row per workload request (SPEC §7 columns; times in seconds); None from
            `simulate_stream` unless it was asked to keep the rows (`rows="memory"`).
        summary: a dict of plain Python numbers, one key per SPEC §7 metric (DESIGN.md §Metrics).
        config: the configuration that ran.
        raw: the engine's per-sequence columns and integer counters (what the backends are compared on).
        timeseries: with `record_timeseries`, one row per recorded step: `step`, `time_s` (the step's
            start), `batch`, `batched_tokens`, then token slots `free_tokens`, `stored_tokens`,
            `allocated_tokens`, `internal_tokens`, `reserved_tokens`, `external_tokens`, and
            `free_blocks` (`free_tokens // block_size`); else None.
        events: with `record_events`, one row per event in order: `step` (steps completed when it
            happened), `time_s`, `kind` (admit, allocate, prefix-hit, cow-copy, evict, free, preempt,
            swap-out, swap-in, finish, reject, fork, schedule), `request_id`, `sample`, `block` (-1 for
            events about a sequence; a contiguous `admit`: its region's start), `count` (`schedule`: the
            tokens the sequence computes in that step; a contiguous `admit`: its region's size; a group
            member's `swap-in`: the leading blocks it shares with the group's first sample; else -1);
            what the lab page replays (DESIGN.md §Event log). Else None.
        rows_path: `simulate_stream(rows=DIR)`: the directory holding the rows as parquet files.
    """

    requests: pl.DataFrame | None
    summary: dict[str, Any]
    config: SimConfig
    raw: EngineOutput
    timeseries: pl.DataFrame | None = None
    events: pl.DataFrame | None = None
    rows_path: Path | None = None

    def serving(
        self,
        *,
        percentile_metrics: Any = ("ttft", "tpot", "itl", "e2el"),
        metric_percentiles: Any = (50, 90, 99),
        goodput: Any = None,
    ) -> dict[str, Any]:
        """`vllm bench serve`'s metrics of this run (ms; goodput and SLO attainment with `goodput`, e.g.
        `{"ttft": 500, "tpot": 50}`): `kvsim.engine.metrics.serving_metrics`, which defines each. ITL's
        distribution is exact from the engines' record (`kvsim.engine.metrics.itl_values`); a streamed run's
        (which records none) falls back to a time series of every step, exact only where no sequence
        missed a step, else its mean only."""
        from kvsim.engine.metrics import serving_metrics

        if self.requests is None:
            raise InvalidArgumentError(
                "serving metrics need the request rows: this result kept none (simulate_stream rows='none')"
            )
        starts = self.raw.timeseries.get("time_ps") if self.raw.timeseries else None
        every_step = (
            starts is not None and self.timeseries is not None and len(starts) == self.summary["num_steps"]
        )
        return serving_metrics(
            self.requests,
            self.raw,
            percentile_metrics=percentile_metrics,
            metric_percentiles=metric_percentiles,
            goodput=goodput,
            step_start_ps=starts if every_step else None,
        )


def _run_engine(inp: EngineInput, config: SimConfig, backend: str, every: int, events: bool) -> EngineOutput:
    if backend == "reference":
        from kvsim.reference import engine

        return engine.run(inp, config, every, events)
    from kvsim.engine import rust_engine

    return rust_engine.run(inp, config, every, events)


def simulate(
    workload: Any,
    config: SimConfig,
    *,
    backend: str = "rust",
    record_events: bool = False,
    record_timeseries: bool | int = False,
    goodput: Any = None,
) -> SimResult:
    """Simulates `workload` under `config`.

    Args:
        workload: a `kvsim.Workload`.
        config: a `kvsim.SimConfig`.
        backend: `"rust"` (the fast engine, default) or `"reference"` (the pure-Python spec).
        record_events: log every block and scheduling event into `.events` (memory grows with the log).
        record_timeseries: True records every step's memory state into `.timeseries`; an integer N
            records every N-th step (memory grows with the number of recorded steps).
        goodput: SLO bounds in ms (`{"ttft": 500, "tpot": 50}`, `kvsim.engine.metrics.parse_goodput`): the
            summary then also holds `request_goodput`, `slo_attainment` and `slo_attainment_<metric>`.

    Returns:
        A `SimResult` with `.requests` (polars), `.summary` (dict) and, if asked, `.timeseries`.

    Raises:
        InvalidArgumentError: an unknown backend, a config that is not a SimConfig, or a bad interval.
    """
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"backend {backend!r} is not one of {', '.join(map(repr, BACKENDS))}")
    if not isinstance(config, SimConfig):
        raise InvalidArgumentError(f"config {config!r} is not a kvsim.SimConfig")
    check_one_replica(config, "kvsim.simulate")
    if not isinstance(record_events, bool | np.bool_):
        raise InvalidArgumentError(f"record_events {record_events!r} must be True or False")
    if not isinstance(record_timeseries, bool | int | np.bool_ | np.integer):
        raise InvalidArgumentError(
            f"record_timeseries {record_timeseries!r} must be a bool or an int between 1 and 2**62"
        )
    if goodput is not None:  # a bad SLO fails before the run, not after it
        from kvsim.engine.metrics import parse_goodput

        goodput = parse_goodput(goodput)
    every = int(record_timeseries)  # True -> every step
    if every < 0 or every > MAX_TIME_PS:
        raise InvalidArgumentError(
            f"record_timeseries {record_timeseries!r} must be a bool or an int between 1 and 2**62"
        )
    inp = prepare(workload, config)
    raw = _run_engine(inp, config, backend, every, bool(record_events))
    _freeze(raw)
    requests = request_rows(workload, inp, raw, tier=config.kv_offloading_chunks > 0)
    series = None
    if every:
        series = pl.DataFrame(raw.timeseries).with_columns(
            time_s=pl.col("time_ps") / PS_PER_S, free_blocks=pl.col("free_tokens") // config.engine_block_size
        )
        series = series.select(
            "step", "time_s", *[c for c in series.columns if c not in ("step", "time_s", "time_ps")]
        )
    log = None
    if record_events:
        seq = raw.events["seq"]
        log = pl.DataFrame(
            {
                "step": raw.events["step"],
                "time_s": raw.events["time_ps"] / PS_PER_S,
                # The names gathered by code: ten times faster than a categorical built from strings.
                "kind": pl.Series(list(EVENT_KINDS), dtype=pl.Categorical).gather(raw.events["kind"]),
                "request_id": inp.request_id[seq],
                "sample": inp.sample[seq],
                "block": raw.events["block"],
                "count": raw.events["count"],
            }
        )
    del inp  # the per-sequence input is not needed for the summary: free it first
    summary = summarize(requests, raw, config)
    if goodput is not None:
        from kvsim.engine.metrics import goodput_columns

        summary.update(goodput_columns(requests, raw, goodput))
    return SimResult(
        requests=requests, summary=summary, config=config, raw=raw, timeseries=series, events=log
    )


def check_one_replica(config: SimConfig, what: str) -> None:
    """Refuses a fleet (`replicas > 1`) where one replica runs: `kvsim.simulate_cluster` runs fleets."""
    if config.replicas > 1:
        raise InvalidArgumentError(
            f"replicas {config.replicas}: {what} runs one replica; use kvsim.simulate_cluster(workload, "
            "config) for a fleet behind a router"
        )
    if config.prefill_replicas > 0:
        raise InvalidArgumentError(
            f"prefill_replicas {config.prefill_replicas}: {what} runs one replica; use "
            "kvsim.simulate_cluster(workload, config) for a disaggregated fleet"
        )


def _freeze(raw: EngineOutput) -> None:
    """Makes the raw columns read-only: the request rows may share their memory (polars does not copy)."""
    for f in dataclasses.fields(raw):
        value = getattr(raw, f.name)
        if isinstance(value, np.ndarray):
            value.flags.writeable = False


def request_rows(workload: Any, inp: EngineInput, raw: EngineOutput, tier: bool = False) -> pl.DataFrame:
    """Per-request rows from per-sequence columns (samples of one request folded together); with a CPU
    tier (`tier`), also the tokens each request loaded from it and the time it waited for its loads."""
    n = len(workload)
    rows = inp.request_row
    big = np.iinfo(np.int64).max
    single = len(rows) == n  # one sequence per request
    # A request's samples are adjacent (sorted by arrival, stable), so each request is one run of sequences:
    # reduce runs at once, then put the runs in workload row order (the identity for a sorted `Workload`).
    # Run starts (all rows when single: then unused).
    starts = np.arange(n) if single else np.flatnonzero(np.diff(rows, prepend=-1))
    assert len(starts) == n, "every request has its sequences in one run"
    run_rows = rows if single else rows[starts]
    in_order = n == 0 or bool((run_rows == np.arange(n)).all())

    def place(v: np.ndarray) -> np.ndarray:
        if in_order:
            return v
        out = np.empty_like(v)
        out[run_rows] = v
        return out

    def fold(values: np.ndarray, how: str, missing: int = -1) -> np.ndarray:
        v = values.astype(np.int64, copy=False)
        if single:
            return place(v)  # shared with `raw` (read-only) when in order: 8 MB a column not copied
        if how == "sum":
            return place(np.add.reduceat(v, starts))
        if how == "min":
            out = np.minimum.reduceat(np.where(v < 0, big, v), starts)
            return place(np.where(out == big, missing, out))
        return place(np.maximum.reduceat(v, starts))

    rejected = fold((raw.status == REJECTED).astype(np.int64), "max") > 0
    reason = fold(raw.reject_reason, "max")

    def seconds(name: str, ps: np.ndarray) -> pl.Series:
        out = ps / PS_PER_S
        out[ps < 0] = np.nan  # never happened: null
        return pl.Series(name, out, nan_to_null=True)

    frame = pl.DataFrame(
        {
            "request_id": np.asarray(workload.request_id, dtype=np.uint64),
            "arrival": np.asarray(workload.arrival, dtype=np.float64),
            "first_scheduled": seconds("first_scheduled", fold(raw.first_scheduled, "min")),
            "first_token": seconds("first_token", fold(raw.first_token, "min")),
            "finish": seconds("finish", fold(raw.finish, "max")),
            "prompt_len": np.asarray(workload.prompt_len, dtype=np.int64),
            "output_len": fold(raw.generated, "sum"),
            # The workload's own column when every request is one sequence (no copy).
            "num_samples": np.asarray(workload.num_samples, dtype=np.int64)
            if single
            else np.bincount(rows, minlength=n).astype(np.int64),
            "num_preemptions": fold(raw.num_preemptions, "sum"),
            "num_swaps": fold(raw.num_swaps, "sum"),
            "cached_tokens": fold(raw.cached_tokens, "sum"),
            "recomputed_tokens": fold(raw.recomputed_tokens, "sum"),
            **(
                {
                    "cpu_hit_tokens": fold(raw.cpu_hit_tokens, "sum"),
                    "load_wait_s": fold(raw.load_wait_ps, "sum") / PS_PER_S,
                }
                if tier
                else {}
            ),
            # Labels gathered by code: building strings through numpy costs ~0.4 s per million rows.
            "status": _STATUS_TEXT.gather(rejected.astype(np.uint32)),
            "reject_reason": _REASON_TEXT.gather(np.where(rejected, reason, 0).astype(np.uint32)),
        }
    )
    return frame


_LATENCIES = ("ttft_s", "tpot_s", "e2e_s", "queueing_s")
SUMMARY_QUANTILES = (0.5, 0.9, 0.99)
"""The latency percentiles a run's summary reports (`ttft_s_p50`, `_p90`, `_p99`), and the plans' SLOs bound."""


def _latencies(col: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each latency of `_LATENCIES` over the finished requests' columns `col`, in seconds, NaNs dropped: the
    values the summary's percentiles and means are taken over (TPOT over requests of more than one token
    a sample)."""
    per_sample = col["output_len"] / col["num_samples"]
    multi = col["output_len"] > col["num_samples"]
    values = {
        "ttft_s": col["first_token"] - col["arrival"],
        "tpot_s": (col["finish"] - col["first_token"])[multi] / (per_sample[multi] - 1),
        "e2e_s": col["finish"] - col["arrival"],
        "queueing_s": col["first_scheduled"] - col["arrival"],
    }
    return {name: v[~np.isnan(v)] for name, v in values.items()}


def latency_values(requests: pl.DataFrame) -> dict[str, np.ndarray]:
    """The per-request values behind the summary's latency percentiles (`ttft_s`, `tpot_s`, `e2e_s`,
    `queueing_s`, seconds, over the finished requests of a request frame): `ttft_s_p99` is the linear 0.99
    quantile of `latency_values(r.requests)["ttft_s"]`."""
    finished = requests.filter(pl.col("status") == "finished")
    names = ("arrival", "first_scheduled", "first_token", "finish", "output_len", "num_samples")
    return _latencies({name: finished[name].to_numpy() for name in names})


class RowStats:
    """The summary's row-derived metrics, fed request rows in order (all at once or chunk by chunk: the
    same numbers either way, `kvsim.engine.exact`).

    Args:
        memory_limit: latency values kept in memory per metric before they are spilled to a file.
        spill_dir: where spill files go (default: the system's temporary directory).
    """

    def __init__(self, memory_limit: int = 1 << 24, spill_dir: Any = None) -> None:
        self.num_requests = self.completed = self.output_tokens = 0
        self.means = {name: Mean() for name in (*_LATENCIES, "normalized")}
        self.quantiles = {name: Quantiles(memory_limit, spill_dir) for name in _LATENCIES}

    def add(self, requests: pl.DataFrame) -> None:
        # numpy columns of the finished requests (missing times are NaN): a million rows in milliseconds.
        finished = (requests["status"] == "finished").to_numpy()
        every = bool(finished.all())  # then no row is dropped and float columns come without a copy
        col = {
            name: requests[name].to_numpy() if every else requests[name].to_numpy()[finished]
            for name in ("arrival", "first_scheduled", "first_token", "finish", "output_len", "num_samples")
        }
        self.num_requests += requests.height
        self.completed += int(finished.sum())
        self.output_tokens += int(col["output_len"].sum())
        for name, v in _latencies(col).items():
            self.means[name].add(v)
            self.quantiles[name].add(v)
        e2e = col["finish"] - col["arrival"]
        self.means["normalized"].add(e2e / (col["output_len"] / col["num_samples"]))

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "num_requests": self.num_requests,
            "completed": self.completed,
            "rejected": self.num_requests - self.completed,
            "output_tokens": self.output_tokens,
        }
        for name in _LATENCIES:
            qs = self.quantiles[name].result(SUMMARY_QUANTILES)
            self.quantiles[name].close()
            out.update({f"{name}_p{round(q * 100)}": qs[q] for q in SUMMARY_QUANTILES})
            out[f"{name}_mean"] = self.means[name].result()
        out["normalized_latency_s_per_token"] = self.means["normalized"].result()
        return out


def over(num: float, den: float) -> float | None:
    """`num / den`, or None when `den` is 0: a mean or a rate over nothing (no step, no busy time, no prompt
    admitted, no load) is none, not 0 (DESIGN.md §Metrics)."""
    return num / den if den else None


def summarize(requests: pl.DataFrame, raw: EngineOutput, config: SimConfig) -> dict[str, Any]:
    """Every SPEC §7 metric as a plain Python number (DESIGN.md §Metrics defines each)."""
    stats = RowStats()
    stats.add(requests)
    return summary_from(stats, raw.counters, config)


def summary_from(stats: RowStats, c: dict[str, Any], config: SimConfig) -> dict[str, Any]:
    """The summary from the row statistics and the engine's counters `c`."""
    rows = stats.result()
    s: dict[str, Any] = {k: rows[k] for k in ("num_requests", "completed", "rejected")}
    completed = rows["completed"]
    makespan = c["makespan_ps"] / PS_PER_S
    busy = c["busy_ps"]
    s["makespan_s"] = makespan
    s["throughput_rps"] = over(completed, makespan)
    s["output_tokens"] = rows["output_tokens"]
    s["throughput_tok_s"] = over(s["output_tokens"], makespan)
    for name in _LATENCIES:
        for key in (*(f"{name}_p{round(q * 100)}" for q in SUMMARY_QUANTILES), f"{name}_mean"):
            s[key] = rows[key]
    s["normalized_latency_s_per_token"] = rows["normalized_latency_s_per_token"]
    s["num_steps"] = c["num_steps"]
    s["mean_batch"] = over(c["sum_batch"], c["num_steps"])
    s["time_weighted_batch"] = over(c["w_batch"], busy)
    s["peak_batch"] = c["peak_batch"]
    s["mean_batched_tokens"] = over(c["sum_batched_tokens"], c["num_steps"])
    cap = config.capacity_tokens
    denom = busy * cap
    for key, name in (
        ("w_stored", "kv_utilization"),
        ("w_allocated", "kv_allocated_fraction"),
        ("w_internal", "internal_fragmentation"),
        ("w_reserved", "reservation_waste"),
        ("w_external", "external_fragmentation"),
    ):
        s[name] = over(c[key], denom)
    alloc = c["w_allocated"]
    s["stored_share_of_allocated"] = over(c["w_stored"], alloc)
    # (the allocated slots a partial block or a region leaves unused: what a block size trades; the
    # `internal_fragmentation` above is the same slots over the whole pool, small wherever the pool is)
    s["internal_fragmentation_of_allocated"] = over(c["w_internal"], alloc)
    s["peak_allocated_fraction"] = c["peak_allocated_tokens"] / cap if cap else 0.0
    s["capacity_tokens"] = cap
    s["prefix_hit_tokens"] = c["prefix_hit_tokens"]
    admitted = c["prompt_tokens_admitted"]
    s["prefix_hit_rate"] = over(c["prefix_hit_tokens"], admitted)
    first = c["first_prompt_tokens"]
    s["prefix_hit_rate_first_admission"] = over(c["first_hit_tokens"], first)
    s["blocks_saved_by_sharing"] = over(c["w_logical_blocks"] - c["w_held_blocks"], busy)
    s["cow_copies"] = c["num_cow_copies"]
    s["evictions"] = c["num_evictions"]
    s["preemptions"] = c["num_preemptions"]
    s["recomputed_tokens"] = c["recomputed_tokens"]
    s["swapped_blocks"] = c.get("num_swapped_blocks", 0)
    for g in range(len(config.kv_groups)):  # a hybrid model: each KV-cache group's blocks
        s[f"mean_group_blocks_{g}"] = over(c[f"w_group_blocks_{g}"], busy)
        s[f"peak_group_blocks_{g}"] = c[f"peak_group_blocks_{g}"]
    if config.kv_offloading_chunks:
        s.update(tier_summary(c, config))
    return s


def moved_bytes(config: Any, c: Any, done: str) -> int | None:
    """The host bytes a run's CPU-tier transfers moved, `done` "loaded" or "stored" (DESIGN.md §CPU tier,
    Metrics): its blocks at a load's or a store's bytes a block (`SimConfig.kv_offloading_block_bytes`,
    `kv_offloading_store_block_bytes`: a store under the replicated layout is one rank's), a hybrid model's
    each group's blocks at the group's own bytes (counted by the engine over every rank, so a store's share
    of one rank's under the replicated layout); None without a model."""
    if config.kv_offloading_group_block_bytes is not None:
        total = int(c[f"{done}_group_bytes"])
        if done == "stored":
            total = total * config.kv_offloading_copies // config.tensor_parallel_size
        return total
    per = config.kv_offloading_block_bytes if done == "loaded" else config.kv_offloading_store_block_bytes
    return int(c[f"{done}_blocks"]) * per if per is not None else None


def tier_summary(c: dict[str, Any], config: SimConfig) -> dict[str, Any]:
    """The CPU tier's metrics (DESIGN.md §CPU tier, §Metrics): hits on the GPU and in the tier and the
    misses, as token rates over the prompt tokens admitted (resumes included) and over first admissions'
    (what vLLM's `prefix_cache_*` and `external_prefix_cache_*` counters count); blocks and bytes moved each way (`kv_offload_load_bytes`,
    `kv_offload_store_bytes`), stores the tier could not make room for (`kv_offload_allocation_failure`)
    or skipped under the store threshold, evictions, flushes, the time requests waited for loads, and
    the tier's occupancy."""
    s: dict[str, Any] = {}
    admitted = c["prompt_tokens_admitted"]
    gpu, cpu = c["prefix_hit_tokens"], c["cpu_hit_tokens"]
    s["cpu_hit_tokens"] = cpu
    s["cpu_hit_rate"] = over(cpu, admitted)
    s["miss_rate"] = over(admitted - gpu - cpu, admitted)
    first, first_gpu, first_cpu = c["first_prompt_tokens"], c["first_hit_tokens"], c["first_cpu_hit_tokens"]
    # (vLLM 0.34.0's `external_prefix_cache_*` counters, as its `prefix_cache_*`, count first admissions
    # alone: `PrefixCacheStats.record` puts a resumed request's lookup in `preempted_*`, v1/metrics/stats.py)
    s["external_prefix_cache_hit_rate"] = over(first_cpu, first - first_gpu)
    s["cpu_hit_rate_first_admission"] = over(first_cpu, first)
    s["miss_rate_first_admission"] = over(first - first_gpu - first_cpu, first)
    s["hit_rate_first_admission"] = over(first_gpu + first_cpu, first)
    for name, done, jobs, blocks in (
        ("load", "loaded", "num_loads", "loaded_blocks"),
        ("store", "stored", "num_stores", "stored_blocks"),
    ):
        s[f"{name}s"] = c[jobs]
        s[f"{done}_blocks"] = c[blocks]
        s[f"{done}_bytes"] = moved_bytes(config, c, done)
    s["stores_failed"] = c["stores_failed"]
    s["stores_skipped"] = c["stores_skipped"]
    s["cpu_evictions"] = c["cpu_evictions"]
    s["flushes"] = c["num_flushes"]
    s["load_wait_s_total"] = c["load_wait_ps"] / PS_PER_S
    s["load_wait_s_mean"] = over(c["load_wait_ps"] / PS_PER_S, c["num_loads"])
    chunks = config.kv_offloading_chunks
    busy = c["busy_ps"]
    s["cpu_tier_chunks"] = chunks
    s["cpu_tier_occupancy"] = over(c["w_cpu_chunks"], busy * chunks)
    s["cpu_tier_peak_occupancy"] = c["peak_cpu_chunks"] / chunks
    return s


__all__ = [
    "FINISHED",
    "REJECTED",
    "RowStats",
    "SimResult",
    "check_one_replica",
    "latency_values",
    "request_rows",
    "simulate",
    "summarize",
    "summary_from",
]
