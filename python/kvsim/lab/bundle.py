"""What the page and the API get: a run's *bundle* (both tracks' rows and metric columns) and the
*snapshot* at one step (DESIGN.md §Lab). Both come from `state.replay` of the engine's event log, turned
from token counts into bytes and fractions. A resolved query (`kvsim.lab.query`) is run, and a run past
the caps refused in plain words with a change that runs, by `kvsim.lab.bundle_run` (`run_tracks`); the
metric columns and the instants both tracks are shown at are `kvsim.lab.metrics`'s, the snapshot
`kvsim.lab.snapshot`'s, the model's, the layout's and the CPU tier's constants `kvsim.lab.bundle_info`'s:
this module builds the bundle and re-exports the rest, the lab's one entry point.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from kvsim.lab.bundle_info import _layout_info, _model_info, tier_info, time_info
from kvsim.lab.bundle_run import run_tracks
from kvsim.lab.columns import COLUMN_DTYPES, column, decode, encode
from kvsim.lab.metrics import (
    _pad,
    concurrency_multiplier,
    metric_columns,
    moment_columns,
    moment_of,
)
from kvsim.lab.query import (
    BLOCK_SIZES,
    LIMITS,
    MAX_KV_CACHE_BYTES,
    OVERRIDES,
    PAGED_POLICIES,
    REQUIRES,
    Resolved,
    TooLarge,
    options,
    preset_kv_cache_bytes,
    resolve,
)
from kvsim.lab.snapshot import (
    _requests,
    filling_blocks,
    reject_reasons,
    sequence_name,
    snapshot,
    snapshot_from,
    track_snapshot,
)
from kvsim.lab.state import (
    BLOCK_STATES,
    STATUSES,
    Track,
    gc_paused,
)
from kvsim.model.config import SimConfig
from kvsim.reference.engine import EVENT_KINDS
from kvsim.workloads import Workload

BLOCK_COLUMNS = ("step", "block", "state", "ref", "key_label", "key_index", "holders_count", "holders")
# A hybrid model's block rows add the block's KV-cache group (-1 while free).
HYBRID_BLOCK_COLUMNS = (*BLOCK_COLUMNS, "group")
SEQ_COLUMNS = (
    "step",
    "seq",
    "status",
    "computed",
    "computed_rate",
    "generated",
    "generated_rate",
    "keep",
    "tail_count",
    "tail",
)


def _block_columns(t: Track) -> dict[str, np.ndarray]:
    b = t.blocks
    if b is None:
        return {name: np.zeros(0, np.int64) for name in BLOCK_COLUMNS}
    names = BLOCK_COLUMNS if b.group is None else HYBRID_BLOCK_COLUMNS
    cols = {name: getattr(b, name) for name in names if hasattr(b, name)}
    cols["holders_count"] = np.diff(b.holders_offsets)
    return {name: cols[name] for name in names}


def _seq_columns(t: Track) -> dict[str, np.ndarray]:
    s = t.seqs
    cols = {name: getattr(s, name) for name in SEQ_COLUMNS if hasattr(s, name)}
    cols["tail_count"] = np.diff(s.tail_offsets)
    return {name: cols[name] for name in SEQ_COLUMNS}


# The page's controls' labels, as the page words them (index.html), for the settings a run can differ in
# from its preset's.
CONTROL_LABELS = {
    "model": "Model",
    "block_size": "Block size (B)",
    "num_blocks": "KV cache memory",
    "enable_prefix_caching": "Prefix caching",
    "policy": "Paged policy",
    "sampling": "Sampling",
    "preemption": "Preemption",
    "contiguous_policy": "Contiguous baseline",
    "placement": "Placement",
    "kv_offloading_bytes": "CPU tier",
    "async_scheduling": "Async scheduling",
}


def preset_differences(r: Resolved) -> list[dict[str, Any]]:
    """The settings in which the run `r` differs from its preset's own (its description tells the preset's
    story, whose facts hold of those settings only): per setting its `field`, the page's `label`, and the
    preset's and the run's values in words. The pool compares its blocks (a memory that cuts the same
    blocks runs the same); a custom workload has no preset to differ from."""
    if r.preset.name == "custom":
        return []
    own = resolve(r.preset.name)

    def words(field: str, x: Resolved) -> str:
        q = x.query
        if field == "num_blocks":
            return f"{x.paged.num_blocks:,} blocks"
        if field in ("enable_prefix_caching", "async_scheduling"):
            return "on" if q[field] else "off"
        if field == "kv_offloading_bytes":
            chunks = x.paged.kv_offloading_chunks
            return f"{chunks:,} chunks" if chunks else "none"
        return str(q[field])

    out = []
    for field, label in CONTROL_LABELS.items():
        preset_value, run_value = words(field, own), words(field, r)
        if preset_value != run_value:
            out.append({"field": field, "label": label, "preset": preset_value, "run": run_value})
    return out


def _track_payload(t: Track, metrics: dict[str, np.ndarray]) -> dict[str, Any]:
    """One track as sent: the event log, block and sequence rows as columns (numpy arrays: `encode`
    writes them as JSON arrays), codes with their names (`event_kinds`, `block_states`, `statuses`,
    `key_labels`), per sequence its request id and sample (`seq_request_id`, `seq_sample`). An event's
    time is the time of the state its step count names (`metrics["time_s"][step]`) unless the track
    sends `event_time_s`."""
    raw = t.result.raw.events
    assert raw is not None
    events = {name: raw[name] for name in ("step", "kind", "seq", "block", "count")}
    step_ps = np.append(t.result.raw.timeseries["time_ps"], int(t.result.raw.counters["makespan_ps"]))
    times = raw["time_ps"]
    if len(times) and not np.array_equal(times, step_ps[np.minimum(raw["step"], len(step_ps) - 1)]):
        events["time_s"] = times / 1e12
    return {
        "policy": t.config.policy,
        "max_model_len": t.config.max_model_len,
        "num_steps": t.num_steps,
        "capacity_tokens": t.config.capacity_tokens,
        "event_upto": _pad(t.metrics["event_upto"], len(metrics["time_s"])),
        "summary": t.result.summary,
        "event_kinds": list(EVENT_KINDS),
        "block_states": list(BLOCK_STATES),
        "statuses": list(STATUSES),
        "key_labels": t.key_labels,
        "seq_request_id": t.inp.request_id.astype(np.int64),
        "seq_sample": np.broadcast_to(t.inp.sample, (len(t.inp),)).astype(np.int64),
        "num_events": len(raw["step"]),
        # Per rejected request (its id, as text: a JSON key), why the engine rejected it.
        "reject_reasons": {str(rid): why for rid, why in reject_reasons(t).items()},
        "events": events,
        "metrics": metrics,
        "blocks": _block_columns(t),
        "seqs": _seq_columns(t),
        # Tables per sequence row: a hybrid model's rows have one per KV-cache group (`keep` and
        # `tail_count` then run over (row, group)).
        "num_groups": t.seqs.num_groups,
        "regions": t.region_rows,
    }


def bundle(preset: str = "copilot", *, backend: str = "rust", **overrides: Any) -> dict[str, Any]:
    """The page's run payload for `preset` with `overrides` (LAB_CONTRACT's Bundle; DESIGN.md §Lab)."""
    t0 = time.perf_counter()
    r = resolve(preset, **overrides)
    with gc_paused():  # one pause over both replays and the payload (see `state.gc_paused`)
        paged, contiguous = run_tracks(r, backend)
        return bundle_from(r, paged, contiguous, t0)


def bundle_from(
    r: Resolved, paged: Track, contiguous: Track | None, t0: float | None = None
) -> dict[str, Any]:
    """The bundle of tracks already run (the server keeps recent ones)."""
    t0 = time.perf_counter() if t0 is None else t0
    with gc_paused():
        return _bundle_from(r, paged, contiguous, t0)


def _bundle_from(r: Resolved, paged: Track, contiguous: Track | None, t0: float) -> dict[str, Any]:
    info = _model_info(r.paged)
    bpt = info["bytes_per_token"]
    pm, cm = metric_columns(paged, contiguous, bpt)
    steps = paged.num_steps
    moments = moment_columns(paged, contiguous)
    p = r.preset
    bs = r.paged.engine_block_size
    return {
        "query": r.query,
        "preset": {
            "name": p.name,
            "title": p.title,
            "description": p.description,
            "default_step": min(p.step, steps),
            "max_tokens": p.max_tokens,
            # The settings this run changed from the preset's (its description is true of the preset's).
            "differs": preset_differences(r),
        },
        "model": info,
        # The engine's block size (a Mamba state may raise the one asked for: `query.block_size`).
        "block_size": bs,
        "bytes_per_token": bpt,
        "bytes_per_block": bpt * bs,
        "num_blocks": r.paged.num_blocks,
        # The pool's memory as asked for (blocks are cut from it; a remainder under a block is unused),
        # None when the query gave a block count.
        "kv_cache_bytes": r.query.get("kv_cache_bytes"),
        "capacity_tokens": r.paged.capacity_tokens,
        # A hybrid model's KV-cache groups and the pool's arithmetic (None: one full-attention group).
        "layout": _layout_info(r.paged, r.query.get("kv_cache_bytes")),
        # The CPU tier's constants (None: no tier); its state per step is in the paged metric columns.
        "tier": tier_info(r.paged, paged, r.query.get("kv_offloading_bytes")),
        # The CPU swap space's blocks (None: the run never swaps); what it holds at a step is the swapped-out
        # sequences' blocks, which the event log gives.
        "swap_space_blocks": int(r.paged.cpu_blocks)
        if r.paged.preemption in ("swap", "auto") and r.paged.cpu_blocks
        else None,
        # The clock the times are on (`"ticks"`: 1 ms a step, a counter of steps, not a GPU's time).
        "time_model": time_info(r.paged),
        # The prefix keys' labels (`paged.key_labels`) that name shared content, a named segment such as a
        # system prompt, as ids [lo, hi): the others name a request's or a sample's own tokens.
        "shared_key_labels": [len(p.workload), len(p.workload) + len(p.segment_names)],
        # The paged track's steps (the contiguous track's are `contiguous.num_steps`); the page steps
        # through the shared instants, `moments` (`moment_columns`).
        "num_steps": steps,
        "default_step": min(p.step, steps),
        "moments": moments,
        "num_moments": len(moments["time_s"]),
        "requests": _requests(p),
        "paged": _track_payload(paged, pm),
        "contiguous": None if contiguous is None else _track_payload(contiguous, cm),
        "limits": LIMITS,
        "elapsed_s": time.perf_counter() - t0,
    }


def configure(preset: str = "copilot", **overrides: Any) -> tuple[Workload, SimConfig, int]:
    """The `(workload, paged config, step)` the server runs for `preset` with `overrides` (the query's
    names); its contiguous track is `snapshot(..., contiguous_policy=resolved query's contiguous_policy)`."""
    r = resolve(preset, **overrides)
    return r.preset.workload, r.paged, r.preset.step


__all__ = [
    "BLOCK_SIZES",
    "COLUMN_DTYPES",
    "LIMITS",
    "MAX_KV_CACHE_BYTES",
    "OVERRIDES",
    "PAGED_POLICIES",
    "REQUIRES",
    "Resolved",
    "TooLarge",
    "bundle",
    "bundle_from",
    "column",
    "concurrency_multiplier",
    "configure",
    "decode",
    "encode",
    "filling_blocks",
    "metric_columns",
    "moment_columns",
    "moment_of",
    "options",
    "preset_kv_cache_bytes",
    "resolve",
    "run_tracks",
    "sequence_name",
    "snapshot",
    "snapshot_from",
    "track_snapshot",
]
