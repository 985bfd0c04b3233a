"""The state at step k: the one place that replays an engine run's event log (DESIGN.md §Lab).

A run is simulated once with `record_events=True` and a time series of every step; `replay` turns its
event log into *rows* that change only when something happens: a block's row (state, reference count,
key, holders) at each state where an event touches it, a sequence's row (status, tokens and their rates,
block table) at each state where an event touches it or its token rates change, a contiguous region's
row when it is placed or freed, and one column per metric (a value per state). Between rows a decoding
sequence gains one computed and one generated token per step, so `state_at(k)` (the page does the same in
JavaScript) is a lookup, not a re-run. State k is the memory after k steps: step k-1's scheduling and
sampling done, its finishes and forks done, step k not started.

Two passes: the sequences' (`_SeqPass`, Python, `kvsim.lab.state_seqs`, with the log's event codes and
`STATUSES`) walks the events that are not about blocks (admit, schedule, prefix-hit, preempt, swap,
finish, fork, reject: a few per request) step by step; the blocks' (`kvsim.lab.state_blocks`, numpy on
whole columns) takes the block events (allocate, free, evict, copy-on-write, and the blocks a prefix hit,
fork or swap-in takes), the bulk of a log. Rows are kept as
columns (`BlockRows`, `SeqRows`); `Track.block_rows` and `Track.seq_rows` are their list views.

Nothing here decides anything the engine decides: block ids, placements, hits, copies, preemptions and
evictions are read from the log, and the replay checks itself against the engine's time series (tests).
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

from kvsim.engine.engine_input import EngineInput, prepare
from kvsim.engine.simulate import SimResult, simulate
from kvsim.errors import InternalError, InvalidArgumentError
from kvsim.lab.state_blocks import (
    BLOCK_STATES,
    BlockRows,
    SeqRows,
    _BlockPass,
    _group_starts,
    _order,
    _seq_rows,
    sample_labels,
)
from kvsim.lab.state_hybrid import replay_hybrid
from kvsim.lab.state_hybrid_rows import block_rows as hybrid_block_rows
from kvsim.lab.state_hybrid_rows import internal_tokens
from kvsim.lab.state_hybrid_rows import seq_rows as hybrid_seq_rows
from kvsim.lab.state_seqs import (
    ADMIT,
    COW_COPY,
    CPU_EVICT,
    CPU_HIT,
    EVICT,
    FINISH,
    FORK,
    FREE,
    LOAD,
    LOAD_DONE,
    PREEMPT,
    REJECT,
    STATUSES,
    STORE,
    STORE_DONE,
    SWAP_OUT,
    WINDOW,
    _SeqPass,
)
from kvsim.model.config import SimConfig

# Events that happen after their step's sampling (their `step` is the count after it): they belong to the
# state they carry. Scheduling events of step j belong to state j + 1.
POST_STEP = {FINISH, FORK, REJECT, STORE_DONE, LOAD_DONE}

# Token counts per state (the page's cards read them, times bytes per token) and sequence counts.
METRIC_COLUMNS = (
    "allocated_tokens",
    "stored_tokens",
    "shared_saved_tokens",
    "reserved_tokens",
    "external_tokens",
    "running",
    "waiting",
    "swapped",
    "finished",
    "rejected",
    "free_blocks",
    "cached_blocks",
    "shared_blocks",
    "private_blocks",
    "cow_copies",
    "evictions",
    "preemptions",
    "swaps",
    "held",
    "event_upto",
    "time_ps",
)
# Columns counting events of some kinds so far (computed from the log at the end) and the columns the
# replay keeps as it goes.
CUMULATIVE_KINDS = {
    "cow_copies": [COW_COPY],
    "evictions": [EVICT],
    "preemptions": [PREEMPT, SWAP_OUT],
    "swaps": [SWAP_OUT],
}
KEPT_COLUMNS = tuple(c for c in METRIC_COLUMNS if c not in CUMULATIVE_KINDS)
# The CPU tier's columns, one value per state (`tier_columns`): chunks held (pending included), chunks
# whose store is in flight, chunks pinned by loads in flight, and cumulative counts from the log.
TIER_COLUMNS = (
    "cpu_chunks",
    "cpu_pending_chunks",
    "cpu_loading_chunks",
    "cpu_hit_tokens",
    "cpu_loads",
    "cpu_loaded_chunks",
    "cpu_stores",
    "cpu_stored_chunks",
    "cpu_evictions",
)


@dataclass
class Track:
    """One replayed run: rows (see the module docstring) as columns, metric columns (one value per state
    0..S) and the run itself."""

    config: SimConfig
    result: SimResult
    inp: EngineInput
    num_steps: int
    blocks: BlockRows | None
    seqs: SeqRows
    region_rows: list[list[Any]]
    metrics: dict[str, list[int]]
    # Per step j (0..S-1): tokens allocated and stored after step j's allocation, before its finishes:
    # what the engine's time series records, for the tests to compare with.
    during: dict[str, list[int]]
    # Readable prefix keys are `f"{key_labels[label]}:block-{index}"`.
    key_labels: list[str]

    @property
    def paged(self) -> bool:
        return not self.config.is_contiguous

    @property
    def groups(self) -> tuple[Any, ...]:
        """A hybrid model's KV-cache groups (`SimConfig.kv_groups`); empty for one table per sequence."""
        return self.config.kv_groups if self.paged else ()

    def key(self, label: int, index: int) -> str | None:
        return None if label < 0 else f"{self.key_labels[label]}:block-{index}"

    @staticmethod
    def key_index(key: str) -> int:
        """The block position `index` of a key `key` made (`...:block-{index}`)."""
        return int(key.rsplit(":block-", 1)[1])

    @functools.cached_property
    def block_rows(self) -> list[list[Any]]:
        """The block rows as lists `[step, block, state, ref_cnt, prefix_key, request_ids]`, and for a
        hybrid model the block's KV-cache group (-1 while free) after them."""
        b = self.blocks
        if b is None:
            return []
        off = b.holders_offsets.tolist()
        holders = b.holders.tolist()
        labels, index = b.key_label.tolist(), b.key_index.tolist()
        out = [
            [k, blk, BLOCK_STATES[s], r, self.key(labels[i], index[i]), holders[off[i] : off[i + 1]]]
            for i, (k, blk, s, r) in enumerate(
                zip(b.step.tolist(), b.block.tolist(), b.state.tolist(), b.ref.tolist(), strict=True)
            )
        ]
        if b.group is not None:
            for row, g in zip(out, b.group.tolist(), strict=True):
                row.append(g)
        return out

    @functools.cached_property
    def seq_rows(self) -> list[list[Any]]:
        """The sequence rows as lists `[step, request, sample, status, computed, rate, generated, rate,
        block table]` with whole tables; a hybrid model's rows add `tables`, one per KV-cache group (block
        0 where a window's tokens left), and their `block table` is the blocks those hold, group by group."""
        s = self.seqs
        off, tail = s.tail_offsets.tolist(), s.tail.tolist()
        ng = s.num_groups
        keeps = s.keep.tolist()
        last: dict[int, list[list[int]]] = {}
        out = []
        cols = (s.step, s.seq, s.request_id, s.sample, s.status, s.computed, s.computed_rate)
        more = (s.generated, s.generated_rate)
        for i, (k, q, rid, sample, status, c, rc, g, rg) in enumerate(
            zip(*(a.tolist() for a in (*cols, *more)), strict=True)
        ):
            before = last.get(q) or [[] for _ in range(ng)]
            tables = [
                before[x][: keeps[i * ng + x]] + tail[off[i * ng + x] : off[i * ng + x + 1]]
                for x in range(ng)
            ]
            last[q] = tables
            if self.groups:
                held = [b for t in tables for b in t if b != 0]
                out.append([k, rid, sample, STATUSES[status], c, rc, g, rg, held, tables])
            else:
                out.append([k, rid, sample, STATUSES[status], c, rc, g, rg, tables[0]])
        return out


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector: a replay allocates many small objects and no cycles, and the
    collector's passes over them cost more than the replay itself. Re-enabled on exit if it was on at
    entry (the first of concurrent callers re-enables it)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def run_track(
    workload: Any,
    config: SimConfig,
    *,
    backend: str = "rust",
    names: dict[int, str] | None = None,
    request_names: list[str] | None = None,
) -> Track:
    """Simulates `workload` under `config` with the event log and a time series, and replays it (a
    configuration the replay cannot follow refused first: `check_replayable`)."""
    check_replayable(config)
    res = simulate(workload, config, backend=backend, record_events=True, record_timeseries=True)
    return replay(res, workload, config, names=names, request_names=request_names)


def check_replayable(config: SimConfig) -> None:
    """Refuses, by name, what the replay cannot follow, before a run: asynchronous scheduling beside a
    hybrid model's KV-cache groups or a CPU tier. The replay follows it on one full-attention group
    (DESIGN.md §Lab): a finished request's blocks are freed after the next step's schedule, and the log's
    `free` rows after that step's scheduling rows say so (the state after it); the finisher's `schedule` row
    of count 0 (passed over) counts no token. A hybrid model's windows free a step later and key what has
    arrived, and a tier defers a finisher's frees to its stores: rules the replay's passes do not follow.

    Raises:
        InvalidArgumentError: naming the knob.
    """
    if config.async_scheduling and (config.kv_groups or config.kv_offloading_chunks):
        what = "a hybrid model's KV-cache groups" if config.kv_groups else "a CPU tier"
        raise InvalidArgumentError(
            f"async_scheduling True: the lab's replay follows asynchronous scheduling on a model of one "
            f"full-attention group without a CPU tier, not beside {what}; run it with kvsim.simulate"
        )


def replay(
    res: SimResult,
    workload: Any,
    config: SimConfig,
    *,
    names: dict[int, str] | None = None,
    request_names: list[str] | None = None,
) -> Track:
    """Replays `res` (simulated with `record_events` and a time series of every step) into rows and
    metric columns (see the module docstring)."""
    with gc_paused():
        return _replay(res, workload, config, names, request_names)


def _pad_to(a: np.ndarray, n: int) -> np.ndarray:
    """A cumulative column of at most n states as n, its last value repeated."""
    return np.concatenate((a, np.repeat(a[-1:], n - len(a))))[:n]


def _i64(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _event_states(
    step: np.ndarray,
    kind: np.ndarray,
    seq: np.ndarray,
    num_steps: int,
    before_step: np.ndarray | None = None,
    empty_iterations: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per event: the state it belongs to, whether it follows its step's sampling (a finish and the frees
    after it, a fork, a reject: the leading run of such events among those carrying one step count; with
    a CPU tier, every event up to a count's last observation and every one `before_step` marks: it
    happened before its step count's step started; under asynchronous scheduling, `empty_iterations`, an
    iteration that preempted and scheduled nothing: `_empty_iterations`), and
    the index of its sequence's latest release (finish, preempt, swap-out) at or before it (-1: none)."""
    n = len(kind)
    if n and bool((step[1:] < step[:-1]).any()):
        raise InternalError("event log not in step order")
    order = _order(seq)
    s_sorted = seq[order]
    released = np.isin(kind, (FINISH, PREEMPT, SWAP_OUT))[order]
    last = np.maximum.accumulate(np.where(released, np.arange(n), -1)) if n else np.zeros(0, np.int64)
    safe = np.maximum(last, 0)
    last_rel = np.empty(n, np.int64)
    last_rel[order] = np.where((last >= 0) & (s_sorted[safe] == s_sorted), order[safe], -1)
    # (a hybrid model's tier frees the blocks a finishing request's windows left behind, `window` rows,
    # before its other blocks)
    after_finish = np.isin(kind, (FREE, WINDOW)) & (last_rel >= 0) & (kind[np.maximum(last_rel, 0)] == FINISH)
    starts = _group_starts(step)  # the log is in step order: each step count's first event
    if empty_iterations:
        # Asynchronous scheduling frees a finisher after the next step's schedule (the state after it),
        # unless that schedule was empty: then the engine frees it and schedules again before the step
        # starts, and an admission of that step count follows its frees.
        admits = np.where(kind == ADMIT, np.arange(n), -1)
        last_admit = np.maximum.reduceat(admits, starts) if n else admits
        after_finish &= np.arange(n) < np.repeat(last_admit, np.diff(np.append(starts, n)))
    pred = np.isin(kind, tuple(POST_STEP)) | after_finish
    others = np.cumsum(~pred)
    first = np.repeat(starts, np.diff(np.append(starts, n)))
    before = np.where(first > 0, others[np.maximum(first - 1, 0)], 0)
    post = pred & (others - before == 0)
    # With a CPU tier, an observation (a transfer seen complete) ends whatever carries its step count before
    # it: a step that scheduled nothing (it admits loads, offers stores and observes without counting) or a
    # stall. Everything up to a count's last observation happened before that step started.
    done = np.flatnonzero(np.isin(kind, (STORE_DONE, LOAD_DONE)))
    if len(done):
        last_done = np.full(n, -1, np.int64)
        last_done[done] = done
        group_last = np.maximum.reduceat(last_done, starts)
        post |= np.arange(n) <= np.repeat(group_last, np.diff(np.append(starts, n)))
    if before_step is not None:
        post |= before_step
    if empty_iterations:
        post |= _empty_iterations(kind, starts)
    st = np.minimum(np.where(post, step, step + 1), num_steps)
    return st, post, last_rel


def _empty_iterations(kind: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The events of iterations that preempted and scheduled nothing, counted as no step, before a later
    iteration's admission carrying the same step count: they happened before that step started (its
    state's). An iteration that preempts admits nothing (vLLM's waiting phase runs only if the running phase
    preempted nothing), so an `admit` after a `preempt` of one step count is a later iteration's; and one
    that preempted but scheduled some running request counted a step. Under asynchronous scheduling a
    finisher given its discarded token preempts itself so (DESIGN.md §Engine, "Asynchronous scheduling")."""
    n = len(kind)
    out = np.zeros(n, bool)
    ends = np.append(starts[1:], n)
    for p in np.flatnonzero(kind == PREEMPT).tolist():
        g = int(np.searchsorted(starts, p, "right")) - 1
        lo, hi = int(starts[g]), int(ends[g])
        admits = np.flatnonzero(kind[p:hi] == ADMIT)
        if len(admits):
            out[lo : p + int(admits[0])] = True
    return out


def _replay(
    res: SimResult,
    workload: Any,
    config: SimConfig,
    names: dict[int, str] | None,
    request_names: list[str] | None,
) -> Track:
    if res.raw.events is None or not res.raw.events or res.timeseries is None:
        raise InternalError("replay needs a run simulated with record_events=True and record_timeseries=True")
    check_replayable(config)
    inp = prepare(workload, config)
    bs = config.block_size
    paged = not config.is_contiguous
    n_req = len(workload)
    request_names = request_names or [f"req-{i + 1}" for i in range(n_req)]
    ev = res.raw.events
    step, kind, seq = _i64(ev["step"]), _i64(ev["kind"]), _i64(ev["seq"])
    block, count = _i64(ev["block"]), _i64(ev["count"])
    num_steps = int(res.summary["num_steps"])
    # Per state k: the time step k starts (the run's end after the last).
    step_ps = np.append(_i64(res.raw.timeseries["time_ps"]), int(res.raw.counters["makespan_ps"]))
    before_step = None
    if config.kv_offloading_chunks:
        # A CPU tier: what a step that scheduled nothing did (loads admitted, the finished requests' last
        # stores) carries the count of the next step but happened before it started.
        before_step = _i64(ev["time_ps"]) < step_ps[np.minimum(step, len(step_ps) - 1)]
    st, post, last_rel = _event_states(step, kind, seq, num_steps, before_step, bool(config.async_scheduling))
    hr = None
    if paged and config.kv_groups:
        # A hybrid model: the manager's pass first, for the tokens each admission's prefix hit covered.
        batch = res.raw.timeseries["batch"].tolist() if config.kv_offloading_chunks else None
        hr = replay_hybrid(inp, config, step, kind, seq, block, count, post, num_steps, batch)
    sp = _SeqPass(
        res,
        inp,
        config,
        step,
        kind,
        seq,
        block,
        count,
        post,
        num_steps,
        hr.hits if hr else None,
        hr.load_ends if hr else None,
    )
    upto = np.searchsorted(st, np.arange(num_steps + 1), "right")  # events in states 0..k
    during_at = np.searchsorted(step, np.arange(1, num_steps + 1), "left")  # events through step j
    labels = [*request_names, *(names or {}).values(), *sample_labels(inp, request_names)[1]]
    s_total = num_steps + 1
    zeros = np.zeros(s_total, np.int64)
    if paged and config.kv_groups:
        assert hr is not None
        return _replay_hybrid(
            res,
            inp,
            config,
            kind,
            count,
            step,
            post,
            upto,
            num_steps,
            sp,
            hr,
            names or {},
            request_names,
            labels,
        )
    if paged:
        bp = _BlockPass(inp, config, kind, seq, block, count, st, last_rel, sp, upto, during_at)
        bp.run(names or {}, request_names)
        held, dup, bcount = bp.held_at(upto), bp.dup_at(upto), bp.bcount
        held_d, dup_d = bp.held_at(during_at), bp.dup_at(during_at)
        blocks: BlockRows | None = bp.rows
    else:
        held, dup, bcount = zeros, zeros, np.zeros((s_total, len(BLOCK_STATES)), np.int64)
        held_d = dup_d = np.zeros(num_steps, np.int64)
        blocks = None
    states = np.array(sp.states, np.int64).reshape(-1, len(_SeqPass.STATE_COLUMNS))
    # Per state k: the arrivals by the time step k starts.
    arrivals = np.sort(inp.arrival_ps[inp.fork_parent < 0]).astype(np.int64)
    at_k = step_ps[np.minimum(np.arange(s_total), len(step_ps) - 1)]
    arrived = np.where(
        np.arange(s_total) < len(step_ps) - 1, np.searchsorted(arrivals, at_k, "right"), len(arrivals)
    )
    col = dict(zip(_SeqPass.STATE_COLUMNS, states.T, strict=True))
    logical, reserved = col["logical"], col["reserved"]
    state_of = {name: i for i, name in enumerate(BLOCK_STATES)}
    metrics: dict[str, Any] = {
        "allocated_tokens": held * bs if paged else reserved,
        "stored_tokens": logical - dup if paged else logical,
        "shared_saved_tokens": dup,
        "reserved_tokens": reserved,
        "external_tokens": col["external"],
        **{name: col[name] for name in ("running", "swapped", "finished", "rejected", "held")},
        "waiting": col["waiting"] + arrived,
        **{f"{name}_blocks": bcount[:, state_of[name]] for name in ("free", "cached", "shared", "private")},
        "event_upto": upto,
        "time_ps": step_ps[np.minimum(np.arange(s_total), len(step_ps) - 1)],
    }
    # The cumulative counts at state k: the events of their kinds among the first event_upto[k].
    for name, counted in CUMULATIVE_KINDS.items():
        metrics[name] = np.r_[0, np.cumsum(np.isin(kind, counted))][upto]
    metrics = {name: np.asarray(metrics[name]).tolist() for name in METRIC_COLUMNS}
    if config.kv_offloading_chunks:
        tier = tier_columns(kind, count, np.minimum(np.where(post, step, step + 1), num_steps))
        metrics.update({k: _pad_to(v, s_total).tolist() for k, v in tier.items()})
    dl = np.array(sp.during_logical, np.int64)
    during = {
        "allocated_tokens": (held_d * bs if paged else np.array(sp.during_reserved, np.int64)).tolist(),
        "stored_tokens": (dl - dup_d if paged else dl).tolist(),
        "external_tokens": sp.during_external,
    }
    seqs = _seq_rows(inp, sp, seq, st, num_steps, bp if paged else None)
    region_rows = sorted(sp.region_rows, key=itemgetter(0))
    return Track(config, res, inp, num_steps, blocks, seqs, region_rows, metrics, during, labels)


def _replay_hybrid(
    res: SimResult,
    inp: EngineInput,
    config: SimConfig,
    kind: np.ndarray,
    count: np.ndarray,
    step: np.ndarray,
    post: np.ndarray,
    upto: np.ndarray,
    num_steps: int,
    sp: _SeqPass,
    hr: Any,
    names: dict[int, str],
    request_names: list[str],
    labels: list[str],
) -> Track:
    """A hybrid model's track: blocks and tables from the manager's pass (`state_hybrid`, made columns by
    `state_hybrid_rows`), tokens and sequence counts from the sequences' pass. Token measures are the
    engine's: a block is the engine's block size of token slots, less the slots left empty in each
    attention group's partly filled last block (a state block counts as full). A layout of unequal attention pages is refused (`check_layout`):
    its wider blocks hold more slots than the page draws. A CPU tier's columns are the classic track's
    (`tier_columns`); its held requests hold their blocks (counted allocated, none of their slots empty:
    the engine measures the running sequences' partly filled blocks only)."""
    from kvsim.lab.query import check_layout

    check_layout(config)
    bs = config.engine_block_size
    groups = config.kv_groups
    s_total = num_steps + 1
    blocks = hybrid_block_rows(hr, inp, config, names, request_names)
    seqs = hybrid_seq_rows(hr, inp, sp, num_steps, len(groups))
    attention = [g.block_size for g in groups if g.kind != "mamba"]
    running, finished = STATUSES.index("running"), STATUSES.index("finished")
    internal, internal_d = internal_tokens(
        seqs.step,
        seqs.seq,
        seqs.status,
        seqs.computed,
        seqs.computed_rate,
        running,
        finished,
        attention,
        num_steps,
    )
    states = np.array(sp.states, np.int64).reshape(-1, len(_SeqPass.STATE_COLUMNS))
    col = dict(zip(_SeqPass.STATE_COLUMNS, states.T, strict=True))
    step_ps = np.append(_i64(res.raw.timeseries["time_ps"]), int(res.raw.counters["makespan_ps"]))
    arrivals = np.sort(inp.arrival_ps[inp.fork_parent < 0]).astype(np.int64)
    at_k = step_ps[np.minimum(np.arange(s_total), len(step_ps) - 1)]
    arrived = np.where(
        np.arange(s_total) < len(step_ps) - 1, np.searchsorted(arrivals, at_k, "right"), len(arrivals)
    )
    allocated = hr.held * bs
    bc = hr.block_counts
    state_of = {name: i for i, name in enumerate(BLOCK_STATES)}
    metrics: dict[str, Any] = {
        "allocated_tokens": allocated,
        "stored_tokens": allocated - internal,
        "shared_saved_tokens": hr.shared_saved,
        "reserved_tokens": np.zeros(s_total, np.int64),
        "external_tokens": np.zeros(s_total, np.int64),
        **{name: col[name] for name in ("running", "swapped", "finished", "rejected", "held")},
        "waiting": col["waiting"] + arrived,
        **{f"{name}_blocks": bc[:, state_of[name]] for name in ("free", "cached", "shared", "private")},
        "event_upto": upto,
        "time_ps": at_k,
    }
    for name, counted in CUMULATIVE_KINDS.items():
        metrics[name] = np.r_[0, np.cumsum(np.isin(kind, counted))][upto]
    metrics = {name: np.asarray(metrics[name]).tolist() for name in METRIC_COLUMNS}
    if config.kv_offloading_chunks:
        tier = tier_columns(kind, count, np.minimum(np.where(post, step, step + 1), num_steps))
        metrics.update({k: _pad_to(v, s_total).tolist() for k, v in tier.items()})
    for g in range(len(groups)):
        metrics[f"group_blocks_{g}"] = hr.group_blocks[:, g].tolist()
    held_d = hr.held_during * bs
    during = {
        "allocated_tokens": held_d.tolist(),
        "stored_tokens": (held_d - internal_d).tolist(),
        "external_tokens": [0] * num_steps,
    }
    return Track(config, res, inp, num_steps, blocks, seqs, [], metrics, during, labels)


def tier_columns(kind: np.ndarray, count: np.ndarray, states: np.ndarray) -> dict[str, np.ndarray]:
    """The CPU tier at each state k (`states`: each event's, as `_event_states` gives them, with the
    events a step that scheduled nothing did before step k in state k; DESIGN.md §CPU tier): a
    `store` adds `count` pending chunks (after a `cpu-evict` row per chunk it evicted first), its
    `store-done` makes them ready, a `load` pins `count` chunks until its `load-done`; a `cpu-hit`
    counts the tokens a load spares computing. Chunks held = stored − evicted (pending included, as the
    engine's occupancy counts them)."""
    s_total = int(states.max(initial=0)) + 1 if len(states) else 1

    def total(code: int, weighted: bool = True) -> np.ndarray:
        pick = kind == code
        w = count[pick] if weighted else np.ones(int(pick.sum()), np.int64)
        return np.cumsum(np.bincount(states[pick], weights=w, minlength=s_total)).astype(np.int64)

    stored, done = total(STORE), total(STORE_DONE)
    loaded, landed = total(LOAD), total(LOAD_DONE)
    evicted = total(CPU_EVICT, False)
    return {
        "cpu_chunks": stored - evicted,
        "cpu_pending_chunks": stored - done,
        "cpu_loading_chunks": loaded - landed,
        "cpu_hit_tokens": total(CPU_HIT),
        "cpu_loads": total(LOAD, False),
        "cpu_loaded_chunks": loaded,
        "cpu_stores": total(STORE, False),
        "cpu_stored_chunks": stored,
        "cpu_evictions": evicted,
    }


def state_at(
    track: Track, k: int
) -> tuple[dict[tuple[int, int], list[Any]], dict[int, list[Any]], dict[tuple[int, int], list[Any]]]:
    """The rows that hold at state k: per sequence `(request_id, sample)`, per block, per region."""
    k = min(k, track.num_steps)
    seqs: dict[tuple[int, int], list[Any]] = {}
    for r in track.seq_rows:
        if r[0] > k:
            break
        seqs[(r[1], r[2])] = r
    blocks: dict[int, list[Any]] = {}
    for r in track.block_rows:
        if r[0] > k:
            break
        blocks[r[1]] = r
    regions: dict[tuple[int, int], list[Any]] = {}
    for r in track.region_rows:
        if r[0] > k:
            break
        regions[(r[1], r[4])] = r
    return seqs, blocks, regions


def tokens_at(row: list[Any], k: int) -> tuple[int, int]:
    """Computed and generated tokens of a sequence row at state k."""
    d = k - row[0]
    return row[4] + row[5] * d, row[6] + row[7] * d
