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
import gc
import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from kvsim.config import SimConfig
from kvsim.engine_input import EngineInput, prepare
from kvsim.errors import InternalError
from kvsim.reference.contiguous import Buddy, FirstFit
from kvsim.reference.engine import EVENT
from kvsim.simulate import SimResult, simulate

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
    table: list[int] = field(default_factory=list)
    free_c: int = 0  # tokens its table held when it was released (the frees that follow read it)
    region: tuple[int, int] | None = None
    version: int = 0  # bumped at each change: invalidates a pending prefill-to-decode transition

    def at(self, k: int) -> tuple[int, int]:
        d = k - self.base
        return self.c + self.rc * d, self.g + self.rg * d


@dataclass
class Track:
    """One replayed run: rows (see the module docstring), metric columns (one value per state 0..S) and
    the run itself."""

    config: SimConfig
    result: SimResult
    inp: EngineInput
    num_steps: int
    block_rows: list[list[Any]]
    seq_rows: list[list[Any]]
    region_rows: list[list[Any]]
    metrics: dict[str, list[int]]
    # Per step j (0..S-1): tokens allocated and stored after step j's allocation, before its finishes:
    # what the engine's time series records, for the tests to compare with.
    during: dict[str, list[int]]

    @property
    def paged(self) -> bool:
        return not self.config.is_contiguous


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector: a replay allocates hundreds of thousands of small lists (rows)
    and no cycles, and the collector's passes over them cost more than the replay itself. Re-enabled on
    exit if it was on at entry (the first of concurrent callers re-enables it)."""
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


def _key_namer(inp: EngineInput, names: dict[int, str], request_names: list[str], bs: int):
    """Readable prefix keys: block i of a sequence is named after the named segment its last token lies
    in (`sys-coding-agent-v1:block-1`), else after its request (`req-2:block-2`). Returns the namer and,
    per sequence without named content, the prefix its keys share (`req-2:block-`; None where named)."""
    cache: dict[tuple[int, int], str] = {}
    rows = inp.request_row.tolist()
    if names:
        ids = inp.segment_id.tolist()
        offsets = inp.seg_offsets.tolist()
        named = [any(ids[j] in names for j in range(offsets[q], offsets[q + 1])) for q in range(len(inp))]
    else:
        named = [False] * len(inp)
    plain = [None if named[q] else f"{request_names[rows[q]]}:block-" for q in range(len(inp))]

    def name(seq: int, i: int) -> str:
        prefix = plain[seq]
        if prefix is not None:  # no named content: the request's name
            return prefix + str(i)
        key = (seq, i)
        got = cache.get(key)
        if got is not None:
            return got
        lo, hi = int(inp.seg_offsets[seq]), int(inp.seg_offsets[seq + 1])
        end = (i + 1) * bs - 1  # the block's last token
        pos = 0
        label = None
        for j in range(lo, hi):
            n = int(inp.segment_len[j])
            if end < pos + n:
                label = names.get(int(inp.segment_id[j]))
                break
            pos += n
        if label is None:
            label = request_names[int(inp.request_row[seq])]
        got = f"{label}:block-{i}"
        cache[key] = got
        return got

    return name, plain


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
    caching = config.enable_prefix_caching
    n_req = len(workload)
    request_names = request_names or [f"req-{i + 1}" for i in range(n_req)]
    key_name, key_prefix = _key_namer(inp, names or {}, request_names, bs)
    ev = res.raw.events
    e_step, e_kind, e_seq = ev["step"].tolist(), ev["kind"].tolist(), ev["seq"].tolist()
    e_block, e_count = ev["block"].tolist(), ev["count"].tolist()
    free_run = _free_runs(ev)
    num_steps = int(res.summary["num_steps"])
    seqs = [
        _Seq(
            i,
            int(inp.request_id[i]),
            int(inp.sample[i]),
            int(inp.prompt_len[i]),
            int(inp.target[i]),
            int(inp.arrival_ps[i]),
        )
        for i in range(len(inp))
    ]
    # Blocks (paged): reference counts, holders, whether a free block still carries its key.
    nb = config.num_blocks or 0
    ref = [0] * nb
    holders: list[list[int]] = [[] for _ in range(nb)]
    keyed: list[str | None] = [None] * nb  # free blocks: their key's readable name, if they keep one
    shared_tok = [0] * nb  # tokens a shared block holds (its holders agree on them)
    # A held block's readable key (its index is equal in all tables holding it: sharing is positional).
    bkey: list[str | None] = [None] * nb
    space: FirstFit | Buddy | None = None
    if not paged:
        space = (Buddy if config.placement == "buddy" else FirstFit)(config.capacity_tokens)
    block_rows: list[list[Any]] = []
    seq_rows: list[list[Any]] = []
    region_rows: list[list[Any]] = []
    if paged:
        block_rows.append([0, 0, "null", 0, None, []])
        block_rows.extend([0, b, "free", 0, None, []] for b in range(1, nb))
    held = 0
    logical = 0  # computed tokens of running sequences (L)
    dup = 0  # tokens stored once but held by several tables
    reserved = 0  # contiguous: region slots of running sequences
    states: list[tuple[int, ...]] = []  # one row of METRIC_COLUMNS per state
    during: dict[str, list[int]] = {"allocated_tokens": [], "stored_tokens": [], "external_tokens": []}
    counts = dict.fromkeys((*STATUSES, "unforked"), 0)
    fork_child = (inp.fork_parent >= 0).tolist()
    for s in seqs:
        s.status = "unforked" if fork_child[s.idx] else "waiting"
        counts[s.status] += 1
    # A sequence is in the queue at state k once its arrival is at or before step k's start.
    step_ps = res.raw.timeseries["time_ps"].tolist()
    arrivals_sorted = sorted(s.arrival_ps for s in seqs if not fork_child[s.idx])
    dirty_blocks: dict[int, None] = {}
    dirty_seqs: dict[int, None] = {}
    transitions: list[tuple[int, int, int]] = []  # heap of (state, seq, version): a prefill completes
    first_sample: dict[int, int] = {}  # request id -> its group's first sample swapped in this step
    last_release: dict[int, int] = {}  # seq -> the release (finish, preempt, swap-out) its frees follow

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
                dirty_seqs[i] = None

    rid = inp.request_id.tolist()  # seq -> request id

    def take(b: int, s: _Seq, tok: int, i: int) -> None:
        """`s` takes a reference to block `b` at its table's index `i`; the block holds `tok` tokens."""
        nonlocal held, dup
        if ref[b] == 0:
            held += 1
            keyed[b] = None
            if caching:
                bkey[b] = key_name(s.idx, i)
        elif ref[b] == 1:
            shared_tok[b] = tok
            dup += tok
        else:
            dup += shared_tok[b]
        ref[b] += 1
        holders[b].append(s.idx)
        dirty_blocks[b] = None

    def drop(b: int, s: _Seq) -> None:
        nonlocal held, dup
        ref[b] -= 1
        holders[b].remove(s.idx)
        if ref[b] == 0:
            held -= 1
        else:
            dup -= shared_tok[b]
        dirty_blocks[b] = None

    def release_block(s: _Seq, b: int) -> None:
        """`s` frees its last block `b` (`drop`, written out: the second commonest event)."""
        nonlocal held, dup
        table = s.table
        i = len(table) - 1
        if i < 0 or table[i] != b:
            raise InternalError(f"free of block {b} by seq {s.idx}: not its last block {table}")
        r = ref[b] - 1
        ref[b] = r
        holders[b].remove(s.idx)
        if r == 0:
            held -= 1
            if caching and s.free_c >= (i + 1) * bs:
                keyed[b] = bkey[b]  # a full block keeps its key while free: cached
        else:
            dup -= shared_tok[b]
        dirty_blocks[b] = None
        table.pop()
        dirty_seqs[s.idx] = None

    def release(s: _Seq, at: int) -> int:
        """The FREE event at `at` and the run of FREEs by `s` that follows it (a release frees a table's
        blocks last first): when the run's blocks are the table's tail, last first, they are released
        in one loop, as `release_block` would one by one. Returns the events consumed."""
        nonlocal held, dup
        m = free_run[at]
        table = s.table
        n = len(table)
        if m == 1 or m > n or e_block[at : at + m] != table[n - m :][::-1]:
            release_block(s, e_block[at])
            return 1
        idx = s.idx
        full = s.free_c if caching else -1
        for i in range(n - 1, n - m - 1, -1):
            b = table[i]
            r = ref[b] - 1
            ref[b] = r
            holders[b].remove(idx)
            if r == 0:
                held -= 1
                if full >= (i + 1) * bs:
                    keyed[b] = bkey[b]  # a full block keeps its key while free: cached
            else:
                dup -= shared_tok[b]
            dirty_blocks[b] = None
        del table[n - m :]
        dirty_seqs[idx] = None
        return m

    ext = [0, False]  # the space's external fragmentation, and whether a region changed since

    def external() -> int:
        if space is None:
            return 0
        if ext[1]:
            ext[0], ext[1] = space.external_fragmentation(), False
        return int(ext[0])

    def free_region(s: _Seq, k: int) -> None:
        nonlocal reserved
        assert s.region is not None
        assert space is not None
        space.free(*s.region)
        ext[1] = True
        reserved -= s.region[1]
        region_rows.append([k, s.request_id, None, s.region[1], s.sample])
        s.region = None

    def flush_and_record(k: int) -> None:
        for b in dirty_blocks:  # a block's row: its state, ref count, key and holders' request ids
            r = ref[b]
            if r == 1:
                state = "private"
                block_rows.append([k, b, state, 1, bkey[b], [rid[holders[b][0]]]])
            elif r == 0:
                key = keyed[b]
                state = "free" if key is None else "cached"
                block_rows.append([k, b, state, 0, key, []])
            else:
                state = "shared"
                block_rows.append([k, b, state, r, bkey[b], sorted({rid[x] for x in holders[b]})])
            if bstate[b] != state:
                bcount[bstate[b]] -= 1
                bstate[b] = state
                bcount[state] += 1
        dirty_blocks.clear()
        for i in dirty_seqs:
            s = seqs[i]
            d = k - s.base
            seq_rows.append(
                [k, s.request_id, s.sample, s.status, s.c + s.rc * d, s.rc, s.g + s.rg * d, s.rg, s.table[:]]
            )
        dirty_seqs.clear()
        arrived = (
            bisect.bisect_right(arrivals_sorted, step_ps[k]) if k < len(step_ps) else len(arrivals_sorted)
        )
        states.append(
            (
                held * bs if paged else reserved,
                logical - dup if paged else logical,
                dup,
                reserved,
                external(),
                counts["running"],
                counts["waiting"] + counts["preempted"] - (len(arrivals_sorted) - arrived),
                counts["swapped"],
                counts["finished"],
                counts["rejected"],
                bcount["free"],
                bcount["cached"],
                bcount["shared"],
                bcount["private"],
                pos,
                step_ps[k] if k < len(step_ps) else makespan,
            )
        )

    # Arrival rows: a sequence appears (waiting) at the first state whose step starts at or after it.
    for s in seqs:
        if not fork_child[s.idx]:
            k = bisect.bisect_left(step_ps, s.arrival_ps)
            seq_rows.append([min(k, num_steps), s.request_id, s.sample, "waiting", 0, 0, 0, 0, []])

    n_ev = len(e_kind)
    pos = 0
    bstate = ["null"] + ["free"] * (nb - 1) if paged else []
    bcount = dict.fromkeys(BLOCK_STATES, 0)
    if paged:
        bcount["free"], bcount["null"] = nb - 1, 1
    makespan = int(res.raw.counters["makespan_ps"])

    def post_events(k: int) -> None:
        """Events carrying step count k that follow step k-1's sampling (a finish and its frees, a fork,
        a reject): they belong to state k."""
        nonlocal pos, logical
        while pos < n_ev and e_step[pos] == k:
            kind, s = e_kind[pos], seqs[e_seq[pos]]
            if kind == FREE and last_release.get(s.idx) == FINISH:
                pos += release(s, pos) - 1
            elif kind == FINISH:
                materialize(s, k)
                logical -= s.c
                set_status(s, "finished")
                s.rc = s.rg = 0
                s.free_c = s.c
                last_release[s.idx] = FINISH
                if s.region is not None:
                    free_region(s, k)
            elif kind == FORK:
                parent = seqs[int(inp.fork_parent[s.idx])]
                pc, _ = parent.at(k)
                s.c, s.g, s.base = pc, 1, k
                s.version += 1
                set_status(s, "running")
                logical += s.c
                for i, b in enumerate(parent.table):
                    take(b, s, min(bs, pc - i * bs), i)
                    s.table.append(b)
                set_rates(s, k)
            elif kind == REJECT:
                set_status(s, "rejected")
            else:
                return  # the next step's scheduling
            dirty_seqs[s.idx] = None
            pos += 1

    post_events(0)
    flush_and_record(0)

    def step_events(j: int) -> tuple[dict[int, None], dict[int, int]]:
        """Step j's scheduling events (admissions, allocations, preemptions, `schedule` rows)."""
        nonlocal pos, logical, reserved, held
        listed: dict[int, int] = {}
        touched: dict[int, None] = {}
        while pos < n_ev and e_step[pos] == j:
            kind, i, b, cnt = e_kind[pos], e_seq[pos], e_block[pos], e_count[pos]
            s = seqs[i]
            if i not in touched:
                touched[i] = None
                d = j - s.base  # materialize(s, j), written out
                s.c += s.rc * d
                s.g += s.rg * d
                s.base = j
                s.version += 1
            pos += 1
            if kind == ALLOCATE:  # the commonest event: `take` of a free block, written out
                if ref[b]:
                    raise InternalError(f"step {j}: block {b} allocated with ref_cnt {ref[b]}")
                held += 1
                keyed[b] = None
                if caching:
                    prefix = key_prefix[i]
                    bkey[b] = prefix + str(len(s.table)) if prefix is not None else key_name(i, len(s.table))
                ref[b] = 1
                holders[b].append(i)
                dirty_blocks[b] = None
                s.table.append(b)
            elif kind == FREE:
                pos += release(s, pos - 1) - 1
            elif kind == EVICT:
                keyed[b] = None
            elif kind == SCHEDULE:
                listed[i] = cnt
            elif kind == ADMIT:
                set_status(s, "running")
                s.c = 0
                if not paged:
                    assert space is not None
                    got = space.allocate(cnt)
                    if got != (b, cnt):
                        raise InternalError(f"seq {i} at step {j}: region {(b, cnt)} logged, {got} replayed")
                    s.region = got
                    ext[1] = True
                    reserved += cnt
                    region_rows.append([j + 1, s.request_id, b, cnt, s.sample])
            elif kind == PREFIX_HIT:
                take(b, s, bs, len(s.table))
                s.table.append(b)
                s.c += bs
                logical += bs
            elif kind == COW_COPY:
                drop(s.table[-1], s)
                take(b, s, 0, len(s.table) - 1)
                s.table[-1] = b
            elif kind == SWAP_IN:
                set_status(s, "running")
                logical += s.c
                if cnt > 0:  # a group member: it shares the first sample's leading blocks
                    first = seqs[first_sample[s.request_id]]
                    for x in range(cnt):
                        take(first.table[x], s, min(bs, s.c - x * bs), x)
                        s.table.append(first.table[x])
                else:
                    first_sample[s.request_id] = i
            elif kind in (PREEMPT, SWAP_OUT):
                logical -= s.c
                s.free_c = s.c
                last_release[i] = kind
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
        return touched, listed

    for j in range(num_steps):
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
            dirty_seqs[i] = None
        during["allocated_tokens"].append(held * bs if paged else reserved)
        during["stored_tokens"].append(logical - dup if paged else logical)
        during["external_tokens"].append(external())
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
            dirty_seqs[i] = None
        post_events(num_steps)
        states.pop()
        flush_and_record(num_steps)
    if pos != n_ev:
        raise InternalError(f"replay stopped at event {pos} of {n_ev}")
    metrics = {
        name: list(column) for name, column in zip(KEPT_COLUMNS, zip(*states, strict=True), strict=True)
    }
    # The cumulative counts at state k: the events of their kinds among the first event_upto[k].
    upto = np.array(metrics["event_upto"], np.int64)
    kinds = ev["kind"]
    for name, counted in CUMULATIVE_KINDS.items():
        so_far = np.concatenate(([0], np.cumsum(np.isin(kinds, counted))))
        metrics[name] = so_far[upto].tolist()
    metrics = {name: metrics[name] for name in METRIC_COLUMNS}
    seq_rows.sort(key=itemgetter(0))  # stable: at one state, the replay's row comes after the arrival's
    region_rows.sort(key=itemgetter(0))
    return Track(config, res, inp, num_steps, block_rows, seq_rows, region_rows, metrics, during)


def _free_runs(ev: dict[str, Any]) -> list[int]:
    """Per event: how many consecutive FREE events by the same sequence in the same step start there
    (1 for any other event)."""
    kind, seq, step = ev["kind"], ev["seq"], ev["step"]
    n = len(kind)
    if n == 0:
        return []
    free = kind == FREE
    # cont[i]: event i + 1 continues event i's run.
    cont = free[1:] & free[:-1] & (seq[1:] == seq[:-1]) & (step[1:] == step[:-1])
    idx = np.arange(n)
    end = np.where(np.append(cont, False), n, idx)  # a run's last event: its own index
    end = np.minimum.accumulate(end[::-1])[::-1]
    return np.where(free, end - idx + 1, 1).tolist()


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
