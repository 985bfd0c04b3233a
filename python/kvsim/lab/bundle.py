"""What the page and the API get: a run's *bundle* (both tracks' rows and metric columns) and the
*snapshot* at one step (DESIGN.md §Lab). Both come from `state.replay` of the engine's event log; this
module turns token counts into bytes and fractions. A resolved query (`kvsim.lab.query`) is run, and a
run past the caps refused in plain words with a change that runs, by `kvsim.lab.bundle_run`
(`run_tracks`, re-exported here); the model's, the layout's and the CPU tier's constants are
`kvsim.lab.bundle_info`'s.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import kvsim.lab.presets as _presets
from kvsim.arguments import as_int
from kvsim.errors import InvalidArgumentError
from kvsim.lab.bundle_info import _layout_info, _model_info, tier_info, time_info
from kvsim.lab.bundle_run import run_tracks
from kvsim.lab.columns import COLUMN_DTYPES, column, decode, encode
from kvsim.lab.query import (
    BLOCK_SIZES,
    LIMITS,
    MAX_KV_CACHE_BYTES,
    OVERRIDES,
    PAGED_POLICIES,
    REQUIRES,
    Resolved,
    TooLarge,
    _check_choice,
    _contiguous_track,
    options,
    preset_kv_cache_bytes,
    resolve,
)
from kvsim.lab.state import (
    BLOCK_STATES,
    STATUSES,
    TIER_COLUMNS,
    Track,
    gc_paused,
    state_at,
    tokens_at,
)
from kvsim.model.config import CONTIGUOUS_POLICIES, SimConfig
from kvsim.reference.engine import EVENT_KINDS
from kvsim.workloads import Workload


def _pad(values: Any, n: int) -> np.ndarray:
    """A per-state column (a list or an array) as an array of n values, its last value repeated."""
    a = np.asarray(values)
    return np.concatenate((a, np.repeat(a[-1:], n - len(a)))) if len(a) < n else a


def _fraction(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b elementwise, NaN (the page's "—") where b is 0: a share of nothing is no share, where 0.0
    read as "nothing wasted" and its complement as "100 % used" of 0 B (integer columns: exact in float64
    below 2**53)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.divide(a, b, out=np.full_like(a, np.nan), where=b != 0)


def concurrency_multiplier(
    reserved: np.ndarray, contiguous_running: np.ndarray, allocated: np.ndarray, paged_running: np.ndarray
) -> np.ndarray:
    """Sequences the same memory holds paged, per sequence the contiguous side holds, at each state: each
    side's bytes per running sequence, contiguous ÷ paged, i.e. (reserved ÷ contiguous running) ÷
    (allocated ÷ paged running). NaN (the page's "—") where a side runs nothing or holds nothing: a
    ratio of 0 ÷ 0 says nothing. A full pool does not make it 1: the side that fits more sequences into
    it has the smaller footprint."""
    r, cr = reserved.astype(np.float64), contiguous_running.astype(np.float64)
    a, pr = allocated.astype(np.float64), paged_running.astype(np.float64)
    out = np.full(len(r), np.nan)
    ok = (r > 0) & (cr > 0) & (a > 0) & (pr > 0)
    np.divide(r * pr, a * cr, out=out, where=ok)
    return out


COUNT_COLUMNS = ("running", "waiting", "swapped", "finished", "rejected", "held")
BLOCK_COUNT_COLUMNS = ("free_blocks", "cached_blocks", "shared_blocks", "private_blocks")
CUMULATIVE_COLUMNS = ("cow_copies", "evictions", "preemptions", "swaps")


def metric_columns(
    paged: Track, contiguous: Track | None, bpt: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The snapshot's scalar keys per track, one value per state of that track (0..its steps), as
    arrays: the paged track's (`paged_*`, `prefix_saved_bytes`, its counts) and the contiguous track's
    (`contiguous_*`, its counts). The two tracks' clocks differ (a contiguous batch steps at its own pace),
    so step k of one is not step k of the other: what compares them is `moment_columns`, per shared
    instant. Without a contiguous track (a hybrid model) its dict is empty (the snapshot's None, the
    page's "—"), and the paged track adds its blocks per KV-cache group (`paged_group_blocks_<g>`)."""
    pm = {k: np.asarray(v).astype(np.int64) for k, v in paged.metrics.items()}
    bs = paged.config.engine_block_size
    # Whole columns at once (int64: bytes stay far below 2**53 within LIMITS).
    pa, ps = pm["allocated_tokens"], pm["stored_tokens"]
    s = len(pa)
    # Tail slack: at most B − 1 slots per sequence holding blocks (running, or held for a CPU tier's load:
    # its blocks allocated) in each table with token slots (one per attention group of a hybrid model; a
    # state block has none).
    tables = sum(g.kind != "mamba" for g in paged.groups) if paged.groups else 1
    c_out: dict[str, np.ndarray] = {}
    p_out: dict[str, np.ndarray] = {
        "paged_allocated_bytes": pa * bpt,
        "paged_stored_bytes": ps * bpt,
        "paged_tail_slack_bytes": (pa - ps) * bpt,
        "paged_tail_slack_fraction": _fraction(pa - ps, pa),
        "paged_tail_slack_bound_bytes": (pm["running"] + pm.get("held", 0)) * (tables * (bs - 1) * bpt),
        "paged_external_fragmentation": np.zeros(s),
        "prefix_saved_bytes": pm["shared_saved_tokens"] * bpt,
        "paged_reserved_bytes": pm["reserved_tokens"] * bpt,
    }
    for g in range(len(paged.groups)):
        p_out[f"paged_group_blocks_{g}"] = pm[f"group_blocks_{g}"]
    for name in TIER_COLUMNS:  # a CPU tier's (`state.tier_columns`)
        if name in pm:
            p_out[name] = pm[name]
    tracks: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = [(p_out, pm)]
    if contiguous is not None:
        cm = {k: np.asarray(v).astype(np.int64) for k, v in contiguous.metrics.items()}
        cap = contiguous.config.capacity_tokens
        ca, cs = cm["allocated_tokens"], cm["stored_tokens"]
        ce = cm["external_tokens"]
        c_out = {
            "contiguous_reserved_bytes": ca * bpt,
            "contiguous_used_bytes": cs * bpt,
            "contiguous_wasted_bytes": (ca - cs) * bpt,
            "contiguous_waste_fraction": _fraction(ca - cs, ca),
            "contiguous_internal_fragmentation": _fraction(ca - cs, ca),
            "contiguous_external_bytes": ce * bpt,
            "contiguous_external_fragmentation": _fraction(ce, np.full(len(ca), cap, np.int64)),
        }
        tracks.append((c_out, cm))
    for out, m in tracks:
        for name in COUNT_COLUMNS:
            out[f"num_{name}"] = m[name]
        for name in BLOCK_COUNT_COLUMNS:
            out[f"paged_{name}"] = m[name]
        for name in CUMULATIVE_COLUMNS:
            out[name] = m[name]
        out["time_s"] = m["time_ps"] / 1e12
    return p_out, c_out


def moment_columns(paged: Track, contiguous: Track | None) -> dict[str, np.ndarray]:
    """The shared instants the page steps through: every time at which either track's state changes (a
    state k holds from the time its step starts until the next one's), in order, with each track's state
    in force then (`paged_step`, `contiguous_step`: its last state at or before `time_s`; past its end,
    its last) and what compares them there (`concurrency_multiplier`: each side at that instant). Both
    tracks serve the same arrivals but a contiguous batch steps at its own pace, so their clocks part (on
    the mooncake preset from step 1,743: paged 9,503 steps, contiguous 9,752, one makespan): a figure of
    one beside the other's at the same step number compared two moments. Without a contiguous track the
    instants are the paged steps."""
    tp = np.asarray(paged.metrics["time_ps"], np.int64)
    if contiguous is None:
        return {"paged_step": np.arange(len(tp), dtype=np.int64), "time_s": tp / 1e12}
    tc = np.asarray(contiguous.metrics["time_ps"], np.int64)
    t = np.union1d(tp, tc)
    a = np.maximum(np.searchsorted(tp, t, "right") - 1, 0)
    b = np.maximum(np.searchsorted(tc, t, "right") - 1, 0)
    pm, cm = paged.metrics, contiguous.metrics
    # The paged side's sequences holding blocks: running, and those a CPU tier holds for their loads.
    held = np.asarray(pm["held"], np.int64)[a] if "held" in pm else 0
    multiplier = concurrency_multiplier(
        np.asarray(cm["allocated_tokens"], np.int64)[b],
        np.asarray(cm["running"], np.int64)[b],
        np.asarray(pm["allocated_tokens"], np.int64)[a],
        np.asarray(pm["running"], np.int64)[a] + held,
    )
    return {
        "paged_step": a.astype(np.int64),
        "contiguous_step": b.astype(np.int64),
        "time_s": t / 1e12,
        "concurrency_multiplier": multiplier,
    }


def moment_of(moments: dict[str, np.ndarray], step: int | None, contiguous_step: int | None) -> int:
    """The instant at which the paged track reaches state `step` (the first with that paged state: the
    contiguous track at its last state by then), or the contiguous one reaches `contiguous_step`, or,
    both given, the instant at which both are in force (InvalidArgumentError where there is none: two
    states of different moments)."""
    ps = moments["paged_step"]
    if contiguous_step is None:
        assert step is not None
        return int(np.searchsorted(ps, step, "left"))
    cs = moments["contiguous_step"]
    if step is None:
        return int(np.searchsorted(cs, contiguous_step, "left"))
    both = np.nonzero((ps == step) & (cs == contiguous_step))[0]
    if not len(both):
        lo, hi = np.searchsorted(ps, step, "left"), np.searchsorted(ps, step, "right")
        raise InvalidArgumentError(
            f"contiguous_step {contiguous_step} is not in force while the paged track is at step {step} "
            f"(its steps then: {int(cs[lo])} to {int(cs[hi - 1])}): the two tracks are compared at one "
            "instant"
        )
    return int(both[0])


SCALARS = (
    "concurrency_multiplier",
    "prefix_saved_bytes",
    "contiguous_reserved_bytes",
    "contiguous_used_bytes",
    "contiguous_wasted_bytes",
    "contiguous_waste_fraction",
    "contiguous_internal_fragmentation",
    "contiguous_external_bytes",
    "contiguous_external_fragmentation",
    "paged_allocated_bytes",
    "paged_stored_bytes",
    "paged_tail_slack_bytes",
    "paged_tail_slack_fraction",
    "paged_tail_slack_bound_bytes",
    "paged_external_fragmentation",
    "paged_reserved_bytes",
)


def _requests(p: _presets.Preset) -> list[dict[str, Any]]:
    w = p.workload
    offsets, seg_id, seg_len = w.seg_offsets.tolist(), w.segment_id.tolist(), w.segment_len.tolist()
    prompts, outputs, max_tokens = w.prompt_len.tolist(), w.output_len.tolist(), w.max_tokens.tolist()
    rids, samples, arrivals = w.request_id.tolist(), w.num_samples.tolist(), w.arrival.tolist()
    seg_names = p.segment_names
    out = []
    for i in range(len(w)):
        lo = offsets[i]
        first_name = seg_names.get(seg_id[lo]) if offsets[i + 1] > lo else None
        system = seg_len[lo] if first_name is not None else 0
        prompt = prompts[i]
        out.append(
            {
                "request_id": rids[i],
                "name": p.request_names[i] if p.request_names else f"req-{i + 1}",
                "label": p.labels[i] if p.labels else "",
                "system_prompt": first_name,
                "system_tokens": system,
                "user_tokens": prompt - system,
                "target_tokens": prompt + outputs[i],
                "max_tokens": max_tokens[i],
                "num_samples": samples[i],
                "arrival_s": arrivals[i],
            }
        )
    return out


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
        if field == "enable_prefix_caching":
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


def reject_reasons(t: Track) -> dict[int, str]:
    """Why the engine rejected each request it rejected (request id -> its `reject_reason`, as
    `kvsim.simulate`'s requests table words it: "needs more blocks than the pool holds", ...)."""
    req = t.result.requests
    if req is None:
        return {}
    rejected = req.filter(req["status"] == "rejected")
    return {
        int(rid): str(why)
        for rid, why in zip(
            rejected["request_id"].to_list(), rejected["reject_reason"].to_list(), strict=True
        )
    }


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


def sequence_name(request: str, num_samples: int, sample: int) -> str:
    """A sequence's name as the page writes it: the request's (`req-1`), with `·s<sample>` when the
    request has several samples (`req-1·s0`, `req-1·s1`)."""
    return f"{request}·s{sample}" if num_samples > 1 else request


def loading_hits(t: Track, seq: int, k: int) -> int:
    """Blocks a request held for a CPU-tier load at state k found on the GPU (its `prefix-hit` rows
    between its last `admit` and its `load`, among the first `event_upto[k]` events): the blocks after
    them are being filled by the load and take their keys when it lands."""
    ev = t.result.raw.events
    assert ev is not None
    n = int(t.metrics["event_upto"][min(k, len(t.metrics["event_upto"]) - 1)])
    kinds = ev["kind"][:n]
    mine = np.flatnonzero(ev["seq"][:n] == seq)
    codes = kinds[mine]
    loads = np.flatnonzero(codes == EVENT_KINDS.index("load"))
    if not len(loads):
        return 0
    last = loads[-1]
    admits = np.flatnonzero(codes[:last] == EVENT_KINDS.index("admit"))
    first = admits[-1] if len(admits) else 0
    return int((codes[first:last] == EVENT_KINDS.index("prefix-hit")).sum())


def filling_blocks(
    t: Track, k: int, seqs: dict[tuple[int, int], list[Any]], blocks: dict[int, list[Any]]
) -> set[int]:
    """The blocks a CPU-tier load in flight is filling at state k (`seqs` and `blocks`: `state_at(t, k)`):
    those of a request held `loading` past its GPU hits, which hold no KV yet and take their keys when the
    load lands (its `load-done` makes the request `loaded`). One full-attention group: its table past
    `loading_hits`; a hybrid model's block rows carry the keys its manager gave, so the load's blocks are
    the request's blocks with no key. The page's replay derives the same (`TrackReplay.filling`)."""
    out: set[int] = set()
    index: dict[tuple[int, int], int] | None = None
    for (rid, sample), row in seqs.items():
        if row[3] != "loading":
            continue
        if t.groups:
            out.update(b for table in row[9] for b in table if b and blocks[b][4] is None)
            continue
        if index is None:
            index = {
                (int(r), int(s_)): i
                for i, (r, s_) in enumerate(zip(t.inp.request_id, t.inp.sample, strict=True))
            }
        out.update(row[8][loading_hits(t, index[(rid, sample)], k) :])
    return out


def _swap_space(cfg: SimConfig, requests: list[dict[str, Any]]) -> dict[str, int] | None:
    """The CPU swap space of a run that may swap: its `capacity_blocks` and the `used_blocks` its swapped-out
    sequences hold (their `swapped_blocks`); None when the run never swaps."""
    if cfg.preemption not in ("swap", "auto") or not cfg.cpu_blocks:
        return None
    used = sum(r.get("swapped_blocks", 0) for r in requests)
    return {"capacity_blocks": int(cfg.cpu_blocks), "used_blocks": used}


def swapped_blocks(t: Track, k: int) -> dict[tuple[int, int], int]:
    """Per swapped-out sequence at state k, `(request id, sample)`, the blocks its latest swap-out moved to
    the CPU swap space: the frees of its sequence that follow the swap-out in the same step (the engine
    frees a swapped-out table's blocks right after it)."""
    raw = t.result.raw.events
    if raw is None:
        return {}
    kind = np.asarray(raw["kind"])
    seq = np.asarray(raw["seq"])
    step = np.asarray(raw["step"])
    n = int(t.metrics["event_upto"][min(k, len(t.metrics["event_upto"]) - 1)])
    swap_out, free = EVENT_KINDS.index("swap-out"), EVENT_KINDS.index("free")
    out: dict[tuple[int, int], int] = {}
    for i in np.flatnonzero(kind[:n] == swap_out).tolist():
        q = int(seq[i])
        blocks = 0
        j = i + 1
        while j < len(kind) and step[j] == step[i] and (seq[j] != q or kind[j] == free):
            blocks += int(seq[j] == q)
            j += 1
        out[(int(t.inp.request_id[q]), int(np.broadcast_to(t.inp.sample, (len(t.inp),))[q]))] = blocks
    return out


def track_snapshot(t: Track, k: int, bpt: int, p: _presets.Preset) -> dict[str, Any]:
    """Blocks and requests of one track at state k. A hybrid model's requests have `block_tables`, one
    per KV-cache group (block 0 where a window's tokens left; `block_table` is None), and its blocks their
    `group`; a block holds min(B, computed − i·B) tokens at position i of a group of block size B (a
    state block: the tokens its state covers, the computed ones for a request's running state, (i + 1)·B
    for a state at position i, cached or started from), a cached one B, and shows its key only while it
    has one."""
    k = max(0, min(k, t.num_steps))
    seqs, blocks, regions = state_at(t, k)
    groups = t.groups
    bs = t.config.engine_block_size
    reqs = {r["request_id"]: r for r in _requests(p)}
    held: dict[int, int] = {}  # block -> tokens it holds
    holders: dict[int, list[str]] = {}  # block -> the sequences whose tables hold it
    filling = filling_blocks(t, k, seqs, blocks)  # (no KV, and no key, until the load lands)
    why = reject_reasons(t)
    swapped = swapped_blocks(t, k) if t.paged else {}
    requests = []
    for (rid, sample), row in sorted(seqs.items()):
        c, g = tokens_at(row, k)
        r = reqs[rid]
        name = sequence_name(r["name"], r["num_samples"], sample)
        tables = row[9] if groups else [row[8]]
        sizes = [spec.block_size for spec in groups] if groups else [bs]
        for x, table in enumerate(tables):
            size = sizes[x]
            state = bool(groups) and groups[x].kind == "mamba"
            last = max((i for i, b in enumerate(table) if b), default=-1)
            for i, b in enumerate(table):
                if b == 0 and groups:
                    continue
                # (a state block before the running one, the last: a cached state it started from, the
                # state after its block's tokens)
                tokens = (c if i == last else (i + 1) * size) if state else min(size, max(0, c - i * size))
                held[b] = max(held.get(b, 0), tokens)
                holders.setdefault(b, []).append(name)
        region = regions.get((rid, sample))
        requests.append(
            {
                "request_id": rid,
                "sample": sample,
                "name": name,
                "label": r["label"],
                "status": row[3],
                "system_tokens": r["system_tokens"],
                "user_tokens": r["user_tokens"],
                "generated_tokens": g,
                "context_tokens": c,
                "target_tokens": r["target_tokens"],
                "block_table": None if groups else list(row[8]),
                # A swapped-out sequence's context is in the CPU swap space: its blocks there.
                **({"swapped_blocks": swapped.get((rid, sample), 0)} if row[3] == "swapped" else {}),
                # A rejected request: why the engine rejected it.
                **({"reject_reason": why.get(rid)} if row[3] == "rejected" else {}),
                **({"block_tables": [list(x) for x in row[9]]} if groups else {}),
                "region": None
                if region is None or region[2] is None
                else {"offset_tokens": region[2], "size_tokens": region[3]},
            }
        )
    out_blocks = []
    for b, row in sorted(blocks.items()):
        state = row[2]
        group = row[6] if groups else None
        size = groups[group].block_size if groups and group is not None and group >= 0 else bs
        tokens = held.get(b, 0) if state in ("private", "shared") else (size if state == "cached" else 0)
        if (
            state == "cached"
            and groups
            and group is not None
            and group >= 0
            and groups[group].kind == "mamba"
        ):
            tokens = (Track.key_index(row[4]) + 1) * size if row[4] else size  # (the state after its block)
        if groups:
            key = row[4]
        else:
            key = row[4] if state == "cached" or (state in ("private", "shared") and tokens == bs) else None
            if b in filling:
                key = None
        out_blocks.append(
            {
                "block_id": b,
                "state": state,
                "ref_cnt": row[3],
                "num_tokens": tokens,
                "prefix_key": key,
                "request_ids": row[5],
                "sequences": holders.get(b, []),
                "offset_bytes": b * bs * bpt,
                **({"group": group} if groups else {}),
                **({"loading": True} if b in filling else {}),
            }
        )
    return {"blocks": out_blocks, "requests": requests}


def _scalar(v: np.generic) -> int | float | None:
    """A column's value as JSON takes it: NaN (undefined, as the multiplier with nothing running) is None."""
    x = v.item()
    return None if isinstance(x, float) and np.isnan(x) else x


def snapshot_from(
    r: Resolved,
    paged: Track,
    contiguous: Track | None,
    step: int | None,
    contiguous_step: int | None = None,
) -> dict[str, Any]:
    """The snapshot at one instant: the paged track at state `step` and the contiguous one at
    `contiguous_step`, which must be in force at the same time (`moment_of`); either alone picks the first
    instant at which its track is there (the other at its last state by then), neither the step the page
    opens on."""
    info = _model_info(r.paged)
    bpt = info["bytes_per_token"]
    steps = paged.num_steps
    c_steps = contiguous.num_steps if contiguous is not None else None
    k = None if step is None else as_int(step)  # a numpy integer is an integer, a bool is not
    if step is not None and k is None:
        raise InvalidArgumentError(f"step {step!r} must be an integer")
    kc = None if contiguous_step is None else as_int(contiguous_step)
    if contiguous_step is not None and kc is None:
        raise InvalidArgumentError(f"contiguous_step {contiguous_step!r} must be an integer")
    if k is not None and not 0 <= k <= steps:
        more = (
            f"; the contiguous track's go to {c_steps}: contiguous_step={k} shows its step {k}"
            if c_steps is not None and steps < k <= c_steps
            else ""
        )
        raise InvalidArgumentError(f"step {k} must be between 0 and {steps} (the paged track's steps){more}")
    if kc is not None:
        if c_steps is None:
            raise InvalidArgumentError(
                f"contiguous_step {kc}: this run has no contiguous track (a hybrid model's)"
            )
        if not 0 <= kc <= c_steps:
            raise InvalidArgumentError(
                f"contiguous_step {kc} must be between 0 and {c_steps} (the contiguous track's steps)"
            )
    if k is None and kc is None:
        # None: the step the page opens on (a workload of your own has none: its end).
        k = steps if r.query.get("preset") == "custom" else min(r.preset.step, steps)
    pm, cm = metric_columns(paged, contiguous, bpt)
    moments = moment_columns(paged, contiguous)
    m = moment_of(moments, k, kc)
    k = int(moments["paged_step"][m])
    out: dict[str, Any] = {
        "step": k,
        "num_steps": steps,
        # The instant shown (each track's state is the last it reached by then) and each track's own.
        "time_s": float(moments["time_s"][m]),
        "paged_time_s": float(pm["time_s"][k]),
        "bytes_per_token": bpt,
        "block_size": r.paged.engine_block_size,
    }
    kc = None
    if contiguous is not None:
        kc = int(moments["contiguous_step"][m])
        out["contiguous_step"] = kc
        out["contiguous_num_steps"] = c_steps
        out["contiguous_time_s"] = float(cm["time_s"][kc])

    def scalar(name: str) -> int | float | None:
        if name == "concurrency_multiplier":
            return _scalar(moments[name][m]) if name in moments else None
        if name in pm:
            return _scalar(pm[name][k])
        return _scalar(cm[name][kc]) if name in cm and kc is not None else None

    out.update({name: scalar(name) for name in SCALARS})
    if paged.groups:
        out["groups"] = [
            {
                "kind": g.kind,
                "window": g.window,
                "block_size": g.block_size,
                "blocks": int(pm[f"paged_group_blocks_{i}"][k]),
            }
            for i, g in enumerate(paged.groups)
        ]
    tier = tier_info(r.paged, paged, r.query.get("kv_offloading_bytes"))
    if tier is not None:
        at = {name: int(pm[name][k]) for name in TIER_COLUMNS}
        tier.update(at)
        # The chunks as the page draws them: pinned by a load, ready (not pinned), pending, free.
        tier["ready_chunks"] = at["cpu_chunks"] - at["cpu_pending_chunks"] - at["cpu_loading_chunks"]
        tier["free_chunks"] = tier["chunks"] - at["cpu_chunks"]
    out["tier"] = tier
    out["num_held"] = int(pm["num_held"][k])
    out.update(track_snapshot(paged, k, bpt, r.preset))
    # The CPU swap space: its blocks (None: no swapping) and those the swapped-out sequences hold in it.
    out["swap_space"] = _swap_space(r.paged, out["requests"])
    out["contiguous"] = (
        None if contiguous is None or kc is None else track_snapshot(contiguous, kc, bpt, r.preset)
    )
    return out


def snapshot(
    workload: Workload | str,
    config: SimConfig | None = None,
    step: int | None = None,
    *,
    contiguous_step: int | None = None,
    backend: str = "rust",
    contiguous_policy: str | None = None,
    segment_names: dict[int, str] | None = None,
    request_names: list[str] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The state the page shows at `step` (None: the step the page opens on, a preset's; the end for a
    workload of your own) of `workload` under `config` (paged track; `contiguous_step` picks the contiguous
    track's state instead, or with `step` one of those in force at the same instant: `snapshot_from`)
    beside `contiguous_policy` (contiguous track, placed by `config.placement`; default: the preset's, or
    `orca-oracle` for a custom workload), in bytes and fractions
    (DESIGN.md §Lab). `segment_names` (content id -> name) and `request_names` make prefix keys readable.

    `workload` may also be a preset's name; then `overrides` apply as in `bundle` (`snapshot("copilot",
    step=1, block_size=32)`), and a `config`, `segment_names` or `request_names` is refused (the preset
    brings its own).

    Raises:
        InvalidArgumentError: a workload that is neither a `Workload` nor a preset's name, a bad override
            (or any override with a `Workload`; a config or names with a preset's name), config or step
            (the message names it), or a run past `LIMITS`.
    """
    if step is not None and as_int(step) is None:  # before the run, not after it
        raise InvalidArgumentError(f"step {step!r} must be an integer")
    if contiguous_step is not None and as_int(contiguous_step) is None:
        raise InvalidArgumentError(f"contiguous_step {contiguous_step!r} must be an integer")
    if isinstance(workload, str):
        given = [
            name
            for name, v in (
                ("config", config),
                ("segment_names", segment_names),
                ("request_names", request_names),
            )
            if v is not None
        ]
        if given:  # a preset brings its own: refused, not ignored
            raise InvalidArgumentError(
                f"{', '.join(given)}: a preset's name brings its own config and names; change them with "
                f"overrides (snapshot({workload!r}, block_size=32)) or pass a kvsim.Workload with its config"
            )
        chosen = {} if contiguous_policy is None else {"contiguous_policy": contiguous_policy}
        r = resolve(workload, **chosen, **overrides)
    else:
        if not isinstance(workload, Workload):
            raise InvalidArgumentError(
                f"workload {workload!r} is not a kvsim.Workload or a preset's name (one of "
                f"{', '.join(map(repr, _presets.names()))})"
            )
        contiguous_policy = contiguous_policy or "orca-oracle"
        if not isinstance(config, SimConfig):
            raise InvalidArgumentError(f"config {config!r} is not a kvsim.SimConfig")
        if overrides:  # they apply to a preset; a workload of your own takes its config as given
            raise InvalidArgumentError(
                f"{', '.join(overrides)}: overrides apply to a preset's name only; with a workload, set "
                "them on config (config.replace(...))"
            )
        p = _presets.Preset(
            name="custom",
            title="custom",
            description="",
            workload=workload,
            config=config,
            step=0,
            segment_names=dict(segment_names or {}),
            request_names=list(request_names or []),
            contiguous_policy=contiguous_policy,
        )
        r = _resolve_custom(p, config, contiguous_policy)
    paged, contiguous = run_tracks(r, backend)
    return snapshot_from(r, paged, contiguous, step, contiguous_step)


def _resolve_custom(p: _presets.Preset, config: SimConfig, contiguous_policy: str) -> Resolved:
    _check_choice("contiguous_policy", contiguous_policy, CONTIGUOUS_POLICIES)
    if config.is_contiguous:
        contiguous_policy = config.policy
        config = config.replace(policy="vllm")
    if config.model is None:
        raise InvalidArgumentError("config.model None: the lab reports bytes, so the config needs a model")
    contiguous = _contiguous_track(config, p.workload, contiguous_policy)
    return Resolved(p, config, contiguous, {"preset": "custom"})


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
