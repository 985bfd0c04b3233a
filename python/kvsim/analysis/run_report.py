"""What a `kvsim run` says about its result: the human table (throughput, latency in ms, memory, cache,
preemption, with units) and the notes (not memory-bound and why, rejected requests, requests past the
model's context, vllm serve's batch defaults, a trace that cannot hit the prefix cache). `kvsim.cli.run`
parses the flags and calls these; each metric is defined in `kvsim.engine.metrics` and DESIGN.md §Metrics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kvsim.analysis.steady_state import (
    LOWER_THE_RATE,
    MIN_RATE_ARRIVALS,
    ONE_REQUEST_NOTE,
    QUEUE_WAIT_COUNTS,
    queue_growth,
    too_short,
    too_short_note,
)
from kvsim.model.units import fmt_count

# What --enforce-eager changes in a timed run, and what it does not (DESIGN.md §Time model).
EAGER_NOTE = (
    "enforce_eager: kvsim times an eager run's steps as a graph-captured run's (its time model prices no "
    "kernel-launch overhead, which vLLM's CUDA graphs remove in decode), so against a run with graphs this one "
    "shows only the memory side, the CUDA-graph memory returned to the KV cache; a real eager run's decode "
    "steps are slower"
)


def run_notes(result: Any, workload: Any, info: dict[str, Any], notes: list[str]) -> None:
    """What the user should know about this run's answer (appended to `notes`; DESIGN.md §Defaults).

    Args:
        result: the `SimResult`.
        workload: the workload it ran.
        info: the workload's record (`name`, `params`, ...).
        notes: the list the notes are appended to.
    """
    import numpy as np

    from kvsim.model.layers import GDN_ASSUMED_NOTE

    s, cfg = result.summary, result.config
    layout = cfg.pool.layout if cfg.pool is not None else None
    if layout is not None and GDN_ASSUMED_NOTE in layout.notes:
        notes.append(GDN_ASSUMED_NOTE)  # (the kernel assumed without a GPU architecture)
    if cfg.time_model == "ticks":
        from kvsim.model.units import fmt_duration_ps

        tick = fmt_duration_ps(cfg.iteration_time_ps)
        why, how = cfg.ticks_why()
        notes.append(
            f"times are ticks ({why}): every step takes {tick} (time_model ticks, --iteration-time-ps), so "
            f"the duration, the throughputs and the latencies count steps, not a GPU's time; {how}"
        )
    if cfg.enforce_eager and cfg.time_model != "ticks":  # (user53 #12: the flag looked free)
        notes.append(EAGER_NOTE)
    if (scheduling := async_note(cfg)) is not None:
        notes.append(scheduling)
    if (imex := imex_note(cfg)) is not None:
        notes.append(imex)
    refusal = cfg.pool.vllm_refusal if cfg.pool is not None else None
    if refusal is not None:
        # (a pool in bytes without a GPU, or any pool in blocks: kvsim's experiment, run)
        how = (
            "kvsim runs a pool given in blocks (--num-gpu-blocks-override) whatever it holds, as an experiment"
            if cfg.pool.source == "num_blocks"
            else (
                "kvsim runs it because no GPU is named: a pool in bytes without one is no deployment vLLM "
                "could start but kvsim's experiment (the tests' small pools), so vLLM's refusal is this note; "
                "with --gpu it is a deployment, and kvsim refuses it with an error as vLLM does"
            )
        )
        notes.append(
            f"vLLM refuses this pool at start-up, so it never serves with the vllm: figures above: {refusal}. {how}"
        )
    peak = s.get("peak_allocated_fraction", 0.0)
    queue = s.get("queueing_s_p99")
    e2e = s.get("e2e_s_p50")
    calm = (
        s["preemptions"] == 0
        and s["rejected"] == 0
        and peak < 0.9
        and admissions_never_waited_for_memory(result, workload)
    )
    knobs = "memory knobs (block size, pool size, gpu memory utilization, preemption mode, swap space)"
    pool, where, span, remote = "the pool peaked at {} of its capacity", "", "", ""
    if cfg.prefill_replicas:
        # A P/D fleet's `queueing_s` runs from arrival to the decode replica's first step, the remote
        # prefill (its queue and its compute) and the KV transfer in it: the decode replicas' seats and
        # token budget are judged by their own queue only (DESIGN.md §Defaults and sizing, the notes),
        # and the prefill pool's memory must be calm too for the memory knobs to change nothing.
        queue, parts = pd_decode_queue(result)
        calm = calm and prefill_pool_calm(result, workload)
        pool = "the decode replicas' pools peaked at {} of their capacity, the prefill replicas' below 90 %"
        where = " on their decode replicas"
        span = ", from the hand-off to the first step there, less the transfer"
        if queue is not None and parts and sum(parts.values()) > queue:  # (the remote side's part is larger)
            remote = (
                "; the rest of the wait for that step is the prefill pool's and the link's: "
                + ", ".join(f"{name} p99 {1000 * v:,.1f} ms" for name, v in parts.items())
            )
    # (evictions in a calm run are the free queue's cached blocks reused once its never-used ones ran out:
    # every allocation past them takes the oldest; said so beside the note, lest they read as pressure)
    reused = (
        f"; the run's {s['evictions']:,} evictions are cached free blocks reused for new ones (vLLM's prefix-cache "
        "evictions, which it times, sampled, as vllm:kv_block_idle_before_evict_seconds with "
        "--kv-cache-metrics), not memory pressure"
        if s.get("evictions")
        else ""
    )
    if calm and (queue is None or e2e is None or queue <= 0.01 * e2e):
        notes.append(
            f"not memory-bound: {pool.format(_pct(peak))}, nothing was preempted and requests barely "
            f"queued{where} (p99 {1000 * max(queue or 0.0, 0.0):.1f} ms{span}{remote}); {knobs} cannot change "
            f"this answer; raise the load to see them{reused}"
        )
    elif calm:
        # Overloaded, but not by memory: requests queued while the pool never came near full and nothing
        # was preempted, so admission waited for seats or for the token budget, never for blocks.
        if s["peak_batch"] >= cfg.max_num_seqs:
            limit = (
                f"the batch reached max_num_seqs ({cfg.max_num_seqs} sequences, --max-num-seqs) and requests "
                "waited for a seat"
            )
        else:
            limit = (
                f"requests waited for the token budget (max_num_batched_tokens {cfg.max_num_batched_tokens}, "
                "--max-num-batched-tokens) and the iteration time"
            )
        notes.append(
            f"not memory-bound: requests queued{where} (p99 {1000 * queue:,.1f} ms{span}{remote}) but "
            f"{pool.format(_pct(peak))} and nothing was preempted: {limit}, not for memory; {knobs} cannot "
            f"change this answer{reused}"
        )
    growth = queue_growth(result)
    if growth is not None:
        from kvsim.model.units import fmt_duration_ps

        offered, served, first, last = growth
        # (with requests rejected, the rate is the finished requests' own, not the workload's)
        arrived = (
            f"the {s['completed']:,} requests that finished arrived at {offered:,.3g}/s"
            if s["rejected"]
            else f"the workload offers {offered:,.3g} requests/s"
        )
        notes.append(
            f"overloaded: {arrived} and this configuration served "
            f"{served:,.3g}/s, so the queue grew through the run (the first tenth of requests, by arrival, "
            f"waited {fmt_duration_ps(first * 1e12)} on average for their first step, the last tenth "
            f"{fmt_duration_ps(last * 1e12)}): {QUEUE_WAIT_COUNTS}; lower the rate (--time-scale, --request-rate) "
            f"or {LOWER_THE_RATE}"
        )
    short = too_short(result) if growth is None else None  # (an overloaded run's note says it is not one)
    if short is not None:
        arrived_over, e2e_p99, rate = short
        notes.append(
            too_short_note(s["completed"], arrived_over, e2e_p99, note_rate(workload, s["completed"], rate))
        )
    elif growth is None and s["completed"] == 1:  # (`warmup` needs 2: one request is no steady state either)
        notes.append(ONE_REQUEST_NOTE)
    if s["rejected"]:
        reasons = result.requests["reject_reason"].drop_nulls().value_counts(sort=True)
        why = "; ".join(f"{reason}: {n:,}" for reason, n in reasons.iter_rows())
        notes.append(
            f"{s['rejected']:,} of {fmt_count(s['num_requests'], 'request')} "
            f"{'was' if s['rejected'] == 1 else 'were'} rejected, never run ({why}); "
            "latencies and throughput count finished requests only"
        )
    given = getattr(cfg, "_given", {})
    derived = [k for k in ("max_num_seqs", "max_num_batched_tokens") if given.get(k) is None]
    if cfg.gpu is not None and derived:
        from kvsim.model.gpus import resolve as resolve_gpu

        g = resolve_gpu(cfg.gpu)
        flags = {"max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-num-batched-tokens"}
        picked = " and ".join(f"{flags[k]} {getattr(cfg, k)}" for k in derived)
        notes.append(
            f"{picked}: what vllm serve picks on {g.name} when not given (batch_rule {cfg.batch_rule}, "
            "DESIGN.md §Defaults and sizing); pass the flags to choose others"
        )
    if cfg.model is not None and given.get("max_model_len") is None and len(workload):
        # vLLM's max_model_len defaults to the model's context (and so does kvsim's with a model): say
        # what that default refused and cut, since the user did not choose it.
        context = int(cfg.max_model_len)
        prompt = np.asarray(workload.prompt_len)
        refused = int((prompt >= context).sum())
        cut = int(
            (
                (prompt < context)
                & (
                    prompt + np.minimum(np.asarray(workload.output_len), np.asarray(workload.max_tokens))
                    > context
                )
            ).sum()
        )
        if refused or cut:
            what = " and ".join(
                part
                for part in (
                    f"{refused:,} prompt{'s' * (refused != 1)} reach{'es' * (refused == 1)} it (refused)"
                    if refused
                    else "",
                    f"{cut:,} output{'s' * (cut != 1)} end{'s' * (cut == 1)} at it (cut short)"
                    if cut
                    else "",
                )
                if part
            )
            notes.append(
                f"max_model_len is the model's context, {context:,} tokens (vLLM's default): {what}; "
                "--max-model-len with --allow-long-max-model-len runs them longer"
            )
    if cfg.sampling == "fork-cow" and len(workload) and (np.asarray(workload.num_samples) == 1).all():
        # (not refused, as an idle knob is: whether a request has samples is the workload's, which varies)
        notes.append(
            f"sampling 'fork-cow' changes nothing here: every request of {info['name']} has one sample, so "
            "nothing is forked and the run is the one sampling 'independent' gives; it shares the samples of a "
            "request with num_samples above 1 (a synthetic workload's num_samples=N) copy-on-write"
        )
    if cfg.enable_prefix_caching and not cfg.is_contiguous and len(workload):
        ids = np.asarray(workload.segment_id)
        if len(np.unique(ids)) == len(ids) and s.get("prefix_hit_rate_first_admission", 0.0) == 0.0:
            meta = getattr(workload, "meta", {})
            why = (
                "the Azure traces carry no content hashes, so every prompt is its own"
                if str(info["name"]).startswith("azure")
                # a file of one's own without a hash_ids column gives no content at all
                else "the file gives no prompt content, no hash_ids column, so every prompt is taken as unique"
                if meta.get("format") in ("csv", "jsonl", "parquet")
                and "hash_ids" not in meta.get("columns", {})
                else "no two of its prompts share content"
            )
            own = s.get("prefix_hit_rate", 0.0)
            resumed = (
                f"; the {100 * own:.1f} % prefix hit rate above is preempted requests re-finding their own "
                "blocks on readmission"
                if own > 0
                else ""
            )
            notes.append(
                f"prefix caching is on, but {info['name']} cannot hit the cache across requests ({why}): "
                f"its hit rate on first admissions is 0 whatever the cache{resumed}"
            )


# A disaggregated fleet's TTFT parts, labelled as its table (`run_report_fleet.render_pd`) and the notes
# label them, with their summary keys (DESIGN.md §Prefill/decode disaggregation, Metrics).
PD_PARTS = (
    ("prefill queueing", "ttft_prefill_queue"),
    ("prefill", "ttft_prefill"),
    # (newcomer review: "transfer" read 4.7 ms p50 beside a link in use 0.26 % of the run, ~0.4 ms a
    # transfer: the part runs to the decode step that sees the transfer done, `render_pd` says so)
    ("transfer+wait", "ttft_transfer"),
    # (the rest of TTFT: the decode replica's queue and the step that makes the first token; a local
    # prefill's whole TTFT: `render_pd` says so)
    ("decode queue+step", "ttft_decode"),
)


ASYNC_RULE = (
    "vLLM 0.19.0 and later schedule asynchronously by default (a request arriving during a step is "
    "scheduled a step later than here, a finished request's seat and blocks are free a step later)"
)


def imex_note(cfg: Any) -> str | None:
    """A disaggregated fleet's pool sizing on CUDA, where vLLM 0.34.0's rule for NIXL without an IMEX channel
    (`kvsim.model.measured.imex_lines`, its `vllm:` line) decides it: profiled where it was left unset (so
    not the single replica's measured pool: user52 #6), or measured where it was given, with vLLM's warning
    (#7); None elsewhere."""
    from kvsim.model.measured import NO_IMEX

    figures = cfg.pool.figures if cfg.pool is not None else None
    lines = figures.config_lines if figures is not None else ()
    if NO_IMEX in lines:
        return (
            "--kv-cache-sizing measured with a disaggregated fleet: vLLM 0.34.0 keeps its extensible KV cache on "
            "when asked, without an IMEX channel too, and warns that KV transfers within a host (NIXL) then fall "
            "back to TCP while transfers across hosts use RDMA; kvsim's prefill-to-decode link crosses hosts "
            "(--pd-link-bandwidth unset: the GPU's NIC), the case vLLM recommends it for"
        )
    if lines:
        return (
            f"the pool is profiled (vLLM 0.33.0's rule, at gpu_memory_utilization {cfg.gpu_memory_utilization:g}), "
            "not measured after warmup as one replica's is: vLLM 0.34.0 leaves its extensible KV cache off for "
            "NIXL's connector without an IMEX channel, which kvsim assumes (the vllm: line above); where "
            "transfers only cross hosts, as kvsim's link does, vLLM's --enable-extensible-kv-cache keeps it on: "
            "--kv-cache-sizing measured"
        )
    return None


def async_note(cfg: Any) -> str | None:
    """What a run whose `async_scheduling` is unset (vLLM's default deployment, kvsim's engine synchronous:
    DESIGN.md §Departures) says of its scheduling: that vLLM's default is asynchronous and that
    `--async-scheduling` runs that rule (every configuration of vLLM v1's rules takes it, a disaggregated fleet
    included); None where the knob is set, or for rules vLLM v1 never scheduled asynchronously (another
    policy, swapping, fork-cow sampling, v0's append check)."""
    v1 = (cfg.policy, cfg.preemption, cfg.sampling, cfg.append_check) == (
        "vllm",
        "recompute",
        "independent",
        "exact",
    )
    if cfg.async_scheduling is not None or not v1:
        return None
    return (
        f"scheduling is synchronous here, while {ASYNC_RULE}: --async-scheduling runs vLLM's rule (DESIGN.md "
        '§Engine, "Asynchronous scheduling"); --no-async-scheduling is vLLM\'s synchronous deployment'
    )


def pd_decode_queue(result: Any) -> tuple[float | None, dict[str, float] | None]:
    """A disaggregated fleet's queueing on its decode replicas (DESIGN.md §Defaults and sizing, Not
    memory-bound): the p99 over finished requests of the time from the hand-off (arrival, for a request
    prefilled locally) to the first step on the decode replica, less the transfer (`queueing_s` less
    `ttft_prefill_queue_s`, `ttft_prefill_s` and `ttft_transfer_s`: the waits for the decode replica's
    blocks, seats and token budget); and the remote parts' p99s (prefill queueing, prefill, transfer), the
    summary's. (None, None) with no request finished."""
    import numpy as np
    import polars as pl

    q = result.requests.filter(pl.col("status") == "finished")
    if not q.height:
        return None, None
    wait = (q["first_scheduled"] - q["arrival"]).to_numpy()
    for name in ("ttft_prefill_queue_s", "ttft_prefill_s", "ttft_transfer_s"):
        wait = wait - q[name].to_numpy()
    s = result.summary
    # (the remote parts, as the P/D table labels them: its last part is the decode replica's own)
    parts = {label: s[f"{key}_p99_s"] for label, key in PD_PARTS[:3]}
    return float(np.percentile(np.maximum(wait, 0.0), 99)), parts


def prefill_pool_calm(result: Any, workload: Any) -> bool:
    """Whether a disaggregated fleet's prefill pool was as calm as the notes require of a pool: no
    preemption, its fullest replica's peak allocation below 90 % of its capacity and no admission that can
    have waited for blocks (`admissions_never_waited_for_memory`, over the prefill replicas' config)."""
    from types import SimpleNamespace

    cfg, cs = result.prefill_config, result.prefill_counters
    if cfg is None or not cs:
        return True
    cap = cfg.capacity_tokens
    peak = max(c["peak_allocated_tokens"] for c in cs) / cap if cap else 0.0
    pool = SimpleNamespace(config=cfg, summary={"peak_allocated_fraction": peak})
    return (
        sum(c["num_preemptions"] for c in cs) == 0
        and peak < 0.9
        and admissions_never_waited_for_memory(pool, workload)
    )


def _pct(x: float) -> str:
    """A share as the notes give it: whole percents, one decimal below 10 % (so 0.5 % is not "0%")."""
    return f"{100 * x:.1f} %" if x < 0.1 else f"{100 * x:.0f} %"


def admissions_never_waited_for_memory(result: Any, workload: Any) -> bool:
    """Whether no admission of the run can have waited for blocks: even at the pool's peak allocation
    every request's admission need (at most its whole prompt's blocks, prefix hits included, plus the
    watermark) fits in what was left. An admission comes after the step's running phase and before
    anything it frees (DESIGN.md §Engine, "One step"), so the blocks allocated when it is decided are at
    most those the step records. A hybrid pool (several KV-cache groups sharing its blocks) bounds the
    need by every group's blocks for the longest prompt, a window's and a state's at their caps
    (`kv_groups.peak_blocks`, what rejection at arrival compares; it once claimed nothing for them, and
    Qwen3-Next peaking at 0.8 % of its pool got no note). Told only of paged pools without promised
    blocks; False otherwise (the notes then claim nothing about memory)."""
    import numpy as np

    from kvsim.reference.kv_groups import peak_blocks

    cfg, s = result.config, result.summary
    if cfg.is_contiguous or cfg.policy == "reserve":
        return False
    if not len(workload):
        return True
    longest = int(np.asarray(workload.prompt_len, dtype=np.int64).max())
    groups = cfg.kv_groups
    blocks = peak_blocks(groups, longest) if groups else -(-longest // cfg.engine_block_size)
    need = blocks + cfg.watermark_blocks
    # (the peak as the summary gives it, a fraction of the capacity: whole blocks, up to rounding; a
    # fleet's is its fullest replica's)
    peak_blocks = math.ceil(s.get("peak_allocated_fraction", 0.0) * cfg.capacity_blocks - 1e-6)
    return need <= cfg.capacity_blocks - peak_blocks


def note_rate(workload: Any, finished: int, observed: float) -> tuple[float, str] | None:
    """The rate `too_short_note` (`kvsim.analysis.steady_state`) quotes, with whose it is: the workload's own where a generator states it
    (`arrival_rate` over any `time_scale`, `kvsim.analysis.plan.workload_rate`), else the finished
    requests' observed rate (`kvsim.workloads.table.arrival_rate`) when at least `MIN_RATE_ARRIVALS` finished; None from fewer (a
    rate from a few gaps is noise, and the requests it asks for with it absurd)."""
    meta = getattr(workload, "meta", {}) or {}
    if meta.get("arrival_rate") is not None and meta.get("arrivals") in ("poisson", "gamma", "constant"):
        from kvsim.analysis.plan import workload_rate
        from kvsim.errors import InvalidArgumentError

        try:
            return workload_rate(workload), "the workload's rate"
        except InvalidArgumentError:
            pass
    if finished >= MIN_RATE_ARRIVALS and math.isfinite(observed):
        return observed, "their rate"
    return None


EVICTIONS = "evictions (cached free blocks reused)"
"""The run report's label for `evictions` (DESIGN.md §Metrics): the cached free blocks a new block took
(vLLM's free queue hands out its oldest, dropping the hash a prefix could have hit), which a run far from
full counts by the ten thousand once the never-used blocks run out, so "evictions" alone read as memory
pressure (newcomer46)."""

_GROUPS: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    (
        "throughput",
        (
            ("completed", "requests completed", "count"),
            ("failed", "requests rejected", "count"),
            ("duration_s", "duration", "s"),
            ("request_throughput", "request throughput", "req/s"),
            ("output_throughput", "output token throughput", "tok/s"),
            ("total_token_throughput", "total token throughput", "tok/s"),
            ("request_goodput", "request goodput", "req/s"),
            ("slo_attainment", "SLO attainment", "%"),
        ),
    ),
    (
        "memory",
        (
            ("kv_utilization", "KV utilization (tokens stored)", "%"),
            ("kv_allocated_fraction", "KV allocated", "%"),
            ("peak_allocated_fraction", "peak allocated", "%"),
            ("internal_fragmentation", "internal fragmentation / pool", "%"),
            ("internal_fragmentation_of_allocated", "internal fragmentation / allocated", "%"),
            ("reservation_waste", "reservation waste / pool", "%"),
            ("external_fragmentation", "external fragmentation / pool", "%"),
            ("time_weighted_batch", "mean batch (time-weighted)", "sequences"),
            ("mean_batch", "mean batch (per step)", "sequences"),
            ("peak_batch", "peak batch", "sequences"),
        ),
    ),
    (
        "cache",
        (
            ("prefix_hit_rate", "prefix hit rate", "%"),
            ("prefix_hit_rate_first_admission", "prefix hit rate (first admissions)", "%"),
            ("blocks_saved_by_sharing", "blocks saved by sharing (mean)", "blocks"),
            ("evictions", EVICTIONS, "blocks"),
            ("cow_copies", "copy-on-write copies", "blocks"),
        ),
    ),
    (
        "preemption",
        (
            ("preemptions", "preemptions", "count"),
            ("recomputed_tokens", "recomputed tokens", "tokens"),
            ("swapped_blocks", "swapped blocks (out and in)", "blocks"),
        ),
    ),
)


# A disaggregated fleet's cache group (DESIGN.md §Metrics): each pool's prefix hit rate beside the fleet's,
# which counts every lookup of both pools (a disaggregated prompt is looked up on both).
_PD_CACHE = (
    ("prefill_prefix_hit_rate", "prefix hit rate, prefill replicas", "%"),
    ("decode_prefix_hit_rate", "prefix hit rate, decode replicas", "%"),
    ("prefix_hit_rate", "prefix hit rate, both pools", "%"),
    ("prefix_hit_rate_first_admission", "  first admissions, both pools", "%"),
    ("blocks_saved_by_sharing", "blocks saved by sharing (mean)", "blocks"),
    ("evictions", EVICTIONS, "blocks"),
    ("cow_copies", "copy-on-write copies", "blocks"),
)
_PD_CACHE_NOTE = (
    "  (hit tokens / prompt tokens looked up: a disaggregated prompt is looked up on its prefill replica,\n"
    "  where a hit saves computing it, and on its decode replica, where a hit saves moving it; blocks saved,\n"
    "  evictions and copies are the decode replicas')"
)


def _num(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and abs(v) < 1e-9:
        v = 0.0  # (a float sum's rounding, e.g. the std of equal values: 1e-14 is 0; -0.0 too)
    if unit == "%":
        return f"{100 * v:.1f} %"
    if isinstance(v, int):
        return f"{v:,}"
    if abs(v) >= 100:
        return f"{v:,.1f}"
    return f"{v:.4g}"


def render_table(
    serving: dict[str, Any],
    summary: dict[str, Any],
    metrics: Sequence[str],
    pcts: Sequence[float],
    tick: str | None = None,
    replicas: tuple[int, int] = (1, 0),
    prefix_caching: bool = True,
    times: str | None = None,
) -> str:
    """The human table: throughput, latency (ms), memory, cache and preemption groups, with units.
    `times` (a GPU's time model: `SimConfig.time_record`'s words, `datasheet roofline: optimistic bounds`)
    heads the latency group with what its times are, a bound or a calibrated estimate, not a measurement.
    Without prefix caching (`prefix_caching` False) the hit rates read "off", not a measured 0.0 %.
    `tick` (a run whose time model is ticks: its step's time, `1 ms`) heads the timed groups with it, so
    they read as ticks, not a GPU's time. The memory group's heading says what its figures are: weighted
    over the busy time unless a line says per step, and for a fleet (`replicas`: its replicas, and its
    prefill replicas besides them) one replica's, averaged over the (decode) replicas, its peaks the
    fullest one's."""
    from kvsim.engine.metrics import _pct_key

    per_step = "unless a line says per step"  # (mean_batch, over steps, beside time_weighted_batch)

    values = {**summary, **serving}
    lines: list[str] = []
    ticks = f" of ticks: {tick} a step, not a GPU's time" if tick else ""
    pd = "prefill_prefix_hit_rate" in values  # (a disaggregated fleet: each pool's hit rate)
    for title, rows in _GROUPS:
        if title == "cache" and pd:
            rows = _PD_CACHE
        shown = [(k, label, unit) for k, label, unit in rows if k in values]  # (None: over nothing, "-")
        if title == "throughput":
            shown = [r for r in shown if r[0] in values]
        if not shown:
            continue
        head = f" (seconds{ticks})" if title == "throughput" and tick else ""
        if title == "memory":
            n, prefill = replicas
            # (it said "means time-weighted" above the per-step batch alone, the time-weighted one unshown)
            head = f" (means time-weighted over busy time {per_step})"
            if n > 1:
                which = f"the {n} decode replicas" if prefill else f"the {n} replicas"  # (prefill ones apart)
                head = (
                    f" (one replica's: means time-weighted over {which}' busy time {per_step}, peaks the "
                    "fullest one's)"
                )
        lines.append(f"== {title}{head} ==")
        # (a run in which no step ran, every request rejected at once, has no busy time to weigh its memory
        # by, no batch and no prompt admitted: the summary's means and rates are None, shown "-"; its peaks
        # and counts are 0, which is true)
        lines += [
            f"  {label:<36} {'off':>14}"
            if not prefix_caching and "prefix_hit_rate" in k
            else f"  {label:<36} {_num(values[k], unit):>14} {'' if unit in ('%', 'count') else unit}"
            for k, label, unit in shown
        ]
        if title == "cache" and pd:
            lines.append(_PD_CACHE_NOTE)
        elif title == "cache" and replicas[0] > 1:
            # (rev48b #4: under the memory group's "one replica's" heading they read as one replica's)
            lines.append(
                f"  (the fleet's: hit rates over every replica's prompts; blocks saved, evictions and copies "
                f"summed over the {replicas[0]} replicas)"
            )
        if title == "throughput":
            lines.append(f"== latency (ms{ticks or (f'; {times}' if times else '')}) ==")
            cols = ["mean", "median", "std", *[_pct_key(p) for p in pcts]]
            lines.append("  " + " " * 8 + "".join(f"{c:>12}" for c in cols))
            for m in metrics:
                row = [serving.get(f"{c}_{m}_ms") for c in cols]
                lines.append(f"  {m.upper():<8}" + "".join(f"{_num(v):>12}" for v in row))
            if "queueing_s_mean" in summary:
                lines += _queueing_row(summary, cols, bool(replicas[1]))
    return "\n".join(lines)


def _queueing_row(summary: dict[str, Any], cols: Sequence[str], pd: bool = False) -> list[str]:
    """The latency table's QUEUEING row, first scheduled − arrival in ms, from the summary's `queueing_s_*`
    (the figure `kvsim plan`'s `queueing_*` SLOs bound, which `vllm bench serve` does not report): its mean,
    median and the p50, p90 and p99 the summary keeps ("-" for another column), and a line saying so. In a
    disaggregated fleet (`pd`) the same figure runs to the first step on the decode replica, the prefill
    replica's queue and prefill and the transfer in it: the row is PRE-DECODE there (audit54 #18: it read
    QUEUEING above a split table whose prefill queueing was 0 at the median)."""
    keys = {"mean": "queueing_s_mean", "median": "queueing_s_p50", "p50": "queueing_s_p50"}
    keys |= {"p90": "queueing_s_p90", "p99": "queueing_s_p99"}
    row = [summary.get(keys[c]) if c in keys else None for c in cols]
    shown = [_num(None if v is None else 1000 * v) for v in row]
    cells = "".join(f"{c:>12}" for c in shown)
    keeps = "the summary keeps its mean, p50, p90 and p99: --json's summary queueing_s_*"
    if not pd:
        return [
            f"  {'QUEUEING':<8}{cells}",
            f"  (QUEUEING: first scheduled - arrival, what kvsim plan's queueing_* SLOs bound; {keeps})",
        ]
    label = "PRE-DECODE"
    # (the label takes 2 characters of the first cell's width and a space, its number still right-aligned
    # with the rows above: a number of 10 characters or more widens the row rather than losing digits)
    return [
        f"  {label} {shown[0]:>{12 - (len(label) - 8) - 1}}" + "".join(f"{c:>12}" for c in shown[1:]),
        "  (PRE-DECODE, a disaggregated fleet: first scheduled on the decode replica - arrival, so the prefill "
        "queueing, the prefill and the transfer+wait of the split below and the decode replica's own "
        f"queue: what kvsim plan's queueing_* SLOs bound on such a fleet; {keeps})",
    ]


def render_groups(config: Any, summary: dict[str, Any]) -> str:
    """A hybrid model's KV-cache groups (DESIGN.md §Hybrid attention): each group's kind and the entries
    its running requests' block tables held, time-weighted and at their peak; empty for one full-attention
    group. Entries, not blocks: a block that prefix caching shares counts once per request holding it
    (the engines count no distinct blocks a group), so a peak can pass the pool's blocks (gpt-oss-120b's
    full group 15,149 in a pool of 14,564; the heading once said "blocks held")."""
    groups = config.kv_groups
    if not groups:
        return ""
    lines = [
        "== KV-cache groups: block-table entries (a block shared by n requests counts n times) ==",
        f"  {'group':<28} {'mean':>14} {'peak':>14}",
    ]
    for g, spec in enumerate(groups):
        what = f"{g}: {spec.kind}" + (f" {spec.window}" if spec.window else "")
        mean, peak = summary[f"mean_group_blocks_{g}"], summary[f"peak_group_blocks_{g}"]
        lines.append(f"  {what:<28} {_num(mean):>14} {_num(peak):>14}")
    return "\n".join(lines)


def render_tier(config: Any, summary: dict[str, Any], ceiling: float | None = None) -> str:
    """The CPU tier (DESIGN.md §CPU tier): where the prompt tokens came from (GPU prefix cache, the tier,
    computed), what moved over the host link each way, store attempts that found no room and stores skipped,
    evictions, the time requests waited for their loads and the tier's occupancy; vLLM's metric names in
    brackets where vLLM has one; the hit rows count first admissions, as vLLM's counters do, the
    resumes' shares on a row of their own; with `ceiling` (a Mooncake trace's, `run_output.tier_ceiling`)
    the first admissions' hits beside it. Empty without a tier."""
    if not config.kv_offloading_chunks:
        return ""
    s = summary
    from kvsim.model.units import fmt_bytes

    def moved(name: str) -> str:
        done = {"load": "loaded", "store": "stored"}[name]
        b = s[f"{done}_bytes"]
        # (vLLM's bytes counter beside the bytes it counts: the row's first number is transfers, not bytes)
        return f"{s[f'{done}_blocks']:,} blocks" + (
            f", {fmt_bytes(b)} [kv_offload_{name}_bytes]" if b is not None else ""
        )

    # A fleet's summary holds its replicas' tiers: the mean over all of them, the peak the fullest one's.
    per = config.kv_offloading_chunks
    size = int(s.get("cpu_tier_chunks", per))
    held = f"{per:,} chunk{'s' if per != 1 else ''}"
    if size != per:
        held = f"{size // per:,} tiers × {held} (peak: the fullest tier's)"

    def share(key: str, of: str = "") -> str:
        # (a rate over no prompt admitted, or an occupancy over no busy time, is none: "-")
        return "-" if s[key] is None else f"{100 * s[key]:.1f} %{of}"

    # (vLLM 0.34.0's prefix_cache_* and external_prefix_cache_* counters leave a resumed request's lookup out,
    # PrefixCacheStats.record's preempted_* split: the tagged rows are first admissions', audit54 #6; until
    # 2026-12-07 they counted every admission under vLLM's names)
    first = " of first admissions' prompt tokens"
    reach = ""
    if ceiling is not None and s["hit_rate_first_admission"] is not None:
        # (audit54 #8: README set its example beside the whole trace's 37-38 %, its own 2,000 rows' being 29.4 %)
        reach = (
            f" of a reuse ceiling of {100 * ceiling:.1f} % (an infinite cache's over the requests admitted)"
        )
    resumed = " / ".join(share(k) for k in ("prefix_hit_rate", "cpu_hit_rate", "miss_rate"))
    rows = [
        ("GPU prefix hits [prefix_cache_hits]", share("prefix_hit_rate_first_admission", first)),
        ("CPU tier hits [external_prefix_cache_hits]", share("cpu_hit_rate_first_admission", first)),
        ("computed (misses)", share("miss_rate_first_admission", first)),
        ("hits, first admissions (GPU + CPU)", share("hit_rate_first_admission") + reach),
        ("all admissions, resumes included: GPU / CPU / computed", f"{resumed} of prompt tokens admitted"),
        ("loads (transfers: blocks, bytes)", f"{s['loads']:,} ({moved('load')})"),
        ("stores (transfers: blocks, bytes)", f"{s['stores']:,} ({moved('store')})"),
        (
            "store attempts, no room [kv_offload_allocation_failure]",
            f"{s['stores_failed']:,}" + (" (each offered again the next step)" if s["stores_failed"] else ""),
        ),
        ("stores skipped [kv_offload_stores_skipped]", f"{s['stores_skipped']:,}"),
        ("evicted chunks", f"{s['cpu_evictions']:,}"),
        (
            "waiting for loads, mean per load",
            "- (no loads)" if s["load_wait_s_mean"] is None else f"{1000 * s['load_wait_s_mean']:.3g} ms",
        ),
        (
            "tier occupancy, mean / peak",
            f"{share('cpu_tier_occupancy')} / {100 * s['cpu_tier_peak_occupancy']:.1f} % of {held}",
        ),
    ]
    lines = ["== CPU tier =="]
    width = max(len(label) for label, _ in rows)
    lines += [f"  {label:<{width}} {value}" for label, value in rows]
    return "\n".join(lines)
