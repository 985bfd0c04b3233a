"""The blocks' side of the replay in `kvsim.lab.state` for a model served by vLLM's hybrid KV-cache manager
(DESIGN.md §Hybrid attention, §Lab): one block table per KV-cache group, the null block where a window's
tokens were skipped, keys only where vLLM's sparse retention puts them.

The event log says which blocks each request took, hit, freed and left a window with (`count`: the
group), but not everything the page shows: how many tokens a prefix hit covered (a sliding-window group
hits from the right, so its hit blocks start past the null blocks of the tokens it skips) and which
freed blocks kept a key (sliding-window groups key only the blocks a later request could hit, ending at
the prompt's replay boundary and at a shared prefix's junction, which the log does not name). So the pass
drives the reference `HybridKVCacheManager` (the executable spec of the engine's manager) with the log's
decisions, in the log's order: the requests the log admits, grows, preempts and finishes, with the tokens
the log schedules; the manager's answers (hit blocks, allocated block ids, evictions, blocks leaving a
window, frees) must equal the log's rows one by one, else the pass stops with `InternalError`, as the
contiguous replay does when a logged placement differs. Nothing is decided here: which requests run, when
and with how many tokens is read from the log; the manager only says which block ids that gives, exactly
as the engine's did, and what it kept cached.

With a CPU tier (DESIGN.md §CPU tier, "A hybrid model", "A Mamba group"; §Lab) the pass reads the tier's rows
too: a load's admission (`admit` ... `cpu-hit`, `load`) takes its GPU hits and allocates its blocks for the
hit and loaded tokens (a state group's: one fresh block at the load's end, the state it reads), keyed when
its `load-done` lands (`cache_loaded`: a window's and a state's only where their group keeps keys); the held
request resumes in the held queue's order as the step's batch says (a resume has no row of its own), its
chunk reserving a state's prefill checkpoint as any prefill chunk does; a finishing request's windows are
freed first (`window` rows after its `finish`); stores (a state's hand-off alone, as any) and the tier's
evictions leave the GPU pool as it is. What a state keyed in this step or a landed load's states adopted
decide (whether an admission waits a step) is the log's: the pass admits what the log admits. Under
`kv_offloading_hit_junction` (vLLM 0.34.0's rule) the tier's lookup may raise a request's junction past the
GPU lookup's, which decides the keys its windows and states keep: the pass takes the junction from the
`admit` row, which carries it then, as the engine's manager took it.

The pass gives rows (`HybridRows`); `kvsim.lab.state_hybrid_rows` turns them into the columns the lab keeps
for every track (`BlockRows` with each block's group, `SeqRows` with a table per group) and measures the
token slots the groups' partly filled blocks leave empty.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvsim.engine.engine_input import EngineInput
from kvsim.errors import InternalError
from kvsim.model.config import SimConfig
from kvsim.reference.engine import EVENT
from kvsim.reference.kv_groups import NULL, HybridKVCacheManager

ADMIT, ALLOCATE, PREFIX_HIT, EVICT = EVENT["admit"], EVENT["allocate"], EVENT["prefix-hit"], EVENT["evict"]
FREE, PREEMPT, FINISH, REJECT = EVENT["free"], EVENT["preempt"], EVENT["finish"], EVENT["reject"]
SCHEDULE, WINDOW = EVENT["schedule"], EVENT["window"]
STORE, LOAD, CPU_HIT, CPU_EVICT = EVENT["store"], EVENT["load"], EVENT["cpu-hit"], EVENT["cpu-evict"]
STORE_DONE, LOAD_DONE = EVENT["store-done"], EVENT["load-done"]
# The CPU tier's rows that leave the GPU pool as it is (the tier's own: `state.tier_columns`).
TIER_ONLY = (STORE, CPU_EVICT, STORE_DONE)
NAMES = {code: kind for kind, code in EVENT.items()}
# Block states (as `state_blocks.BLOCK_STATES`).
FREE_S, PRIVATE_S, SHARED_S, CACHED_S, NULL_S = range(5)
# LOADING: held by the CPU tier while its load is in flight; LOADED: landed, held until it resumes.
WAITING, RUNNING, PREEMPTED, DONE, LOADING, LOADED = range(6)


@dataclass
class HybridRows:
    """What the pass gives: block rows (with each block's group), table snapshots, per-state counts, and
    per admission the tokens its prefix hit covered.

    Attributes:
        block_rows: `(state, block, block state, ref_cnt, key record or -1, request ids, group or -1)`.
        key_records: `(sequence, table position, group)` of each key a block received.
        table_rows: `(state, sequence, keeps, tails)`: from that state on, a sequence's table in group g
            is the first `keeps[g]` blocks of its table before, then `tails[g]` (block 0 where a window's
            tokens were skipped).
        hits: admission event index -> the tokens its prefix hit covered (on the GPU).
        load_ends: a CPU-tier `load` row's event index -> the tokens its request holds computed once it
            lands (its GPU hit and the tokens loaded: not a chunk boundary where the load stops one token
            short of the sequence).
        held, shared_saved, group_blocks, block_counts: per state 0..S: blocks held, tokens a shared block
            stores once for its extra holders (Σ (ref_cnt − 1) × block size), blocks held per group, and
            blocks per block state.
        held_during: per step j: blocks held after step j's allocation, before its finishes (what the
            engine's time series measures).
    """

    block_rows: list[tuple[int, int, int, int, int, tuple[int, ...], int]]
    key_records: list[tuple[int, int, int]]
    table_rows: list[tuple[int, int, tuple[int, ...], tuple[tuple[int, ...], ...]]]
    hits: dict[int, int]
    load_ends: dict[int, int]
    held: np.ndarray
    shared_saved: np.ndarray
    group_blocks: np.ndarray
    block_counts: np.ndarray
    held_during: np.ndarray


class _HybridPass:
    """The replay of a hybrid run's blocks by the reference manager, driven by the log (module docstring)."""

    def __init__(
        self,
        inp: EngineInput,
        config: SimConfig,
        step: np.ndarray,
        kind: np.ndarray,
        seq: np.ndarray,
        block: np.ndarray,
        count: np.ndarray,
        post: np.ndarray,
        num_steps: int,
        batch: list[int] | None = None,
    ) -> None:
        self.inp, self.config = inp, config
        self.groups = list(config.kv_groups)
        layout = config.pool.layout
        assert config.num_blocks is not None, "a config sizes its pool when it is made"
        self.num_blocks = config.num_blocks
        self.kv = HybridKVCacheManager(
            config.num_blocks,
            self.groups,
            layout.scheduler_block_size,
            config.enable_prefix_caching,
            config.free_order,
            config.prefix_cache_retention_interval,
        )
        self.kv.pool.evicted = []
        self.sched_bs = layout.scheduler_block_size
        self.caching = config.enable_prefix_caching
        self.step_, self.kind, self.seq = step.tolist(), kind.tolist(), seq.tolist()
        self.block, self.count, self.post = block.tolist(), count.tolist(), post.tolist()
        self.num_steps = num_steps
        # A CPU tier (DESIGN.md §CPU tier, "A hybrid model"): each step's batch (the time series': a
        # resume has no row of its own), the held queue in the order loads were admitted, those landed.
        self.tier = bool(config.kv_offloading_chunks)
        self.batch = batch or []
        self.held_order: list[int] = []
        self.landed: set[int] = set()
        self.load_ends: dict[int, int] = {}
        n = len(inp)
        self.prompt = inp.prompt_len.tolist()
        self.rid = inp.request_id.astype(np.int64).tolist()
        self.status = [WAITING] * n
        self.c = [0] * n  # computed tokens at `base`
        self.g = [0] * n  # generated tokens at `base`
        self.base = [0] * n
        self.decode = [False] * n  # while running: one computed and one generated token per step
        self.serial = [0] * n  # admission order: the running list's order
        self.version = [0] * n
        self.next_serial = 0
        self.running: set[int] = set()
        self.active: set[int] = set()  # running sequences not decoding (prefill chunks): advanced each step
        self.due: list[tuple[int, int, int, int]] = []  # (step, serial, seq, version): a decode step keys
        # Blocks: holders (sequence indices), the group of the last take, its key record.
        self.holders: dict[int, list[int]] = {}
        self.group_of = [-1] * self.num_blocks
        self.key_of = [-1] * self.num_blocks
        self.shown: list[tuple[int, int, int, tuple[int, ...], int] | None] = [None] * self.num_blocks
        self.registered: list[int] = []
        original = self.kv.pool.register

        def register(block_id: int, key: int) -> None:
            original(block_id, key)
            self.registered.append(block_id)

        self.kv.pool.register = register  # type: ignore[method-assign]
        self.touched_blocks: set[int] = set()
        # Sequences whose tables changed since the last flush: per group the first position that changed.
        self.dirty: dict[int, list[int]] = {}
        self.lengths: dict[int, list[int]] = {}  # each sequence's table lengths at the last flush
        self.row_of: dict[int, int] = {}  # each sequence's latest table row
        # Outputs.
        self.block_rows: list[tuple[int, int, int, int, int, tuple[int, ...], int]] = []
        self.key_records: list[tuple[int, int, int]] = []
        self.table_rows: list[tuple[int, int, tuple[int, ...], tuple[tuple[int, ...], ...]]] = []
        self.hits: dict[int, int] = {}
        s_total = num_steps + 1
        self.held = np.zeros(s_total, np.int64)
        self.shared_saved = np.zeros(s_total, np.int64)
        self.group_blocks = np.zeros((s_total, len(self.groups)), np.int64)
        self.block_counts = np.zeros((s_total, 5), np.int64)
        self.held_during = np.zeros(num_steps, np.int64)
        # Running tallies of the rows shown (state, shared tokens, held per group).
        self.count_now = [0] * 5
        self.count_now[FREE_S], self.count_now[NULL_S] = self.num_blocks - 1, 1
        self.saved_now = 0
        self.group_now = [0] * len(self.groups)

    # -- tokens ---------------------------------------------------------------------------------------
    def at(self, s: int, k: int) -> tuple[int, int]:
        """Computed and generated tokens of `s` at state k (a decoding sequence gains one of each a step)."""
        if self.decode[s] and self.status[s] == RUNNING:
            d = k - self.base[s]
            return self.c[s] + d, self.g[s] + d
        return self.c[s], self.g[s]

    def materialize(self, s: int, k: int) -> None:
        self.c[s], self.g[s] = self.at(s, k)
        self.base[s] = k
        self.version[s] += 1

    def segments(self, s: int, g: int) -> list[tuple[int, int]]:
        segs = self.inp.segments(s)
        return [*segs, (int(self.inp.output_seg[s]), g)] if g else segs

    def schedule_due(self, s: int) -> None:
        """With caching on, the next step at which a decoding `s` completes a block of the scheduler's
        block size: its keys grow then (the step needs the manager, though the log has no row for it)."""
        if not self.caching or not (self.decode[s] and self.status[s] == RUNNING):
            return
        c0 = self.c[s]
        j = self.base[s] + (-(c0 + 1)) % self.sched_bs
        heapq.heappush(self.due, (j, self.serial[s], s, self.version[s]))

    # -- the log's rows against the manager's answers ---------------------------------------------------
    def expect(self, i: int, hi: int, kind: int, s: int, b: int, g: int, j: int) -> None:
        if i >= hi or (self.kind[i], self.seq[i], self.block[i], self.count[i]) != (kind, s, b, g):
            got = (
                "nothing"
                if i >= hi
                else f"{NAMES[self.kind[i]]} of block {self.block[i]} (group {self.count[i]}) for seq {self.seq[i]}"
            )
            raise InternalError(
                f"the hybrid replay at step {j}: the manager gives {NAMES[kind]} of block {b} (group {g}) for "
                f"seq {s}, the log has {got}"
            )

    def mark(self, s: int, g: int, position: int) -> None:
        """Group g's table of `s` changed from `position` on (a new table, or an emptied one: 0)."""
        d = self.dirty.get(s)
        if d is None:
            d = self.dirty[s] = list(self.lengths.get(s) or [0] * len(self.groups))
        if position < d[g]:
            d[g] = position

    def mark_all(self, s: int) -> None:
        for g in range(len(self.groups)):
            self.mark(s, g, 0)

    def take(self, s: int, b: int, g: int) -> None:
        self.holders.setdefault(b, []).append(s)
        self.group_of[b] = g
        self.touched_blocks.add(b)

    def release(self, s: int, b: int) -> None:
        hs = self.holders.get(b)
        if not hs or s not in hs:
            raise InternalError(f"the hybrid replay: seq {s} releases block {b} it does not hold")
        hs.remove(s)
        self.touched_blocks.add(b)

    def note_keys(self, s: int) -> None:
        """Key records for the blocks the last manager call on `s` registered (their table positions)."""
        if not self.registered:
            return
        tables = self.kv._requests[s].tables
        want = set(self.registered)
        where: dict[int, tuple[int, int]] = {}
        for g, t in enumerate(tables):
            blocks = t.blocks
            for i in range(len(blocks) - 1, -1, -1):  # keys are given to a table's newest full blocks
                if blocks[i] in want:
                    where[blocks[i]] = (g, i)
                    if len(where) == len(want):
                        break
                elif blocks[i] == NULL:
                    break
        for b in self.registered:
            g, i = where[b]
            self.key_of[b] = len(self.key_records)
            self.key_records.append((s, i, g))
            self.touched_blocks.add(b)
        self.registered.clear()

    def allocations(self, s: int, new: list[tuple[int, int]], i: int, hi: int, j: int) -> int:
        """Matches the blocks a manager call popped (an `evict` before each that lost a key) with the log."""
        evicted = self.kv.pool.evicted
        assert evicted is not None
        lost = set(evicted)
        evicted.clear()
        if new:
            tables = self.kv._requests[s].tables
            added = [0] * len(self.groups)
            for _, g in new:
                added[g] += 1
            for g, n in enumerate(added):
                if n:
                    self.mark(s, g, len(tables[g].blocks) - n)
        for b, g in new:
            if b in lost:
                self.expect(i, hi, EVICT, s, b, g, j)
                i += 1
                self.key_of[b] = -1
            self.expect(i, hi, ALLOCATE, s, b, g, j)
            i += 1
            self.take(s, b, g)
        self.note_keys(s)
        return i

    def frees(self, s: int, freed: list[tuple[int, int]], kind: int, i: int, hi: int, j: int) -> int:
        for b, g in freed:
            self.expect(i, hi, kind, s, b, g, j)
            i += 1
            self.release(s, b)
        return i

    # -- the run --------------------------------------------------------------------------------------
    def run(self) -> HybridRows:
        steps, post = self.step_, self.post
        n_ev = len(steps)
        i = 0
        for j in range(self.num_steps + 1):
            # Post events carrying step count j (finishes and their frees, rejections): state j.
            while i < n_ev and steps[i] == j and post[i]:
                i = self.post_event(i, n_ev, j)
            self.flush(j)
            hi = i
            while hi < n_ev and steps[hi] == j:
                hi += 1
            if j == self.num_steps:
                # An iteration that scheduled nothing after the last step (it preempted, then rejected).
                if hi > i:
                    self.schedule_step(j, i, hi, ran=False)
                    self.flush(j)
                i = hi
                break
            self.schedule_step(j, i, hi, ran=True)
            self.held_during[j] = self.num_blocks - 1 - self.kv.num_free_blocks
            i = hi
        if i != n_ev:
            raise InternalError(f"the hybrid replay stopped at event {i} of {n_ev}")
        return HybridRows(
            self.block_rows,
            self.key_records,
            self.table_rows,
            self.hits,
            self.load_ends,
            self.held,
            self.shared_saved,
            self.group_blocks,
            self.block_counts,
            self.held_during,
        )

    def post_event(self, i: int, hi: int, j: int) -> int:
        """An event of state j: a finish (with a CPU tier, the blocks its windows left behind freed
        first, vLLM's `_connector_finished`: `window` rows after the `finish`), a rejection, and with a
        CPU tier what a step that scheduled nothing did before step j (a load admitted, stores, a held
        request rejected) and the transfers seen complete (a load landing keys its blocks)."""
        kind, s = self.kind[i], self.seq[i]
        if kind == FINISH:
            i += 1
            self.materialize(s, j)
            self.status[s] = DONE
            self.running.discard(s)
            self.active.discard(s)
            if self.tier:
                i = self.frees(s, self.kv.remove_skipped(s, self.c[s]), WINDOW, i, hi, j)
            i = self.frees(s, self.kv.free(s), FREE, i, hi, j)
            self.mark_all(s)
            return i
        if kind == REJECT:
            self.reject(s)
            return i + 1
        if kind == LOAD_DONE:
            self.land(s)
            return i + 1
        if kind in TIER_ONLY:
            return i + 1
        if kind == ADMIT and self.tier:
            return self.admit(s, i, hi, j, 1)
        if kind == FREE and self.status[s] in (LOADING, LOADED):
            return self.release_held(s, i, hi, j)
        if self.tier and kind in (PREEMPT, WINDOW):
            # An iteration that scheduled nothing before step j (it preempted the request it would have
            # grown, and perhaps admitted loads): its rows up to the transfers it saw complete.
            end = i
            while (
                end < hi
                and self.step_[end] == j
                and self.post[end]
                and self.kind[end] not in (LOAD_DONE, STORE_DONE, FINISH)
            ):
                end += 1
            self.schedule_step(j, i, end, ran=False)
            return end
        raise InternalError(f"the hybrid replay: event {NAMES[kind]} at step {j} out of place")

    # -- the CPU tier's held requests -----------------------------------------------------------------
    def reject(self, s: int) -> None:
        """`s` rejected (a held one leaves the held queue: its blocks were freed by the rows before)."""
        self.status[s] = DONE
        if s in self.landed:
            self.landed.discard(s)
        if s in self.held_order:
            self.held_order.remove(s)

    def release_held(self, s: int, i: int, hi: int, j: int) -> int:
        """A landed held request rejected (its prompt over the step's budget, chunked prefill off): its
        blocks freed (the `free` rows at `i`), then its `reject` row."""
        i = self.frees(s, self.kv.free(s), FREE, i, hi, j)
        self.mark_all(s)
        if i >= hi or (self.kind[i], self.seq[i]) != (REJECT, s):
            raise InternalError(
                f"the hybrid replay at step {j}: held seq {s} freed its blocks but is not rejected"
            )
        self.reject(s)
        return i + 1

    def land(self, s: int) -> None:
        """A load seen complete: the request's blocks up to its computed tokens take their keys (vLLM's
        `cache_blocks` in `_update_waiting_for_remote_kv`); it is held until it resumes."""
        if self.status[s] != LOADING:
            raise InternalError(f"the hybrid replay: seq {s} lands a load it is not waiting for")
        self.kv.cache_loaded(s, self.segments(s, self.g[s]), self.c[s])
        self.note_keys(s)
        self.status[s] = LOADED
        self.landed.add(s)

    def load_row(self, i: int, hi: int, s: int) -> int | None:
        """Where the admission at `i` continues into a CPU-tier load: the index of its `cpu-hit` row after
        its `prefix-hit`, `evict` and `allocate` rows; None for an ordinary admission."""
        if not self.tier:
            return None
        x = i + 1
        kind, seq = self.kind, self.seq
        while x < hi and seq[x] == s and kind[x] in (PREFIX_HIT, ALLOCATE, EVICT):
            x += 1
        return x if x < hi and seq[x] == s and kind[x] == CPU_HIT else None

    def resume_held(self, i: int, hi: int, j: int, listed: dict[int, int], grown: set[int]) -> int:
        """The waiting phase's held requests (vLLM's `kv_holding_waiting`, before the waiting queue): in the
        held queue's order, a landed one rejected (its `free` rows, then its `reject`) or resumed, as many
        as the step's batch exceeds the running sequences it schedules (a resume has no row of its own:
        one computing a token may have none at all); a resume frees the blocks its windows left behind
        (`window` rows), then allocates its next tokens' blocks."""
        ready = [q for q in self.held_order if q in self.landed]
        if not ready:
            return i
        admitted = sum(
            1 for e in range(i, hi) if self.kind[e] == ADMIT and self.load_row(e, hi, self.seq[e]) is None
        )
        m = self.batch[j] - len(self.running) - admitted + sum(1 for v in listed.values() if v == 0)
        if m < 0 or m > len(ready):
            raise InternalError(
                f"the hybrid replay at step {j}: {m} held requests resumed of {len(ready)} landed"
            )
        resumed = 0
        for q in ready:
            if i < hi and self.seq[i] == q and self.kind[i] in (FREE, REJECT):
                i = self.release_held(q, i, hi, j) if self.kind[i] == FREE else i + 1
                if self.status[q] != DONE:
                    self.reject(q)
                continue
            if resumed == m:
                break
            resumed += 1
            c = self.c[q]
            left = self.kv.remove_skipped(q, c)
            if left:
                i = self.frees(q, left, WINDOW, i, hi, j)
            self.held_order.remove(q)
            self.landed.discard(q)
            self.status[q] = RUNNING
            self.running.add(q)
            self.serial[q] = self.next_serial
            self.next_serial += 1
            self.base[q], self.decode[q] = j, False
            self.version[q] += 1
            self.mark_all(q)
            end = c + listed.get(q, 1)
            # (a Mamba group's chunk may reserve a prefill checkpoint, as any prefill chunk does)
            checkpoint = self.kv.needs_checkpoint(c, end, self.prompt[q] + self.g[q], self.prompt[q])
            new = self.kv.grow(q, self.segments(q, self.g[q]), end, end, checkpoint)
            i = self.allocations(q, new, i, hi, j)
            grown.add(q)
        return i

    def schedule_step(self, j: int, lo: int, hi: int, ran: bool) -> None:
        """Step j's scheduling: the running phase (windows, preemptions, growth, in the running list's
        order), then the waiting phase (admissions), then the tokens the step computed."""
        kind, seq, count = self.kind, self.seq, self.count
        listed: dict[int, int] = {}
        touched: set[int] = set()
        for e in range(lo, hi):
            k, s = kind[e], seq[e]
            if k == SCHEDULE:
                listed[s] = count[e]
            elif k in (WINDOW, ALLOCATE, EVICT, PREEMPT, FREE) and self.status[s] == RUNNING:
                touched.add(s)
        work = touched | self.active
        while self.due and self.due[0][0] <= j:
            _, _, s, version = heapq.heappop(self.due)
            if version == self.version[s] and self.status[s] == RUNNING:
                work.add(s)
        work &= self.running
        i = lo
        # Requests rejected before anything this step logged (as they joined the queue, or in a waiting
        # phase after a running phase that took no block): with a CPU tier they may follow the transfers
        # seen complete before the step, so not be rows of the state before it.
        while i < hi and kind[i] == REJECT and self.status[seq[i]] in (WAITING, PREEMPTED):
            self.reject(seq[i])
            i += 1
        stopped = False
        grown: set[int] = set()
        for s in sorted(work, key=self.serial.__getitem__):
            if self.status[s] != RUNNING or listed.get(s) == 0 or (not ran and s not in touched):
                continue
            c, g = self.at(s, j)
            # Blocks leave a window only where the log says so: the manager, in the engine's state, frees
            # nothing for a sequence without `window` rows (only its keys grow: below).
            left = self.kv.remove_skipped(s, c) if s in touched else []
            if left:
                i = self.frees(s, left, WINDOW, i, hi, j)
                for x, spec in enumerate(self.groups):
                    n = sum(1 for _, gx in left if gx == x)
                    if n:
                        # A window's freed blocks sit just below its skipped tokens; a state table's
                        # (with prefix caching) anywhere below them, nulls between.
                        self.mark(s, x, 0 if spec.kind == "mamba" else spec.skipped(c) // spec.block_size - n)
            while i < hi and kind[i] == PREEMPT:
                v = seq[i]
                i = self.frees(v, self.kv.free(v), FREE, i + 1, hi, j)
                self.materialize(v, j)
                self.c[v] = 0
                self.status[v] = PREEMPTED
                self.running.discard(v)
                self.active.discard(v)
                self.mark_all(v)
                if v == s:
                    stopped = True
                    break
            if stopped:
                break
            if not ran:
                continue
            num_new = listed.get(s, 1)
            end = c + num_new
            total = self.prompt[s] + g
            checkpoint = self.kv.needs_checkpoint(c, end, total, self.prompt[s])
            new = self.kv.grow(s, self.segments(s, g), end, end, checkpoint)
            i = self.allocations(s, new, i, hi, j)
            grown.add(s)
        # The waiting phase: with a CPU tier, the held requests first.
        if ran and self.tier:
            i = self.resume_held(i, hi, j, listed, grown)
        while i < hi:
            k, s = kind[i], seq[i]
            if k == ADMIT:
                i = self.admit(s, i, hi, j, listed.get(s, 1))
                if self.status[s] == RUNNING:
                    grown.add(s)
            elif k == REJECT:
                self.reject(s)
                i += 1
            elif k == SCHEDULE or (self.tier and k in TIER_ONLY):
                i += 1
            elif k == FREE and self.status[s] in (LOADING, LOADED):
                i = self.release_held(s, i, hi, j)
            else:
                raise InternalError(
                    f"the hybrid replay at step {j}: the log has {NAMES[k]} of block {self.block[i]} for seq {s} "
                    "where the manager expects none"
                )
        if not ran:
            return
        # The tokens step j computed: every running sequence not left out, `listed` tokens or one.
        for s in grown | {s for s in listed if self.status[s] == RUNNING}:
            self.advance(s, j, listed.get(s, 1))

    def admit(self, s: int, i: int, hi: int, j: int, num_new: int) -> int:
        """An admission: the manager's lookup (its hit blocks against the log's), then its blocks. With a
        CPU tier, one whose rows go on to a `cpu-hit` and a `load` is a load's (`admit_load`)."""
        e = i
        x = self.load_row(i, hi, s)
        i += 1
        self.materialize(s, j)
        g = self.g[s]
        total = self.prompt[s] + g
        segs = self.segments(s, g)
        kv = self.kv
        hit = kv.lookup(segs, total - 1)
        self.junction_of(e, hit, j)
        if x is not None:
            return self.admit_load(s, e, i, hi, j, hit, hit.tokens + self.count[x])
        for gi, blocks in enumerate(hit.hits):
            spec = self.groups[gi]
            skipped = spec.skipped(hit.tokens) // spec.block_size
            for b in blocks[skipped:]:
                if b != NULL:
                    self.expect(i, hi, PREFIX_HIT, s, b, gi, j)
                    i += 1
                    self.take(s, b, gi)
        end = hit.tokens + num_new
        checkpoint = kv.needs_checkpoint(hit.tokens, end, total, self.prompt[s])
        new = kv.admit(s, segs, hit, end, end, self.prompt[s], checkpoint)
        i = self.allocations(s, new, i, hi, j)
        self.hits[e] = hit.tokens
        self.status[s] = RUNNING
        self.running.add(s)
        self.serial[s] = self.next_serial
        self.next_serial += 1
        self.c[s], self.base[s], self.decode[s] = hit.tokens, j, False
        self.version[s] += 1
        self.mark_all(s)
        return i

    def junction_of(self, e: int, hit: Any, j: int) -> None:
        """Under `kv_offloading_hit_junction` with a CPU tier, the admission at `e` keeps the junction its
        `admit` row carries (the GPU lookup's, or the tier's lookup's where it raised it: vLLM 0.34.0's
        rule, DESIGN.md §CPU tier), never one below the GPU lookup's."""
        logged = self.count[e]
        if not self.tier or logged < 0:
            return
        if logged < hit.junction:
            raise InternalError(
                f"the hybrid replay at step {j}: seq {self.seq[e]}'s admission logs junction {logged}, below "
                f"the GPU lookup's {hit.junction}"
            )
        hit.junction = logged

    def admit_load(self, s: int, e: int, i: int, hi: int, j: int, hit: Any, end: int) -> int:
        """A load admitted (the engine's `h_admit_load`): the request takes its GPU hits, skipping a
        window's tokens as of `end` (its hits and the tokens its `cpu-hit` row says the load brings), and
        the blocks for `end` tokens, keyed only up to its hits (the rest when the load lands); it is held,
        neither running nor computing, its tokens computed from now on as the replay shows them."""
        kv = self.kv
        for gi, blocks in enumerate(hit.hits):
            spec = self.groups[gi]
            for b in blocks[spec.skipped(end) // spec.block_size :]:
                if b != NULL:
                    self.expect(i, hi, PREFIX_HIT, s, b, gi, j)
                    i += 1
                    self.take(s, b, gi)
        segs = self.segments(s, self.g[s])
        new = kv.admit(s, segs, hit, end, hit.tokens, self.prompt[s], computed=end)
        i = self.allocations(s, new, i, hi, j)
        for kind in (CPU_HIT, LOAD):
            if i >= hi or (self.kind[i], self.seq[i]) != (kind, s):
                raise InternalError(f"the hybrid replay at step {j}: seq {s}'s load has no {NAMES[kind]} row")
            i += 1
        self.hits[e] = hit.tokens
        self.load_ends[i - 1] = end
        self.status[s] = LOADING
        self.held_order.append(s)
        self.c[s], self.base[s], self.decode[s] = end, j, False
        self.version[s] += 1
        self.mark_all(s)
        return i

    def advance(self, s: int, j: int, num_new: int) -> None:
        """`s` computed `num_new` tokens in step j (it samples one once all its tokens are computed)."""
        if self.status[s] != RUNNING:
            return
        if self.decode[s] and num_new == 1:
            if s in self.active:
                self.active.discard(s)
            self.materialize(s, j + 1)  # lazily: one of each a step
            self.schedule_due(s)
            return
        c, g = self.at(s, j)
        c += num_new
        if c == self.prompt[s] + g:
            g += 1
        self.c[s], self.g[s], self.base[s] = c, g, j + 1
        self.version[s] += 1
        self.decode[s] = c == self.prompt[s] + g - 1
        if self.decode[s]:
            self.active.discard(s)
            self.schedule_due(s)
        else:
            self.active.add(s)

    # -- rows -----------------------------------------------------------------------------------------
    def flush(self, k: int) -> None:
        """Rows for state k: the blocks and tables touched since the last flush, and the state's counts."""
        pool = self.kv.pool
        ref_cnt, key = pool._ref_cnt, pool._key  # read only (the pool's own arrays: no per-call checks)
        rid, holders_of, groups = self.rid, self.holders, self.groups
        for b in sorted(self.touched_blocks):
            if b == NULL:
                continue
            ref = ref_cnt[b]
            keyed = key[b] is not None
            if not keyed:
                self.key_of[b] = -1
            state = SHARED_S if ref >= 2 else PRIVATE_S if ref == 1 else CACHED_S if keyed else FREE_S
            g = self.group_of[b] if state != FREE_S else -1
            hs = holders_of.get(b)
            holders = (rid[hs[0]],) if hs and len(hs) == 1 else tuple(sorted({rid[x] for x in hs or ()}))
            shown = (state, ref, self.key_of[b], holders, g)
            old = self.shown[b]
            if old == shown:
                continue
            old_state, old_ref, old_g = (FREE_S, 0, -1) if old is None else (old[0], old[1], old[4])
            self.count_now[old_state] -= 1
            self.count_now[state] += 1
            bs = groups[g].block_size if g >= 0 else 0
            old_bs = groups[old_g].block_size if old_g >= 0 else 0
            self.saved_now += max(0, ref - 1) * bs - max(0, old_ref - 1) * old_bs
            if old_ref > 0:
                self.group_now[old_g] -= 1
            if ref > 0:
                self.group_now[g] += 1
            self.shown[b] = shown
            self.block_rows.append((k, b, state, ref, self.key_of[b], holders, g))
        self.touched_blocks.clear()
        for s in sorted(self.dirty):
            keeps = self.dirty[s]
            req = self.kv._requests.get(s)
            tables = [t.blocks for t in req.tables] if req is not None else [[] for _ in groups]
            lengths = [len(t) for t in tables]
            keeps = [min(m, n) for m, n in zip(keeps, lengths, strict=True)]
            tails = tuple(tuple(t[m:]) for t, m in zip(tables, keeps, strict=True))
            at = self.row_of.get(s)
            if at is not None and self.table_rows[at][0] == k:
                # A second change within one state (the final one's leftover events): one diff against
                # the table before the first.
                _, _, keeps1, tails1 = self.table_rows[at]
                merged = [
                    (m1, t1[: m2 - m1] + t2) if m2 > m1 else (m2, t2)
                    for m1, t1, m2, t2 in zip(keeps1, tails1, keeps, tails, strict=True)
                ]
                self.table_rows[at] = (k, s, tuple(m for m, _ in merged), tuple(t for _, t in merged))
            else:
                self.row_of[s] = len(self.table_rows)
                self.table_rows.append((k, s, tuple(keeps), tails))
            self.lengths[s] = lengths
        self.dirty.clear()
        self.held[k] = self.num_blocks - 1 - self.kv.num_free_blocks
        self.shared_saved[k] = self.saved_now
        self.group_blocks[k] = self.group_now
        self.block_counts[k] = self.count_now


def replay_hybrid(
    inp: EngineInput,
    config: SimConfig,
    step: np.ndarray,
    kind: np.ndarray,
    seq: np.ndarray,
    block: np.ndarray,
    count: np.ndarray,
    post: np.ndarray,
    num_steps: int,
    batch: list[int] | None = None,
) -> HybridRows:
    """The blocks of a hybrid run (module docstring): rows, counts and the tokens each admission hit;
    with a CPU tier, `batch` is each step's (the time series'), which says how many held requests resume."""
    return _HybridPass(inp, config, step, kind, seq, block, count, post, num_steps, batch).run()


__all__ = ["HybridRows", "replay_hybrid"]
