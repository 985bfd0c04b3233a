"""The state at step k: the one place that replays an engine run's event log (DESIGN.md §Lab).

A run is simulated once with `record_events=True` and a time series of every step; `replay` walks its
event log step by step and writes *rows* that change only when something happens: a block's row (state,
reference count, holders) when a block event touches it, a sequence's row (status, tokens, block table)
when an event touches it or its token rates change, a contiguous region's row when it is placed or
freed. Between rows a decoding sequence gains one computed and one generated token per step, so the
rows are few and `state_at(k)` (the page does the same in JavaScript) is a lookup, not a re-run. The
scalar metrics are kept incrementally while replaying and stored as one column per metric (a value per
state). State k is the memory after k steps: step k-1's scheduling and sampling done, its finishes and
forks done, step k not started.

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

from kvsim.config import SimConfig
from kvsim.engine_input import EngineInput, prepare
from kvsim.errors import InternalError
from kvsim.reference.contiguous import Buddy, FirstFit
from kvsim.reference.engine import EVENT
from kvsim.simulate import SimResult, simulate

_second = itemgetter(1)
ADMIT, ALLOCATE, PREFIX_HIT, COW_COPY = (
    EVENT["admit"],
    EVENT["allocate"],
    EVENT["prefix-hit"],
    EVENT["cow-copy"],
)
EVICT, FREE, PREEMPT, SWAP_OUT = EVENT["evict"], EVENT["free"], EVENT["preempt"], EVENT["swap-out"]
SWAP_IN, FINISH, REJECT, FORK = EVENT["swap-in"], EVENT["finish"], EVENT["reject"], EVENT["fork"]
SCHEDULE = EVENT["schedule"]
# Events that happen after their step's sampling (their `step` is the count after it): they belong to the
# state they carry. Scheduling events of step j belong to state j + 1.
POST_STEP = {FINISH, FORK, REJECT}

BLOCK_STATES = ("free", "private", "shared", "cached", "null")
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
STATUSES = ("waiting", "running", "swapped", "preempted", "finished", "rejected")


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
class BlockRows:
    """Block rows as columns (row i: from state `step[i]` on, block `block[i]` is `BLOCK_STATES[state[i]]`
    with `ref[i]` references, key `(key_label[i], key_index[i])` (-1: none) and the request ids
    `holders[holders_offsets[i]:holders_offsets[i + 1]]`), sorted by step."""

    step: np.ndarray
    block: np.ndarray
    state: np.ndarray
    ref: np.ndarray
    key_label: np.ndarray
    key_index: np.ndarray
    holders_offsets: np.ndarray
    holders: np.ndarray

    def __len__(self) -> int:
        return len(self.step)


@dataclass
class SeqRows:
    """Sequence rows as columns, sorted by step: status (`STATUSES` index), computed and generated tokens
    and their rates from `step` on, and the block table as `keep` blocks of the same sequence's previous
    row's table followed by `tail[tail_offsets[i]:tail_offsets[i + 1]]`."""

    step: np.ndarray
    seq: np.ndarray
    request_id: np.ndarray
    sample: np.ndarray
    status: np.ndarray
    computed: np.ndarray
    computed_rate: np.ndarray
    generated: np.ndarray
    generated_rate: np.ndarray
    keep: np.ndarray
    tail_offsets: np.ndarray
    tail: np.ndarray

    def __len__(self) -> int:
        return len(self.step)


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

    def key(self, label: int, index: int) -> str | None:
        return None if label < 0 else f"{self.key_labels[label]}:block-{index}"

    @functools.cached_property
    def block_rows(self) -> list[list[Any]]:
        """The block rows as lists `[step, block, state, ref_cnt, prefix_key, request_ids]`."""
        b = self.blocks
        if b is None:
            return []
        off = b.holders_offsets.tolist()
        holders = b.holders.tolist()
        labels, index = b.key_label.tolist(), b.key_index.tolist()
        return [
            [k, blk, BLOCK_STATES[s], r, self.key(labels[i], index[i]), holders[off[i] : off[i + 1]]]
            for i, (k, blk, s, r) in enumerate(
                zip(b.step.tolist(), b.block.tolist(), b.state.tolist(), b.ref.tolist(), strict=True)
            )
        ]

    @functools.cached_property
    def seq_rows(self) -> list[list[Any]]:
        """The sequence rows as lists `[step, request, sample, status, computed, rate, generated, rate,
        block table]` with whole tables."""
        s = self.seqs
        off, tail = s.tail_offsets.tolist(), s.tail.tolist()
        last: dict[int, list[int]] = {}
        out = []
        cols = (s.step, s.seq, s.request_id, s.sample, s.status, s.computed, s.computed_rate)
        more = (s.generated, s.generated_rate, s.keep)
        for i, (k, q, rid, sample, status, c, rc, g, rg, keep) in enumerate(
            zip(*(a.tolist() for a in (*cols, *more)), strict=True)
        ):
            table = last.get(q, [])[:keep] + tail[off[i] : off[i + 1]]
            last[q] = table
            out.append([k, rid, sample, STATUSES[status], c, rc, g, rg, table])
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


def _i64(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _event_states(
    step: np.ndarray, kind: np.ndarray, seq: np.ndarray, num_steps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per event: the state it belongs to, whether it follows its step's sampling (a finish and the frees
    after it, a fork, a reject: the leading run of such events among those carrying one step count), and
    the index of its sequence's latest release (finish, preempt, swap-out) at or before it (-1: none)."""
    n = len(kind)
    if n and bool((step[1:] < step[:-1]).any()):
        raise InternalError("event log not in step order")
    order = np.argsort(seq, kind="stable")
    s_sorted = seq[order]
    released = np.isin(kind, (FINISH, PREEMPT, SWAP_OUT))[order]
    last = np.maximum.accumulate(np.where(released, np.arange(n), -1)) if n else np.zeros(0, np.int64)
    safe = np.maximum(last, 0)
    last_rel = np.empty(n, np.int64)
    last_rel[order] = np.where((last >= 0) & (s_sorted[safe] == s_sorted), order[safe], -1)
    after_finish = (kind == FREE) & (last_rel >= 0) & (kind[np.maximum(last_rel, 0)] == FINISH)
    pred = np.isin(kind, (FINISH, FORK, REJECT)) | after_finish
    others = np.cumsum(~pred)
    first = np.searchsorted(step, step, "left")
    before = np.where(first > 0, others[np.maximum(first - 1, 0)], 0)
    post = pred & (others - before == 0)
    st = np.minimum(np.where(post, step, step + 1), num_steps)
    return st, post, last_rel


def _order(*keys: np.ndarray) -> np.ndarray:
    """Indices that sort by several non-negative integer keys, the first the most significant: stable
    sorts from the least significant key up (a radix sort for keys below 2**16; the logs' columns are
    mostly runs already in order, which a merge sort takes in linear time)."""
    order: np.ndarray | None = None
    for k in reversed(keys):
        k = k if order is None else k[order]
        small = len(k) == 0 or int(k.max()) < 2**16
        o = np.argsort(k.astype(np.uint16) if small else k, kind="stable")
        order = o if order is None else order[o]
    assert order is not None
    return order


def _group_starts(keys: np.ndarray) -> np.ndarray:
    """Start index of each run of equal values in `keys`."""
    if len(keys) == 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])


def _grouped_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sums restarting at each index of `starts` (sorted, starts[0] == 0)."""
    c = np.cumsum(values)
    if len(c) == 0:
        return c
    lengths = np.diff(np.r_[starts, len(values)])
    base = np.repeat(c[starts] - values[starts], lengths)
    return c - base


def _key_labels(
    inp: EngineInput,
    names: dict[int, str],
    request_names: list[str],
    bs: int,
    seq: np.ndarray,
    pos: np.ndarray,
) -> np.ndarray:
    """Readable prefix keys as label ids (into `request_names + list(names.values())`): block `pos` of
    `seq` is named after the named segment its last token lies in (`sys-coding-agent-v1:block-1`), else
    after its request (`req-2:block-2`)."""
    label = inp.request_row[seq].astype(np.int64)
    if not names or len(seq) == 0:
        return label
    sid = inp.segment_id
    cumlen = np.r_[0, np.cumsum(inp.segment_len)]
    lo, hi = inp.seg_offsets[seq], inp.seg_offsets[seq + 1]
    end = cumlen[lo] + (pos + 1) * bs - 1  # the block's last token, in the flat segment arrays' tokens
    j = np.searchsorted(cumlen[1:], end, "right")  # the segment holding it
    inside = j < hi
    label_of = {s: len(request_names) + k for k, s in enumerate(names)}
    uniq, inv = np.unique(sid[np.minimum(j, len(sid) - 1)], return_inverse=True)
    named = np.array([label_of.get(int(s), -1) for s in uniq], np.int64)[inv.reshape(-1)]
    return np.where(inside & (named >= 0), named, label)


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
    st, post, last_rel = _event_states(step, kind, seq, num_steps)
    sp = _SeqPass(res, inp, config, step, kind, seq, block, count, post, num_steps)
    upto = np.searchsorted(st, np.arange(num_steps + 1), "right")  # events in states 0..k
    during_at = np.searchsorted(step, np.arange(1, num_steps + 1), "left")  # events through step j
    labels = [*request_names, *(names or {}).values()]
    s_total = num_steps + 1
    zeros = np.zeros(s_total, np.int64)
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
    # Per state k: the time step k starts (the run's end after the last) and the arrivals by then.
    step_ps = np.append(_i64(res.raw.timeseries["time_ps"]), int(res.raw.counters["makespan_ps"]))
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
        **{name: col[name] for name in ("running", "swapped", "finished", "rejected")},
        "waiting": col["waiting"] + arrived,
        **{f"{name}_blocks": bcount[:, state_of[name]] for name in ("free", "cached", "shared", "private")},
        "event_upto": upto,
        "time_ps": step_ps[np.minimum(np.arange(s_total), len(step_ps) - 1)],
    }
    # The cumulative counts at state k: the events of their kinds among the first event_upto[k].
    for name, counted in CUMULATIVE_KINDS.items():
        metrics[name] = np.r_[0, np.cumsum(np.isin(kind, counted))][upto]
    metrics = {name: np.asarray(metrics[name]).tolist() for name in METRIC_COLUMNS}
    dl = np.array(sp.during_logical, np.int64)
    during = {
        "allocated_tokens": (held_d * bs if paged else np.array(sp.during_reserved, np.int64)).tolist(),
        "stored_tokens": (dl - dup_d if paged else dl).tolist(),
        "external_tokens": sp.during_external,
    }
    seqs = _seq_rows(inp, sp, seq, st, num_steps, bp if paged else None)
    region_rows = sorted(sp.region_rows, key=itemgetter(0))
    return Track(config, res, inp, num_steps, blocks, seqs, region_rows, metrics, during, labels)


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
    ) -> None:
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
        pick = np.flatnonzero(~np.isin(kind, (ALLOCATE, FREE, EVICT, COW_COPY)))
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
                )
            )

        # Arrival rows: a sequence appears (waiting) at the first state whose step starts at or after it.
        for s in seqs:
            if not fork_child[s.idx]:
                self.arrivals.append((min(bisect.bisect_left(step_ps, s.arrival_ps), num_steps), s.idx))

        pos = 0

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
                    set_status(s, "rejected")
                else:
                    raise InternalError(f"event kind {kind} at step {k} out of place")
                dirty[s.idx] = None
                pos += 1

        post_events(0)
        flush_and_record(0)

        def step_events(j: int) -> tuple[dict[int, None], dict[int, int]]:
            """Step j's scheduling events (admissions, prefix hits, preemptions, `schedule` rows)."""
            nonlocal pos, logical, reserved
            listed: dict[int, int] = {}
            touched: dict[int, None] = {}
            while pos < n_ev and e_step[pos] == j:
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
                    if not paged:
                        assert space is not None
                        got = space.allocate(cnt)
                        if got != (b, cnt):
                            raise InternalError(
                                f"seq {i} at step {j}: region {(b, cnt)} logged, {got} replayed"
                            )
                        s.region = got
                        ext[1] = True
                        reserved += cnt
                        self.region_rows.append([j + 1, s.request_id, b, cnt, s.sample])
                elif kind == PREFIX_HIT:
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
                    set_status(s, "rejected")
                else:
                    raise InternalError(f"event kind {kind} at step {j} out of place")
                pos += 1
            return touched, listed

        busy = bytearray(num_steps + 2)  # step counts that some event carries
        for v in e_step:
            busy[min(v, num_steps + 1)] = 1
        during_logical, during_reserved = self.during_logical.append, self.during_reserved.append
        during_external = self.during_external.append
        for j in range(num_steps):
            if not (busy[j] or busy[j + 1] or (transitions and transitions[0][0] <= j + 1)):
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
                    )
                )
                continue
            touched, listed = step_events(j)
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


class _BlockPass:
    """The blocks' side of the replay, on whole columns: every event that puts a block into a table or
    takes one out is a *slot* change (sequence, table index) and a reference change of the block
    (allocate and prefix-hit append, copy-on-write replaces the last slot, free removes the last, a fork
    or a group member's swap-in copies the leading slots of another table); reference counts, holders,
    keys and block rows follow by sorting and cumulative sums. Only blocks that are ever shared go
    through a Python loop (their holders and the tokens their sharing saves)."""

    def __init__(
        self,
        inp: EngineInput,
        config: SimConfig,
        kind: np.ndarray,
        seq: np.ndarray,
        block: np.ndarray,
        count: np.ndarray,
        st: np.ndarray,
        last_rel: np.ndarray,
        sp: _SeqPass,
        upto: np.ndarray,
        during_at: np.ndarray,
    ) -> None:
        self.inp, self.config = inp, config
        self.kind, self.seq, self.block, self.count = kind, seq, block, count
        self.st, self.last_rel, self.sp = st, last_rel, sp
        self.upto, self.during_at = upto, during_at

    def _depths(self) -> None:
        """Per event: its sequence's table length before it (`depth`) and the change (`delta`)."""
        kind, seq, count, sp = self.kind, self.seq, self.count, self.sp
        n = len(kind)
        delta = np.zeros(n, np.int64)
        delta[(kind == ALLOCATE) | (kind == PREFIX_HIT)] = 1
        delta[kind == FREE] = -1
        self.swap_from = np.flatnonzero((kind == SWAP_IN) & (count > 0))
        delta[self.swap_from] = count[self.swap_from]
        order = np.argsort(seq, kind="stable")  # events by (sequence, position)
        starts = _group_starts(seq[order])
        self.forks = np.flatnonzero(kind == FORK)
        if len(self.forks):
            # A fork copies its parent's whole table (a parent is never forked itself).
            incl = _grouped_cumsum(delta[order], starts)
            skey = seq[order] * (n + 1) + order
            parent = np.array([sp.src[e] for e in self.forks.tolist()], np.int64)
            at = np.searchsorted(skey, parent * (n + 1) + self.forks, "left")
            first = np.searchsorted(skey, parent * (n + 1), "left")
            delta[self.forks] = np.where(at > first, incl[np.maximum(at - 1, 0)], 0)
        incl = _grouped_cumsum(delta[order], starts)
        depth = np.empty(n, np.int64)
        depth[order] = incl - delta[order]
        self.delta, self.depth, self.order, self.starts = delta, depth, order, starts

    def run(self, names: dict[int, str], request_names: list[str]) -> None:
        self._depths()
        kind, seq, block = self.kind, self.seq, self.block
        depth, delta, sp = self.depth, self.delta, self.sp
        n = len(kind)
        bs = self.config.block_size
        # Slot starts: (seq, index, event, sub-order, block, tokens it holds for a take).
        direct = np.flatnonzero((kind == ALLOCATE) | (kind == PREFIX_HIT) | (kind == COW_COPY))
        cow = kind[direct] == COW_COPY
        multi = np.sort(np.r_[self.forks, self.swap_from]).astype(np.int64)
        m_len = delta[multi]
        m_rep = np.repeat(multi, m_len)
        m_x = np.arange(len(m_rep)) - np.repeat(np.cumsum(m_len) - m_len, m_len)
        m_base = np.array([sp.aux[e] for e in multi.tolist()], np.int64)
        a_seq = np.r_[seq[direct], seq[m_rep]]
        a_pos = np.r_[depth[direct] - cow, depth[m_rep] + m_x]
        a_ev = np.r_[direct, m_rep]
        a_sub = np.r_[np.ones(len(direct), np.int64), 1 + m_x]
        a_block = np.r_[block[direct], np.full(len(m_rep), -1, np.int64)]
        a_tok = np.r_[
            np.where(kind[direct] == PREFIX_HIT, bs, 0),
            np.minimum(bs, np.repeat(m_base, m_len) - m_x * bs),
        ]
        # Slot ends: a free (the table's last slot) or a copy-on-write (its last slot, before the copy).
        ends = np.flatnonzero((kind == FREE) | (kind == COW_COPY))
        z_seq, z_pos, z_ev = seq[ends], depth[ends] - 1, ends
        na, nz = len(a_ev), len(z_ev)
        r_seq, r_pos, r_ev = np.r_[a_seq, z_seq], np.r_[a_pos, z_pos], np.r_[a_ev, z_ev]
        r_sub = np.r_[a_sub, np.zeros(nz, np.int64)]
        r_start = np.r_[np.ones(na, bool), np.zeros(nz, bool)]
        if (r_pos < 0).any():
            raise InternalError("a free or copy-on-write of an empty block table")
        o = _order(r_seq, r_pos, r_ev, r_sub)
        g = _group_starts(r_seq[o] * (int(r_pos.max(initial=0)) + 1) + r_pos[o])
        rank = np.arange(len(o)) - np.repeat(g, np.diff(np.r_[g, len(o)]))
        if (r_start[o] != (rank % 2 == 0)).any():
            raise InternalError("the log's block tables do not replay: a slot taken twice or freed empty")
        # Pair each start with the end that follows it in its slot (none: held at the end).
        nxt = np.r_[o[1:], -1]
        same = np.r_[(rank[1:] > 0), False]
        pair_of_start = np.full(na, -1, np.int64)  # index into ends, or -1
        is_s = r_start[o]
        pair_of_start[o[is_s]] = np.where(same[is_s], nxt[is_s] - na, -1)
        # A fork's or a group member's slots: the blocks its source table holds then, in log order.
        if len(m_rep):
            width = int(a_pos.max(initial=0)) + 1
            skey = (a_seq * width + a_pos) * (n + 1) + a_ev
            by = np.argsort(skey, kind="stable")
            sk = skey[by]
            at = len(direct)
            for e, length in zip(multi.tolist(), m_len.tolist(), strict=True):
                slot = sp.src[e] * width + np.arange(length)
                i = np.searchsorted(sk, slot * (n + 1) + e, "left") - 1
                if (i < 0).any() or (sk[np.maximum(i, 0)] // (n + 1) != slot).any():
                    raise InternalError(f"event {e} copies slots its source table never held")
                a_block[at : at + length] = a_block[by[i]]
                at += length
        if (a_block < 0).any():
            raise InternalError("a fork or swap-in copies blocks its source table does not hold")
        z_block = np.full(nz, -1, np.int64)
        has_end = pair_of_start >= 0
        z_block[pair_of_start[has_end]] = a_block[has_end]
        frees = kind[ends] == FREE
        if (z_block[frees] != block[ends][frees]).any():
            bad = int(ends[frees][np.flatnonzero(z_block[frees] != block[ends][frees])[0]])
            raise InternalError(f"free of block {int(block[bad])} by seq {int(seq[bad])}: not its last block")
        self._references(
            a_seq,
            a_pos,
            a_ev,
            a_sub,
            a_block,
            a_tok,
            z_seq,
            z_pos,
            z_ev,
            z_block,
            frees,
            names,
            request_names,
        )
        self.a_seq, self.a_pos, self.a_ev, self.a_block = a_seq, a_pos, a_ev, a_block
        self.a_end = np.where(has_end, z_ev[np.maximum(pair_of_start, 0)], n)

    def _references(
        self,
        a_seq: np.ndarray,
        a_pos: np.ndarray,
        a_ev: np.ndarray,
        a_sub: np.ndarray,
        a_block: np.ndarray,
        a_tok: np.ndarray,
        z_seq: np.ndarray,
        z_pos: np.ndarray,
        z_ev: np.ndarray,
        z_block: np.ndarray,
        frees: np.ndarray,
        names: dict[int, str],
        request_names: list[str],
    ) -> None:
        """Reference counts, lives, keys, holders and the block rows from the slot changes."""
        kind, st, sp, inp = self.kind, self.st, self.sp, self.inp
        n = len(kind)
        bs = self.config.block_size
        caching = self.config.enable_prefix_caching
        nb = self.config.num_blocks or 0
        na, nz = len(a_ev), len(z_ev)
        o_block = np.r_[a_block, z_block]
        o_ev = np.r_[a_ev, z_ev]
        o_sub = np.r_[a_sub, np.zeros(nz, np.int64)]
        o_seq = np.r_[a_seq, z_seq]
        o_pos = np.r_[a_pos, z_pos]
        o_d = np.r_[np.ones(na, np.int64), -np.ones(nz, np.int64)]
        o_tok = np.r_[a_tok, np.zeros(nz, np.int64)]
        o_free = np.r_[np.zeros(na, bool), frees]
        if len(o_block) and (o_block.min() < 0 or o_block.max() >= nb):
            raise InternalError("a block id outside the pool")
        ob = _order(o_block, o_ev, o_sub)  # ops by (block, event, sub-order)
        b_sorted = o_block[ob]
        bstarts = _group_starts(b_sorted)
        ref_after = _grouped_cumsum(o_d[ob], bstarts)
        ref_before = ref_after - o_d[ob]
        if (ref_after < 0).any():
            raise InternalError("a block freed more times than taken")
        allocs = kind[o_ev[ob]] == ALLOCATE
        if (allocs & (ref_before != 0)).any():
            i = int(np.flatnonzero(allocs & (ref_before != 0))[0])
            raise InternalError(f"block {int(b_sorted[i])} allocated with ref_cnt {int(ref_before[i])}")
        take0 = (o_d[ob] > 0) & (ref_before == 0)
        drop0 = (o_d[ob] < 0) & (ref_after == 0)
        # Lives: from a take of a free block to its return; shared lives go through Python below.
        life = np.cumsum(take0) - 1
        life_starts = _group_starts(life) if len(life) else np.zeros(0, np.int64)
        life_max = np.maximum.reduceat(ref_after, life_starts) if len(life) else np.zeros(0, np.int64)
        shared_life = np.repeat(life_max >= 2, np.diff(np.r_[life_starts, len(life)]))
        # Keys: the key a block takes when taken free (caching on): label and table index.
        ev_sorted = o_ev[ob]
        seq_sorted, pos_sorted = o_seq[ob], o_pos[ob]
        key_label = np.full(len(ob), -1, np.int64)
        key_index = np.full(len(ob), -1, np.int64)
        if caching and take0.any():
            t = np.flatnonzero(take0)
            key_label[t] = _key_labels(inp, names, request_names, bs, seq_sorted[t], pos_sorted[t])
            key_index[t] = pos_sorted[t]
            # Every op carries the key of its block's latest take of it free.
            last_take = np.maximum.accumulate(np.where(take0, np.arange(len(ob)), -1))
            ok = (last_take >= 0) & (b_sorted[np.maximum(last_take, 0)] == b_sorted)
            src = np.maximum(last_take, 0)
            key_label = np.where(ok, key_label[src], -1)
            key_index = np.where(ok, key_index[src], -1)
        # A full block keeps its key while free (cached) until it is evicted or taken again.
        aux = np.full(n + 1, -1, np.int64)  # index n: no release
        aux[np.fromiter(sp.aux, np.int64, len(sp.aux))] = np.fromiter(sp.aux.values(), np.int64, len(sp.aux))
        rel = self.last_rel[ev_sorted[drop0]]
        free_c = aux[np.where(rel >= 0, rel, n)]
        keyset_idx = np.flatnonzero(drop0)[
            o_free[ob][drop0] & caching & (free_c >= (pos_sorted[drop0] + 1) * bs)
        ]
        evicts = np.flatnonzero(kind == EVICT)
        k_block = np.r_[b_sorted[keyset_idx], b_sorted[take0], self.block[evicts]]
        k_ev = np.r_[ev_sorted[keyset_idx], ev_sorted[take0], evicts]
        k_set = np.r_[np.ones(len(keyset_idx), bool), np.zeros(int(take0.sum()) + len(evicts), bool)]
        k_label = np.r_[key_label[keyset_idx], np.full(len(k_ev) - len(keyset_idx), -1, np.int64)]
        k_index = np.r_[key_index[keyset_idx], np.full(len(k_ev) - len(keyset_idx), -1, np.int64)]
        ko = _order(k_block, k_ev)
        kkey = k_block[ko] * (n + 1) + k_ev[ko]
        # Rows: the last op of each (block, state).
        st_sorted = st[ev_sorted]
        gkey = b_sorted * (int(st.max(initial=0)) + 1) + st_sorted
        last = np.flatnonzero(np.r_[gkey[1:] != gkey[:-1], True]) if len(gkey) else np.zeros(0, np.int64)
        r_step, r_block, r_ref = st_sorted[last], b_sorted[last], ref_after[last]
        r_label, r_index = key_label[last], key_index[last]
        state = np.where(r_ref >= 2, 2, np.where(r_ref == 1, 1, 0)).astype(np.int64)
        free_rows = r_ref == 0
        if free_rows.any():
            q = r_block[free_rows] * (n + 1) + (self.upto[r_step[free_rows]] - 1)
            i = np.searchsorted(kkey, q, "right") - 1
            valid = i >= 0
            ii = ko[np.maximum(i, 0)]
            cached = valid & (k_block[ii] == r_block[free_rows]) & k_set[ii]
            state[np.flatnonzero(free_rows)[cached]] = 3
            lab = np.where(cached, k_label[ii], -1)
            idx = np.where(cached, k_index[ii], -1)
            r_label[free_rows], r_index[free_rows] = lab, idx
        # Holders: a life never shared has one holder, its taker; shared lives are replayed here.
        life_taker = seq_sorted[life_starts] if len(life) else np.zeros(0, np.int64)
        rid = inp.request_id.astype(np.int64)
        h_count = np.where(r_ref >= 1, 1, 0)
        h_first = np.where(r_ref >= 1, rid[life_taker[life[last]]] if len(last) else 0, -1)
        shared_rows: dict[int, list[int]] = {}
        dup_d = np.zeros(len(ob), np.int64)
        sh = np.flatnonzero(shared_life)
        if len(sh):
            is_last = np.zeros(len(ob), bool)
            is_last[last] = True
            row_of = np.full(len(ob), -1, np.int64)
            row_of[last] = np.arange(len(last))
            holders: dict[int, list[int]] = {}
            shared_tok: dict[int, int] = {}
            d_sorted, tok_sorted = o_d[ob], o_tok[ob]
            for i, b, d, rb, ra, q, tok, lst in zip(
                sh.tolist(),
                b_sorted[sh].tolist(),
                d_sorted[sh].tolist(),
                ref_before[sh].tolist(),
                ref_after[sh].tolist(),
                seq_sorted[sh].tolist(),
                tok_sorted[sh].tolist(),
                is_last[sh].tolist(),
                strict=True,
            ):
                hs = holders.setdefault(b, [])
                if d > 0:
                    if rb == 1:
                        shared_tok[b] = tok
                        dup_d[i] = tok
                    elif rb >= 2:
                        dup_d[i] = shared_tok[b]
                    hs.append(q)
                else:
                    if ra >= 1:
                        dup_d[i] = -shared_tok[b]
                    hs.remove(q)
                if lst and ra >= 1:
                    r = int(row_of[i])
                    got = sorted({int(rid[x]) for x in hs}) if ra >= 2 else [int(rid[hs[0]])]
                    shared_rows[r] = got
                    h_count[r] = len(got)
        # Block counts per state: each row moves its block from its previous row's state (the initial
        # one: free, block 0 vLLM's null block) to its own; rows are in block order here.
        first_of_block = np.ones(len(last), bool)
        first_of_block[1:] = r_block[1:] != r_block[:-1]
        prev = np.empty(len(last), np.int64)
        prev[1:] = state[:-1]
        prev[first_of_block] = np.where(r_block[first_of_block] == 0, 4, 0)
        s_total = len(self.upto)
        bcount = np.zeros((s_total, len(BLOCK_STATES)), np.int64)
        bcount[0, 0], bcount[0, 4] = nb - 1, 1
        np.add.at(bcount, (r_step, prev), -1)
        np.add.at(bcount, (r_step, state), 1)
        self.bcount = np.cumsum(bcount, axis=0)
        # Rows in step order (stable: by block within a step), after the initial ones (state 0).
        ro = _order(r_step)
        h_count, h_first = h_count[ro], h_first[ro]
        offsets = np.zeros(nb + len(ro) + 1, np.int64)
        np.cumsum(h_count, out=offsets[nb + 1 :])
        flat = np.full(int(offsets[-1]), -1, np.int64)
        one = h_count == 1
        flat[offsets[nb:-1][one]] = h_first[one]
        if shared_rows:
            pos_in_out = np.empty(len(ro), np.int64)
            pos_in_out[ro] = np.arange(len(ro))
            for r, got in shared_rows.items():
                at = int(offsets[nb + pos_in_out[r]])
                flat[at : at + len(got)] = got
        init = np.arange(nb, dtype=np.int64)
        none = np.full(nb, -1, np.int64)
        self.rows = BlockRows(
            step=np.concatenate((np.zeros(nb, np.int64), r_step[ro])),
            block=np.concatenate((init, r_block[ro])),
            state=np.concatenate((np.where(init == 0, 4, 0), state[ro])),
            ref=np.concatenate((np.zeros(nb, np.int64), r_ref[ro])),
            key_label=np.concatenate((none, r_label[ro])),
            key_index=np.concatenate((none, r_index[ro])),
            holders_offsets=offsets,
            holders=flat,
        )
        # Held blocks and shared tokens over time: prefix sums of their changes per event.
        self._held = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(ev_sorted, take0.astype(np.int64) - drop0, minlength=n), out=self._held[1:])
        self._dup = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(ev_sorted, dup_d, minlength=n).astype(np.int64), out=self._dup[1:])

    def held_at(self, upto: np.ndarray) -> np.ndarray:
        """Blocks held after the first `upto[i]` events."""
        return self._held[upto]

    def dup_at(self, upto: np.ndarray) -> np.ndarray:
        """Tokens stored once but held by several tables after the first `upto[i]` events."""
        return self._dup[upto]


def _seq_rows(
    inp: EngineInput,
    sp: _SeqPass,
    seq: np.ndarray,
    st: np.ndarray,
    num_steps: int,
    bp: _BlockPass | None,
) -> SeqRows:
    """Sequence rows: one at each state where an event touches the sequence, its tokens change rate or
    it arrives; tokens from the sequences' pass (between its rows a sequence's tokens follow its rates),
    tables from the block pass (`keep` = the shortest its table was during the state)."""
    width = num_steps + 2
    n = len(seq)
    # Event groups: (sequence, state) with the table's length after them and the shortest during them.
    order = bp.order if bp is not None else np.argsort(seq, kind="stable")
    gk = seq[order] * width + st[order]
    gs = _group_starts(gk)
    g_key = gk[gs]
    if bp is not None:
        depth_o, delta_o = bp.depth[order], bp.delta[order]
        kind_o = bp.kind[order]
        low = depth_o - ((kind_o == FREE) | (kind_o == COW_COPY))
        g_keep = np.minimum.reduceat(low, gs) if n else np.zeros(0, np.int64)
        g_last = np.r_[gs[1:], n] - 1
        g_depth = depth_o[g_last] + delta_o[g_last]
    else:
        g_keep = g_depth = np.zeros(len(gs), np.int64)
    # Token rows from the sequences' pass: arrivals first, then the pass's rows (a later one wins).
    arr = np.array(sp.arrivals, np.int64).reshape(-1, 2)
    prow = np.array(sp.rows, np.int64).reshape(-1, 7)
    p_k = np.r_[arr[:, 0], prow[:, 0]]
    p_seq = np.r_[arr[:, 1], prow[:, 1]]
    p_key = p_seq * width + p_k
    p_vals = (
        np.r_[np.zeros((len(arr), 5), np.int64), prow[:, 2:]] if len(prow) or len(arr) else np.zeros((0, 5))
    )
    po = np.argsort(p_key, kind="stable")
    p_key_s = p_key[po]
    keys = np.unique(np.concatenate((g_key, p_key)))
    k_seq, k_step = keys // width, keys % width
    i = np.searchsorted(p_key_s, keys, "right") - 1
    if (i < 0).any() or (p_key_s[np.maximum(i, 0)] // width != k_seq).any():
        raise InternalError("a sequence has events before it arrives")
    src = po[i]
    status, c, rc, g, rg = (p_vals[src, j] for j in range(5))
    d = k_step - p_k[src]
    c, g = c + rc * d, g + rg * d
    # Tables: the latest event group at or before the row.
    j = np.searchsorted(g_key, keys, "right") - 1
    has = (j >= 0) & (g_key[np.maximum(j, 0)] // width == k_seq)
    here = has & (g_key[np.maximum(j, 0)] == keys)
    depth = np.where(has, g_depth[np.maximum(j, 0)], 0)
    keep = np.where(here, g_keep[np.maximum(j, 0)], depth)
    out = _order(k_step, k_seq)
    row_of = np.empty(len(keys), np.int64)
    row_of[out] = np.arange(len(keys))
    if bp is not None and len(bp.a_ev):
        # A row's tail: the slots its state filled and that are still held at its end.
        a_st = st[bp.a_ev]
        end_st = np.where(bp.a_end < n, st[np.minimum(bp.a_end, n - 1)], num_steps + 1)
        alive = end_st > a_st
        t_key = bp.a_seq[alive] * width + a_st[alive]
        t_row = row_of[np.searchsorted(keys, t_key)]
        to = _order(t_row, bp.a_pos[alive])
        tail = bp.a_block[alive][to]
        t_count = np.bincount(t_row, minlength=len(keys))
    else:
        tail = np.zeros(0, np.int64)
        t_count = np.zeros(len(keys), np.int64)
    if (t_count != (depth - keep)[out]).any():
        raise InternalError("the log's block tables do not replay: a table's tail does not add up")
    rid, sample = inp.request_id.astype(np.int64), inp.sample.astype(np.int64)
    q = k_seq[out]
    return SeqRows(
        step=k_step[out],
        seq=q,
        request_id=rid[q],
        sample=np.broadcast_to(sample, (len(inp),))[q],
        status=status[out],
        computed=c[out],
        computed_rate=rc[out],
        generated=g[out],
        generated_rate=rg[out],
        keep=keep[out],
        tail_offsets=np.r_[0, np.cumsum(t_count)],
        tail=tail,
    )


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
