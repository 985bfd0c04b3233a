"""The state at step k: the one place that replays an engine run's event log (DESIGN.md §Lab).

A run is simulated once with `record_events=True` and a time series of every step; `replay` turns its
event log into *rows* that change only when something happens: a block's row (state, reference count,
key, holders) at each state where an event touches it, a sequence's row (status, tokens and their rates,
block table) at each state where an event touches it or its token rates change, a contiguous region's
row when it is placed or freed, and one column per metric (a value per state). Between rows a decoding
sequence gains one computed and one generated token per step, so `state_at(k)` (the page does the same in
JavaScript) is a lookup, not a re-run. State k is the memory after k steps: step k-1's scheduling and
sampling done, its finishes and forks done, step k not started.

Two passes: the sequences' (`_SeqPass`, Python) walks the events that are not about blocks (admit,
schedule, prefix-hit, preempt, swap, finish, fork, reject: a few per request) step by step; the blocks'
(`kvsim.lab.state_blocks`, numpy on whole columns) takes the block events (allocate, free, evict,
copy-on-write, and the blocks a prefix hit, fork or swap-in takes), the bulk of a log. Rows are kept as
columns (`BlockRows`, `SeqRows`); `Track.block_rows` and `Track.seq_rows` are their list views.

Nothing here decides anything the engine decides: block ids, placements, hits, copies, preemptions and
evictions are read from the log, and the replay checks itself against the engine's time series (tests).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

from kvsim.engine.engine_input import EngineInput, prepare
from kvsim.engine.simulate import SimResult, simulate
from kvsim.errors import InternalError
from kvsim.lab.state_blocks import (
    BLOCK_STATES,
    BlockRows,
    SeqRows,
    _BlockPass,
    _group_starts,
    _order,
    _seq_rows,
)
from kvsim.lab.state_hybrid import block_rows as hybrid_block_rows
from kvsim.lab.state_hybrid import internal_tokens, replay_hybrid
from kvsim.lab.state_hybrid import seq_rows as hybrid_seq_rows
from kvsim.model.config import SimConfig
from kvsim.reference.contiguous import Buddy, FirstFit
from kvsim.reference.engine import EVENT

_second = itemgetter(1)
ADMIT, ALLOCATE, PREFIX_HIT, COW_COPY = (
    EVENT["admit"],
    EVENT["allocate"],
    EVENT["prefix-hit"],
    EVENT["cow-copy"],
)
EVICT, FREE, PREEMPT, SWAP_OUT = EVENT["evict"], EVENT["free"], EVENT["preempt"], EVENT["swap-out"]
SWAP_IN, FINISH, REJECT, FORK = EVENT["swap-in"], EVENT["finish"], EVENT["reject"], EVENT["fork"]
SCHEDULE, WINDOW = EVENT["schedule"], EVENT["window"]
# The CPU tier's events (DESIGN.md §CPU tier): a load or a store planned, a request's tokens in the tier,
# a chunk evicted from it (scheduling events of their step), a transfer seen complete (at an observation
# point: the count of steps completed then, so they belong to that state, as a finish does).
STORE, LOAD, CPU_HIT, CPU_EVICT = EVENT["store"], EVENT["load"], EVENT["cpu-hit"], EVENT["cpu-evict"]
STORE_DONE, LOAD_DONE = EVENT["store-done"], EVENT["load-done"]
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
# `loading`: held by the CPU tier while its load is in flight (its blocks allocated, neither running nor
# computing); `loaded`: its load seen complete, held until the scheduler resumes it (DESIGN.md §CPU tier).
STATUSES = ("waiting", "running", "swapped", "preempted", "finished", "rejected", "loading", "loaded")
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


@dataclass(slots=True)
class _Seq:
    idx: int
    request_id: int
    sample: int
    prompt_len: int
    target: int
    arrival_ps: int
    status: str = "waiting"
    c: int = 0  # computed tokens at `base` (state index)
    g: int = 0  # generated tokens at `base`
    base: int = 0
    rc: int = 0  # computed tokens gained per step from `base` on
    rg: int = 0  # generated tokens gained per step
    region: tuple[int, int] | None = None
    version: int = 0  # bumped at each change: invalidates a pending prefill-to-decode transition

    def at(self, k: int) -> tuple[int, int]:
        d = k - self.base
        return self.c + self.rc * d, self.g + self.rg * d


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
    """Simulates `workload` under `config` with the event log and a time series, and replays it."""
    res = simulate(workload, config, backend=backend, record_events=True, record_timeseries=True)
    return replay(res, workload, config, names=names, request_names=request_names)


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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per event: the state it belongs to, whether it follows its step's sampling (a finish and the frees
    after it, a fork, a reject: the leading run of such events among those carrying one step count; with
    a CPU tier, every event up to a count's last observation and every one `before_step` marks: it
    happened before its step count's step started), and
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
    after_finish = (kind == FREE) & (last_rel >= 0) & (kind[np.maximum(last_rel, 0)] == FINISH)
    pred = np.isin(kind, tuple(POST_STEP)) | after_finish
    others = np.cumsum(~pred)
    starts = _group_starts(step)  # the log is in step order: each step count's first event
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
    st = np.minimum(np.where(post, step, step + 1), num_steps)
    return st, post, last_rel


def _replay(
    res: SimResult,
    workload: Any,
    config: SimConfig,
    names: dict[int, str] | None,
    request_names: list[str] | None,
) -> Track:
    if res.raw.events is None or not res.raw.events or res.timeseries is None:
        raise InternalError("replay needs a run simulated with record_events=True and record_timeseries=True")
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
    st, post, last_rel = _event_states(step, kind, seq, num_steps, before_step)
    hr = None
    if paged and config.kv_groups:
        # A hybrid model: the manager's pass first, for the tokens each admission's prefix hit covered.
        hr = replay_hybrid(inp, config, step, kind, seq, block, count, post, num_steps)
    sp = _SeqPass(res, inp, config, step, kind, seq, block, count, post, num_steps, hr.hits if hr else None)
    upto = np.searchsorted(st, np.arange(num_steps + 1), "right")  # events in states 0..k
    during_at = np.searchsorted(step, np.arange(1, num_steps + 1), "left")  # events through step j
    labels = [*request_names, *(names or {}).values()]
    s_total = num_steps + 1
    zeros = np.zeros(s_total, np.int64)
    if paged and config.kv_groups:
        assert hr is not None
        return _replay_hybrid(
            res, inp, config, kind, upto, num_steps, sp, hr, names or {}, request_names, labels
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
    upto: np.ndarray,
    num_steps: int,
    sp: _SeqPass,
    hr: Any,
    names: dict[int, str],
    request_names: list[str],
    labels: list[str],
) -> Track:
    """A hybrid model's track: blocks and tables from the manager's pass (`state_hybrid`), tokens and
    sequence counts from the sequences' pass. Token measures are the engine's: a block is the engine's
    block size of token slots, less the slots left empty in each attention group's partly filled last
    block (a state block counts as full). A layout of unequal attention pages is refused (`check_layout`):
    its wider blocks hold more slots than the page draws."""
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


class _SeqPass:
    """The sequences' side of the replay, in Python over the events that are not about blocks (admit,
    schedule, prefix-hit, preempt, swap, finish, fork, reject: a few per request): status, computed and
    generated tokens with their rates (rows at every state where they change), the tokens the running
    sequences' tables hold (`logical`), contiguous regions, sequence counts, and what the block side
    needs from it (a release's computed tokens, a fork's parent, a swap-in's first sample). Block
    events (allocate, free, evict, copy-on-write) leave a sequence's tokens as they were: between two of
    its rows a running sequence computes a token a step and samples once its prompt is in."""

    STATE_COLUMNS = (
        "logical",
        "reserved",
        "external",
        "running",
        "waiting",
        "swapped",
        "finished",
        "rejected",
        "held",
    )

    def __init__(
        self,
        res: SimResult,
        inp: EngineInput,
        config: SimConfig,
        step: np.ndarray,
        kind: np.ndarray,
        seq: np.ndarray,
        block: np.ndarray,
        count: np.ndarray,
        post: np.ndarray,
        num_steps: int,
        hits: dict[int, int] | None = None,
    ) -> None:
        # A hybrid model's admissions: event index -> the tokens its prefix hit covered (its prefix-hit
        # rows are per group, and a window's hit starts past the tokens it skips).
        self.hits = hits
        self.rows: list[tuple[int, int, int, int, int, int, int]] = []  # (k, seq, status, c, rc, g, rg)
        self.arrivals: list[tuple[int, int]] = []  # (k, seq): it appears, waiting
        self.aux: dict[int, int] = {}  # event index -> a release's, swap-in's or fork parent's tokens
        self.src: dict[int, int] = {}  # event index -> the sequence whose blocks it takes (fork, swap-in)
        self.states: list[int] = []  # STATE_COLUMNS per state, flat
        self.during_logical: list[int] = []
        self.during_reserved: list[int] = []
        self.during_external: list[int] = []
        self.region_rows: list[list[Any]] = []
        self._run(res, inp, config, step, kind, seq, block, count, post, num_steps)

    def _run(
        self,
        res: SimResult,
        inp: EngineInput,
        config: SimConfig,
        step: np.ndarray,
        kind: np.ndarray,
        seq: np.ndarray,
        block: np.ndarray,
        count: np.ndarray,
        post: np.ndarray,
        num_steps: int,
    ) -> None:
        bs = config.block_size
        paged = not config.is_contiguous
        code = {s: i for i, s in enumerate(STATUSES)}
        pick = np.flatnonzero(~np.isin(kind, (ALLOCATE, FREE, EVICT, COW_COPY, WINDOW)))
        hits = self.hits
        e_idx = pick.tolist()
        e_step, e_kind, e_seq = step[pick].tolist(), kind[pick].tolist(), seq[pick].tolist()
        e_block, e_count, e_post = block[pick].tolist(), count[pick].tolist(), post[pick].tolist()
        n_ev = len(e_idx)
        seqs = [
            _Seq(i, int(r), int(s), int(p), int(t), int(a))
            for i, (r, s, p, t, a) in enumerate(
                zip(inp.request_id, inp.sample, inp.prompt_len, inp.target, inp.arrival_ps, strict=True)
            )
        ]
        space: FirstFit | Buddy | None = None
        if not paged:
            space = (Buddy if config.placement == "buddy" else FirstFit)(config.capacity_tokens)
        logical = 0  # computed tokens of running sequences (L)
        reserved = 0  # contiguous: region slots of running sequences
        counts = dict.fromkeys((*STATUSES, "unforked"), 0)
        fork_child = (inp.fork_parent >= 0).tolist()
        fork_parent = inp.fork_parent.tolist()
        for s in seqs:
            s.status = "unforked" if fork_child[s.idx] else "waiting"
            counts[s.status] += 1
        # A sequence is in the queue at state k once its arrival is at or before step k's start.
        step_ps = res.raw.timeseries["time_ps"].tolist()
        arrivals_sorted = sorted(s.arrival_ps for s in seqs if not fork_child[s.idx])
        dirty: dict[int, None] = {}
        transitions: list[tuple[int, int, int]] = []  # heap of (state, seq, version): a prefill completes
        first_sample: dict[int, int] = {}  # request id -> its group's first sample swapped in this step
        rows, aux, src, states = self.rows, self.aux, self.src, self.states
        # The CPU tier: a held request's tokens (its blocks are full: a load ends on a chunk boundary), the
        # held queue in the order loads were admitted, and which of them have landed.
        tpc = bs * config.kv_offloading_blocks_per_chunk
        held_tokens: dict[int, int] = {}
        held_order: list[int] = []
        landed: set[int] = set()
        batch = res.raw.timeseries["batch"].tolist() if config.kv_offloading_chunks else []
        ext = [0, False]  # the space's external fragmentation, and whether a region changed since

        def set_status(s: _Seq, status: str) -> None:
            counts[s.status] -= 1
            counts[status] += 1
            s.status = status

        def materialize(s: _Seq, k: int) -> None:
            s.c, s.g = s.at(k)
            s.base = k
            s.version += 1

        def set_rates(s: _Seq, k: int) -> None:
            """From state k on, a running sequence decodes (a computed and a generated token a step) or is
            still prefilling a token a step (then a transition when its prompt is in: it samples)."""
            if s.status != "running":
                s.rc = s.rg = 0
                return
            pending = s.prompt_len + s.g - s.c  # tokens not yet computed (>= 1)
            s.rc = 1
            s.rg = 1 if pending == 1 else 0
            if pending > 1:
                heapq.heappush(transitions, (k + pending, s.idx, s.version))

        def apply_transitions(k: int) -> None:
            while transitions and transitions[0][0] <= k:
                t, i, version = heapq.heappop(transitions)
                s = seqs[i]
                if s.version == version and t == k:
                    materialize(s, k)
                    s.g += 1
                    s.rg = 1
                    dirty[i] = None

        def external() -> int:
            if space is None:
                return 0
            if ext[1]:
                if isinstance(space, FirstFit):  # free tokens outside the largest hole, as the class says
                    holes = space.holes
                    ext[0] = space.num_free - (max(map(_second, holes)) if holes else 0)
                else:
                    ext[0] = space.external_fragmentation()
                ext[1] = False
            return int(ext[0])

        def free_region(s: _Seq, k: int) -> None:
            nonlocal reserved
            assert s.region is not None
            assert space is not None
            space.free(*s.region)
            ext[1] = True
            reserved -= s.region[1]
            self.region_rows.append([k, s.request_id, None, s.region[1], s.sample])
            s.region = None

        def flush_and_record(k: int) -> None:
            for i in dirty:
                s = seqs[i]
                d = k - s.base
                rows.append((k, i, code[s.status], s.c + s.rc * d, s.rc, s.g + s.rg * d, s.rg))
            dirty.clear()
            # Waiting: those queued, less those not arrived by step k's start (added per state after).
            states.extend(
                (
                    logical,
                    reserved,
                    external(),
                    counts["running"],
                    counts["waiting"] + counts["preempted"] - len(arrivals_sorted),
                    counts["swapped"],
                    counts["finished"],
                    counts["rejected"],
                    counts["loading"] + counts["loaded"],
                )
            )

        # Arrival rows: a sequence appears (waiting) at the first state whose step starts at or after it.
        for s in seqs:
            if not fork_child[s.idx]:
                self.arrivals.append((min(bisect.bisect_left(step_ps, s.arrival_ps), num_steps), s.idx))

        pos = 0

        def reject(s: _Seq) -> None:
            """A request rejected; one held for a load (it can never run) releases its blocks' tokens."""
            nonlocal logical
            i = s.idx
            if i in held_tokens:
                logical -= held_tokens.pop(i)
                held_order.remove(i)
                landed.discard(i)
            set_status(s, "rejected")

        def land(s: _Seq, k: int) -> None:
            """A load seen complete: held until resumed; a load of the whole prompt leaves its last token
            to compute again (vLLM's `_update_waiting_for_remote_kv`)."""
            materialize(s, k)
            set_status(s, "loaded")
            landed.add(s.idx)
            if s.c == s.prompt_len + s.g:
                s.c -= 1

        def post_events(k: int) -> None:
            """Events carrying step count k that follow step k-1's sampling (a finish, a fork, a reject):
            they belong to state k."""
            nonlocal pos, logical
            while pos < n_ev and e_step[pos] == k and e_post[pos]:
                kind, s = e_kind[pos], seqs[e_seq[pos]]
                if kind == FINISH:
                    materialize(s, k)
                    logical -= s.c
                    set_status(s, "finished")
                    s.rc = s.rg = 0
                    aux[e_idx[pos]] = s.c
                    if s.region is not None:
                        free_region(s, k)
                elif kind == LOAD_DONE:
                    land(s, k)
                elif kind == STORE_DONE:
                    pos += 1
                    continue
                elif kind == FORK:
                    parent = seqs[fork_parent[s.idx]]
                    pc, _ = parent.at(k)
                    s.c, s.g, s.base = pc, 1, k
                    s.version += 1
                    set_status(s, "running")
                    logical += s.c
                    aux[e_idx[pos]] = pc
                    src[e_idx[pos]] = parent.idx
                    set_rates(s, k)
                elif kind == REJECT:
                    reject(s)
                else:  # CPU tier: a step that scheduled nothing, or a stall, before step k
                    before: dict[int, None] = {}
                    one(k, before, {})
                    for i in before:
                        seqs[i].base = k
                        set_rates(seqs[i], k)
                dirty[s.idx] = None
                pos += 1

        def step_events(j: int) -> tuple[dict[int, None], dict[int, int]]:
            """Step j's scheduling events (admissions, prefix hits, preemptions, `schedule` rows)."""
            nonlocal pos, logical, reserved
            listed: dict[int, int] = {}
            touched: dict[int, None] = {}
            while pos < n_ev and e_step[pos] == j:
                one(j, touched, listed)
                pos += 1
            return touched, listed

        def one(j: int, touched: dict[int, None], listed: dict[int, int]) -> None:
            """The scheduling event at `pos`, of step j (or, with a CPU tier, of a step before j that
            scheduled nothing: then `post_events` passes it, and j is the state it belongs to)."""
            nonlocal logical, reserved
            kind, i, b, cnt = e_kind[pos], e_seq[pos], e_block[pos], e_count[pos]
            s = seqs[i]
            if i not in touched:
                touched[i] = None
                materialize(s, j)
            if kind == SCHEDULE:
                listed[i] = cnt
            elif kind == ADMIT:
                set_status(s, "running")
                s.c = 0
                if hits is not None:
                    s.c = hits[e_idx[pos]]
                    logical += s.c
                if not paged:
                    assert space is not None
                    got = space.allocate(cnt)
                    if got != (b, cnt):
                        raise InternalError(f"seq {i} at step {j}: region {(b, cnt)} logged, {got} replayed")
                    s.region = got
                    ext[1] = True
                    reserved += cnt
                    self.region_rows.append([j + 1, s.request_id, b, cnt, s.sample])
            elif kind == PREFIX_HIT:
                if hits is None:
                    s.c += bs
                    logical += bs
            elif kind == SWAP_IN:
                set_status(s, "running")
                logical += s.c
                if cnt > 0:  # a group member: it shares the first sample's leading blocks
                    src[e_idx[pos]] = first_sample[s.request_id]
                    aux[e_idx[pos]] = s.c
                else:
                    first_sample[s.request_id] = i
            elif kind in (PREEMPT, SWAP_OUT):
                logical -= s.c
                aux[e_idx[pos]] = s.c
                if kind == PREEMPT:
                    set_status(s, "preempted")
                    s.c = 0
                    if s.region is not None:
                        free_region(s, j + 1)
                else:
                    set_status(s, "swapped")
            elif kind == REJECT:
                reject(s)
            elif kind == LOAD:
                # A load admitted: its blocks hold the GPU hits and the loaded chunks, `cnt` chunks from
                # the one holding the first token after the hits; the request is held, not running.
                end = ((s.c // bs) * bs // tpc + cnt) * tpc
                logical += end - s.c
                s.c = end
                held_tokens[i] = end
                held_order.append(i)
                set_status(s, "loading")
            elif kind == LOAD_DONE:  # observed after a step that scheduled nothing
                land(s, j)
            elif kind in (STORE, CPU_HIT, CPU_EVICT, STORE_DONE):
                pass  # the tier's own (`tier_columns`): a request's tokens and status stay
            else:
                raise InternalError(f"event kind {kind} at step {j} out of place")

        post_events(0)
        flush_and_record(0)

        def resume(j: int, touched: dict[int, None], listed: dict[int, int]) -> int:
            """Held requests whose loads landed resume first in step j, in the held queue's order, until one
            cannot (vLLM: the held queue before the waiting one). The log has no row for a resume (a
            request resuming to compute one token, a whole prompt loaded, has neither a `schedule` row nor
            an allocation), so their number is the step's batch beyond the running sequences it schedules.
            Returns the change of the running sequences' tokens."""
            m = batch[j] - counts["running"] + sum(1 for v in listed.values() if v == 0)
            ready = [i for i in held_order if i in landed]
            if (
                m < 0
                or m > len(ready)
                or any(seqs[i].status == "loaded" and i not in ready[:m] for i in listed)
            ):
                raise InternalError(f"step {j}: {m} held requests resumed of {len(ready)} landed")
            delta = 0
            for i in ready[:m]:
                s = seqs[i]
                materialize(s, j)
                set_status(s, "running")
                delta += s.c - held_tokens.pop(i)
                held_order.remove(i)
                landed.discard(i)
                touched[i] = None
            return delta

        busy = bytearray(num_steps + 2)  # step counts that some event carries
        for v in e_step:
            busy[min(v, num_steps + 1)] = 1
        during_logical, during_reserved = self.during_logical.append, self.during_reserved.append
        during_external = self.during_external.append
        for j in range(num_steps):
            if not (busy[j] or busy[j + 1] or landed or (transitions and transitions[0][0] <= j + 1)):
                # Nothing happens in step j but each running sequence computing a token.
                logical += counts["running"]
                e = external()
                during_logical(logical)
                during_reserved(reserved)
                during_external(e)
                states.extend(
                    (
                        logical,
                        reserved,
                        e,
                        counts["running"],
                        counts["waiting"] + counts["preempted"] - len(arrivals_sorted),
                        counts["swapped"],
                        counts["finished"],
                        counts["rejected"],
                        counts["loading"] + counts["loaded"],
                    )
                )
                continue
            touched, listed = step_events(j)
            if landed:
                logical += resume(j, touched, listed)
            # Step j computes a token for every running sequence, or its listed count.
            logical += counts["running"] + sum(listed.values()) - len(listed)
            for i in touched:
                s = seqs[i]
                if s.status == "running":
                    s.c += listed.get(i, 1)
                    if s.c == s.prompt_len + s.g:
                        s.g += 1  # all its tokens computed: it samples one
                s.base = j + 1
                set_rates(s, j + 1)
                dirty[i] = None
            during_logical(logical)
            during_reserved(reserved)
            during_external(external())
            first_sample.clear()
            apply_transitions(j + 1)
            post_events(j + 1)
            flush_and_record(j + 1)
        if pos < n_ev:
            # An iteration that scheduled nothing after the last step (it preempted, then rejected): its
            # events belong to the final state, and no step follows.
            touched, _ = step_events(num_steps)
            for i in touched:
                seqs[i].base = num_steps
                set_rates(seqs[i], num_steps)
                dirty[i] = None
            post_events(num_steps)
            del states[-len(self.STATE_COLUMNS) :]
            flush_and_record(num_steps)
        if pos != n_ev:
            raise InternalError(f"replay stopped at event {e_idx[pos]} of {len(kind)}")


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
