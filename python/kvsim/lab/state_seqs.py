"""The sequences' side of the replay in `kvsim.lab.state` (DESIGN.md §Lab): `_SeqPass`, in Python over the
events that are not about blocks (admit, schedule, prefix-hit, preempt, swap, finish, fork, reject, and the
CPU tier's: a few per request), step by step. `state.replay` runs it first; the blocks' pass
(`kvsim.lab.state_blocks`, or `kvsim.lab.state_hybrid` for a hybrid model) reads its tokens. The event
codes it and `kvsim.lab.state` read, and the sequences' statuses, are defined here; `kvsim.lab.state`
re-exports `STATUSES`, the path the bundle imports.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

from kvsim.engine.engine_input import EngineInput
from kvsim.engine.simulate import SimResult
from kvsim.errors import InternalError
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
# `loading`: held by the CPU tier while its load is in flight (its blocks allocated, neither running nor
# computing); `loaded`: its load seen complete, held until the scheduler resumes it (DESIGN.md §CPU tier).
STATUSES = ("waiting", "running", "swapped", "preempted", "finished", "rejected", "loading", "loaded")


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
        load_ends: dict[int, int] | None = None,
    ) -> None:
        # A hybrid model's admissions: event index -> the tokens its prefix hit covered (its prefix-hit
        # rows are per group, and a window's hit starts past the tokens it skips); with a CPU tier, its
        # `load` rows' -> the tokens computed once it lands (the row counts chunks of every group).
        self.hits = hits
        self.load_ends = load_ends
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

        # The sequences that finished at the current state (asynchronous scheduling schedules them once
        # more: `resume`).
        finishers: list[int] = []

        def running(i: int) -> bool:
            return seqs[i].status == "running"

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
                    if config.async_scheduling:
                        finishers.append(s.idx)
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
            elif kind == PREEMPT and s.status == "finished":
                # Asynchronous scheduling: a finisher still in the running list preempted for the tail
                # (DESIGN.md §Engine, "Preempting a finisher"): its blocks freed, it stays finished.
                aux[e_idx[pos]] = s.c
                if i in finishers:
                    finishers.remove(i)
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
                if self.load_ends is not None:
                    end = self.load_ends[e_idx[pos]]
                else:
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
            # (under asynchronous scheduling a finisher of the step before is still scheduled: passed
            # over, a row with count 0, or given a token it discards, in the batch without a row)
            m = batch[j] - counts["running"] + sum(1 for i, v in listed.items() if v == 0 and running(i))
            m -= sum(1 for i in finishers if i not in listed)
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
            # Step j computes a token for every running sequence, or its listed count (a finisher's row,
            # under asynchronous scheduling, counts nothing: its tokens left `logical` at its finish).
            logical += counts["running"] + sum(v - 1 for i, v in listed.items() if running(i))
            finishers.clear()
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
