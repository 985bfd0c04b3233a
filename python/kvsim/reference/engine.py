"""Reference engine: the scheduler and memory model, one model iteration at a time (SPEC §4–5).

This is the executable spec of `rust/core/src/engine/`: written for clarity, slow by design. One call of
`run(inp, config)` simulates every sequence of an `EngineInput` to completion or rejection and returns raw
integer columns and counters; `kvsim.simulate` turns them into frames and the summary for both backends.
DESIGN.md §Engine states the rules this code follows, in the same order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from kvsim.config import MAX_TIME_PS, SimConfig
from kvsim.engine_input import EngineInput
from kvsim.errors import InternalError, InvalidArgumentError
from kvsim.hashing import iter_block_keys
from kvsim.reference.contiguous import Buddy, FirstFit
from kvsim.reference.kv_cache_manager import KVCacheManager

# Reasons a sequence is rejected; the codes are shared with the Rust engine.
REJECT_REASONS = {
    1: "prompt_len reaches max_model_len: no room to generate",
    2: "needs more blocks than the pool holds",
    3: "needs a larger region than the address space",
    4: "needs more tokens in one step than max_num_batched_tokens (chunked prefill off)",
    5: "cannot be admitted even into an empty pool (watermark or admission gate)",
    6: "swapped out and cannot come back even into an empty pool (its sample group outgrew it)",
    7: "its samples need more running seats than max_num_seqs",
}

# Time-series columns (one row per recorded step; times in ps at the step's start; token counts).
TIMESERIES = (
    "step",
    "time_ps",
    "batch",
    "batched_tokens",
    "free_tokens",
    "stored_tokens",
    "allocated_tokens",
    "internal_tokens",
    "reserved_tokens",
    "external_tokens",
)
# Event log kinds (codes shared with the Rust engine): one row per event, with the step count, the time,
# the sequence, the block (-1 when the event is about a sequence, not a block) and a count (-1 unless the
# kind gives it one: `schedule` the tokens the sequence computes in the step, a contiguous `admit` its
# region's size with `block` its start, a group member's `swap-in` the leading blocks it shares with the
# group's first sample). DESIGN.md §Event log states when `schedule` rows are written.
EVENT_KINDS = (
    "admit",
    "allocate",
    "prefix-hit",
    "cow-copy",
    "evict",
    "free",
    "preempt",
    "swap-out",
    "swap-in",
    "finish",
    "reject",
    "fork",
    "schedule",
)
EVENT = {kind: code for code, kind in enumerate(EVENT_KINDS)}
EVENT_COLUMNS = ("step", "time_ps", "kind", "seq", "block", "count")
FINISHED, REJECTED = 0, 1
# The per-sequence output columns (`EngineOutput`'s), their dtypes and their value before anything happens.
COLUMN_FILL = {
    "first_scheduled": -1,
    "first_token": -1,
    "finish": -1,
    "generated": 0,
    "num_preemptions": 0,
    "num_swaps": 0,
    "cached_tokens": 0,
    "recomputed_tokens": 0,
    "status": -1,
    "reject_reason": 0,
}
COLUMN_DTYPE = {k: np.int8 if k in ("status", "reject_reason") else np.int64 for k in COLUMN_FILL}
NEVER = -1  # try_admit: this sequence can never start
SKIP = (
    -2
)  # try_admit: chunked prefill off, more tokens than the budget left, and `waiting_over_budget="skip"`
COUNTERS = (
    "num_steps",
    "busy_ps",
    "sum_batch",
    "sum_batched_tokens",
    "peak_batch",
    "peak_allocated_tokens",
    "w_batch",
    "w_stored",
    "w_allocated",
    "w_internal",
    "w_reserved",
    "w_external",
    "w_held_blocks",
    "w_logical_blocks",
    "num_preemptions",
    "num_evictions",
    "num_cow_copies",
    "prefix_hit_tokens",
    "prompt_tokens_admitted",
    "recomputed_tokens",
    "num_swapped_blocks",
    "num_block_allocations",
    "first_hit_tokens",
    "first_prompt_tokens",
)


@dataclass
class Seq:
    """One sequence (a request, or one sample of it) as the scheduler sees it."""

    idx: int
    prompt: list[tuple[int, int]]
    prompt_len: int
    target: int
    max_gen: int
    output_seg: int
    generated: int = 0
    num_computed: int = 0
    computed_at_preemption: int = 0
    # reserve policy: blocks promised but not yet allocated; contiguous: (start, size) region
    reserved_blocks: int = 0
    region: tuple[int, int] | None = None
    swapped_blocks: int = 0  # blocks held in the CPU pool while swapped out (a group's: on its first)
    shared_blocks: int = 0  # a swapped group (on its first member): leading blocks its members share
    admitted_before: bool = False
    # Sampled a token since its (re)admission started it over: it decodes (append_check applies).
    decoding: bool = False
    # fork-cow: the samples forked from this one when its first token is sampled (until then, unforked)
    children: list[Seq] = field(default_factory=list)
    forked: bool = False
    # fork-cow: the sequence group (vLLM v0) this sample belongs to since its fork, named by sample 0's
    # index; -1 for none. A group sits together in the running list and is scheduled, preempted and
    # swapped as one.
    group: int = -1

    @property
    def seats(self) -> int:
        """Running slots this sequence takes when admitted: itself, plus the samples it will fork."""
        return 1 + (0 if self.forked else len(self.children))

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.generated

    def segments(self) -> list[tuple[int, int]]:
        return [*self.prompt, (self.output_seg, self.generated)] if self.generated else list(self.prompt)


@dataclass
class EngineOutput:
    """Raw per-sequence columns (times in ps, -1 when it never happened) and integer counters: int64,
    but `status` (0 finished, 1 rejected) and `reject_reason` (`REJECT_REASONS`' codes, 0 for none),
    int8."""

    first_scheduled: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    generated: np.ndarray
    num_preemptions: np.ndarray
    num_swaps: np.ndarray
    cached_tokens: np.ndarray
    recomputed_tokens: np.ndarray
    status: np.ndarray
    reject_reason: np.ndarray
    counters: dict[str, int] = field(default_factory=dict)
    timeseries: dict[str, np.ndarray] = field(default_factory=dict)
    events: dict[str, np.ndarray] = field(default_factory=dict)


class Engine:
    def __init__(
        self, inp: EngineInput, config: SimConfig, timeseries_every: int = 0, record_events: bool = False
    ) -> None:
        self.inp, self.cfg = inp, config
        self.events: list[tuple[int, int, int, int, int, int]] | None = [] if record_events else None
        self.ts_every = timeseries_every
        self.ts: dict[str, list[int]] = {name: [] for name in TIMESERIES}
        self.bs = config.block_size
        self.paged = not config.is_contiguous
        if self.paged:
            assert config.num_blocks is not None, "SimConfig sizes the pool"
            self.kv = KVCacheManager(
                config.num_blocks, self.bs, config.enable_prefix_caching, config.free_order
            )
            if record_events:
                self.kv.pool.evicted = []
        else:
            space_cls = Buddy if config.placement == "buddy" else FirstFit
            self.space: FirstFit | Buddy = space_cls(config.capacity_tokens)
        self.outstanding = 0  # reserve policy: blocks promised to admitted sequences
        self.num_rejected = 0
        self.t = 0
        self.waiting: deque[Seq] = deque()
        # Preempted by swapping (a sequence, or a group's running members): their blocks are in the CPU pool.
        self.swapped: deque[list[Seq]] = deque()
        self.cpu_used = 0
        self.swap_blocks_step = 0
        self.running: list[Seq] = []
        self.c = dict.fromkeys(COUNTERS, 0)
        # Rows pushed so far (`push`, `feed`; `run` feeds `inp` whole): sequences, arrivals, fork parents
        # (as rows of this engine) and their output columns; `nxt` is the next row to join, `emitted` the
        # rows `take_done` gave. The columns grow by doubling (their first `len(self.seqs)` entries are
        # the rows'), so pushing rows one at a time costs amortised O(1) a row.
        self.seqs: list[Seq] = []
        self.arrivals: list[int] = []
        self.fork_of: list[int] = []
        self.nxt = self.emitted = 0
        # Rows pushed and joined that are not fork-cow samples (a replica's in-flight count: the difference).
        self.num_units_pushed = self.num_units_joined = 0
        self.cols: dict[str, np.ndarray] = {
            k: np.full(0, COLUMN_FILL[k], dtype=COLUMN_DTYPE[k]) for k in COLUMN_FILL
        }

    # -- sizes ----------------------------------------------------------------------------------------
    def region_size(self, s: Seq) -> int:
        policy = self.cfg.policy
        if policy == "static":
            assert self.cfg.max_model_len is not None
            return self.cfg.max_model_len
        if policy == "orca-max":
            return s.prompt_len + s.max_gen
        if policy == "orca-pow2":
            return s.prompt_len + (1 << max(s.target - 1, 0).bit_length())
        return s.prompt_len + s.target  # orca-oracle: exactly what it will generate

    def peak_blocks(self, s: Seq) -> int:
        """Blocks held at the sequence's largest: its last token's K/V is never computed."""
        if self.cfg.policy == "reserve":
            return -(-(s.prompt_len + s.max_gen) // self.bs)
        return -(-(s.prompt_len + s.target - 1) // self.bs)

    def reject_at_arrival(self, s: Seq) -> int:
        cfg = self.cfg
        if s.target < 1:
            return 1
        if self.paged and self.peak_blocks(s) > cfg.capacity_blocks:
            return 2
        if not self.paged and self.region_size(s) > self.space.max_region():
            return 3
        if s.seats > cfg.max_num_seqs:
            return 7
        return 0

    # -- event log ------------------------------------------------------------------------------------
    def log(self, kind: str, s: Seq, block: int = -1, count: int = -1) -> None:
        if self.events is not None:
            self.events.append((self.c["num_steps"], self.t, EVENT[kind], s.idx, block, count))

    def log_schedule(self, scheduled: list[tuple[Seq, int]]) -> None:
        """A `schedule` row for every sequence of the step's batch that does not compute exactly one
        token (its count), then one (count 0) for each running sequence the step left out; a running
        sequence without a row computed one token (DESIGN.md §Event log)."""
        if self.events is None:
            return
        for s, n in scheduled:
            if n != 1:
                self.log("schedule", s, -1, n)
        left_out = len(self.running) - len(scheduled)
        if left_out:
            # The running phase scheduled a prefix of the running list; the left-out ones follow it.
            i = 0
            while i < len(scheduled) and self.running[i] is scheduled[i][0]:
                i += 1
            for s in self.running[i : i + left_out]:
                self.log("schedule", s, -1, 0)

    def log_allocations(self, s: Seq, new: list[int], first: str = "allocate") -> None:
        """One event per block just popped (an eviction first if it lost a key); `first` names the first."""
        if self.events is None:
            return
        assert self.kv.pool.evicted is not None
        evicted = set(self.kv.pool.evicted)
        self.kv.pool.evicted.clear()
        for i, b in enumerate(new):
            if b in evicted:
                self.log("evict", s, b)
            self.log(first if i == 0 else "allocate", s, b)

    # -- memory ---------------------------------------------------------------------------------------
    def over_budget(self) -> int:
        """What `try_admit` answers for a whole prompt (chunked prefill off) over the budget left: 0 (wait:
        the waiting phase ends, vLLM >= 0.12) or SKIP (try the next one, vLLM 0.9.2 to 0.11.2)."""
        return SKIP if self.cfg.waiting_over_budget == "skip" else 0

    def try_admit(self, s: Seq, budget: int) -> int:
        """Allocates a waiting sequence's first chunk; returns its token count, 0 if it cannot start now,
        NEVER if it cannot ever start (without chunked prefill, more tokens than a step's budget) or SKIP
        (see `over_budget`)."""
        cfg, bs = self.cfg, self.bs
        total = s.num_tokens
        if not self.paged:
            num_new = total if not cfg.chunked_prefill else min(total, budget)
            if num_new > cfg.max_num_batched_tokens:
                return NEVER
            if num_new > budget:
                return self.over_budget()
            region = self.space.allocate(self.region_size(s))
            if region is None:
                return 0
            s.region = region
            s.num_computed = num_new
            self.log("admit", s, *region)
            return num_new
        segs = s.segments()
        hits, _ = self.kv._hits(segs, total)
        hit = len(hits) * bs
        num_new = total - hit
        if cfg.chunked_prefill:
            num_new = min(num_new, budget)
        elif num_new > cfg.max_num_batched_tokens:
            return NEVER
        elif num_new > budget:
            return self.over_budget()
        pool = self.kv.pool
        free = pool.num_free_blocks - self.outstanding
        evictable = sum(1 for b in hits if pool.ref_cnt(b) == 0)
        first = -(-(hit + num_new) // bs) - len(hits)
        if cfg.policy == "reserve":
            need = self.peak_blocks(s) - len(hits)
        elif cfg.admission_gate == "full-prompt":
            need = -(-total // bs) - len(hits)
        else:
            need = first
        if need + evictable + self.cfg.watermark_blocks > free:
            return 0
        new = self.kv.allocate(s.idx, segs, num_new)
        assert new is not None, "capacity was checked"
        self.log("admit", s)
        for b in hits:
            self.log("prefix-hit", s, b)
        self.log_allocations(s, new)
        if cfg.policy == "reserve":
            s.reserved_blocks = need - first
            self.outstanding += s.reserved_blocks
        s.num_computed = hit + num_new
        self.c["prefix_hit_tokens"] += hit
        self.c["prompt_tokens_admitted"] += total
        if not s.admitted_before:  # hits on a first admission: sharing between requests, not resumes
            s.admitted_before = True
            self.c["first_hit_tokens"] += hit
            self.c["first_prompt_tokens"] += total
        self.cols["cached_tokens"][s.idx] += hit
        recomputed = max(0, s.computed_at_preemption - hit)
        self.cols["recomputed_tokens"][s.idx] += recomputed
        self.c["recomputed_tokens"] += recomputed
        return num_new

    def try_grow(self, s: Seq, num_new: int, check: bool = True) -> bool:
        """Room for `num_new` more tokens of running `s`; False, changing nothing, if they do not fit.
        `check=False`: a group member whose group's room was checked as a whole (`group_fits`)."""
        if not self.paged:
            s.num_computed += num_new
            return True
        one_free = self.cfg.append_check == "one-free-block"
        if check and one_free and s.decoding and self.kv.num_free_blocks < 1:
            return False  # vLLM v0: every decoding sequence scheduled wants a free block, needed or not
        before = self.kv.num_free_blocks
        copies = self.kv.num_cow_copies
        # Under `reserve` a sequence only ever grows into blocks it was promised at admission.
        new = self.kv.allocate(s.idx, s.segments(), num_new)
        if new is None:
            return False
        self.log_allocations(s, new, "cow-copy" if self.kv.num_cow_copies > copies else "allocate")
        used = before - self.kv.num_free_blocks
        if s.reserved_blocks:
            taken = min(used, s.reserved_blocks)
            s.reserved_blocks -= taken
            self.outstanding -= taken
        s.num_computed += num_new
        return True

    def release(self, s: Seq) -> None:
        if self.paged:
            if self.events is not None:
                for b in reversed(self.kv.block_table(s.idx)):
                    self.log("free", s, b)
            self.kv.free(s.idx)
            self.outstanding -= s.reserved_blocks
            s.reserved_blocks = 0
        else:
            assert s.region is not None
            self.space.free(*s.region)
            s.region = None

    # -- scheduling -----------------------------------------------------------------------------------
    def unit_end(self, i: int) -> int:
        """End of the scheduling unit starting at running[i]: a sequence, or its group's members."""
        g = self.running[i].group
        j = i + 1
        if g >= 0:
            while j < len(self.running) and self.running[j].group == g:
                j += 1
        return j

    def pop_tail_unit(self) -> list[Seq]:
        """Takes the running list's tail unit (a sequence, or a whole group) out, in running order."""
        g = self.running[-1].group
        i = len(self.running) - 1
        if g >= 0:
            while i > 0 and self.running[i - 1].group == g:
                i -= 1
        unit = self.running[i:]
        del self.running[i:]
        return unit

    def preempt_unit(self, unit: list[Seq]) -> None:
        """Preempts a unit taken from the tail. A group of several running samples is swapped out whole
        (`preemption` "swap" or "auto", vLLM v0) when the CPU pool holds its blocks, shared ones once;
        otherwise each member goes on its own, from the last, and leaves the group: swapped under "swap"
        if it fits, else freed for recomputation."""
        mode = self.cfg.preemption
        if len(unit) > 1 and mode in ("swap", "auto"):
            tables = [self.kv.block_table(s.idx) for s in unit]
            shared = 0
            while shared < len(tables[0]) and all(
                len(t) > shared and t[shared] == tables[0][shared] for t in tables
            ):
                shared += 1
            n = shared + sum(len(t) - shared for t in tables)
            if n <= self.cfg.cpu_blocks - self.cpu_used:
                self.swap_out(unit, shared, n)
                return
        for s in reversed(unit):
            self.preempt(s, swap=mode == "swap")

    def preempt_tail(self, s: Seq) -> bool:
        """Preempts the running list's tail unit; returns whether it was the unit `s` begins."""
        victim = self.pop_tail_unit()
        self.preempt_unit(victim)
        return victim[0] is s

    def swap_out(self, unit: list[Seq], shared: int, n: int) -> None:
        """Moves a unit's `n` blocks to the CPU pool (the first `shared` of its tables once), its samples
        from the last; it waits in the swapped queue as one."""
        for s in reversed(unit):
            self.cols["num_preemptions"][s.idx] += 1
            self.c["num_preemptions"] += 1
            self.cols["num_swaps"][s.idx] += 1
            self.log("swap-out", s)
            self.release(s)
        unit[0].swapped_blocks = n
        unit[0].shared_blocks = shared
        self.cpu_used += n
        self.swap_blocks_step += n
        self.c["num_swapped_blocks"] += n
        self.swapped.append(unit)

    def preempt(self, s: Seq, swap: bool) -> None:
        """Swaps `s` out to the CPU pool if `swap` and its blocks fit there, else frees it for
        recomputation (it goes to the front of the waiting queue and starts over from token 0). A sample
        preempted on its own leaves its group: it comes back as a sequence of its own."""
        s.group = -1
        if swap:
            n = len(self.kv.block_table(s.idx))
            if n <= self.cfg.cpu_blocks - self.cpu_used:
                self.swap_out([s], 0, n)
                return
        self.cols["num_preemptions"][s.idx] += 1
        self.c["num_preemptions"] += 1
        self.log("preempt", s)
        self.release(s)
        s.computed_at_preemption = s.num_computed
        s.num_computed = 0
        s.decoding = False
        self.waiting.appendleft(s)

    def group_need(self, unit: list[Seq]) -> int:
        """Blocks a group's members pop to add their next token each, in order: a new block at a block
        boundary, a copy of a shared partial last block (the last holder writes in place)."""
        bs, need = self.bs, 0
        writers: dict[int, int] = {}
        for s in unit:
            table = self.kv.block_table(s.idx)
            need += -(-(s.num_computed + 1) // bs) - len(table)
            if s.num_computed % bs:
                last = table[-1]
                if self.kv.pool.ref_cnt(last) - writers.get(last, 0) > 1:
                    need += 1
                    writers[last] = writers.get(last, 0) + 1
        return need

    def group_fits(self, unit: list[Seq]) -> bool:
        """vLLM v0's `can_append_slots` for a group: its blocks fit (and, with `one-free-block`, a block is
        free for every member)."""
        free = self.kv.num_free_blocks
        if self.cfg.append_check == "one-free-block" and len(unit) > free:
            return False
        return self.group_need(unit) <= free

    def try_swap_in(self, s: Seq, budget: int) -> int:
        """Brings a swapped sequence back into fresh blocks (its content returns from the CPU, its keys are
        registered again) with room for its next chunk; returns the chunk's tokens, or 0 if it does not fit."""
        cfg, bs = self.cfg, self.bs
        num_new = min(s.num_tokens - s.num_computed, budget)
        if not cfg.chunked_prefill and num_new < s.num_tokens - s.num_computed:
            return 0
        need = -(-(s.num_computed + num_new) // bs)
        if cfg.append_check == "one-free-block" and s.decoding:
            # vLLM v0's `can_swap_in`: its blocks plus a free block for its next token, needed or not.
            need = max(need, -(-s.num_computed // bs) + 1)
        if need + cfg.watermark_blocks > self.kv.num_free_blocks:
            return 0
        new = self.kv._restore(s.idx, s.segments(), s.num_computed + num_new)
        self.log("swap-in", s)
        self.log_allocations(s, new)
        self.cpu_used -= s.swapped_blocks
        self.swap_blocks_step += s.swapped_blocks
        self.c["num_swapped_blocks"] += s.swapped_blocks
        s.swapped_blocks = 0
        s.num_computed += num_new
        return num_new

    def try_swap_in_group(self, unit: list[Seq], budget: int) -> int:
        """Brings a swapped group back: the blocks its members shared are restored once and shared again,
        each member's own blocks fresh (full ones registered again), then each member grows by its next
        token (as the running phase would). Returns the tokens scheduled, or 0 if it does not fit."""
        bs, first, n = self.bs, unit[0], len(unit)
        if n > budget:
            return 0
        c = first.num_computed  # every member of a group has computed as many tokens
        shared = first.shared_blocks
        identical = shared == -(-c // bs)  # swapped before their first write after the fork
        grow = n if c % bs == 0 else (n - 1 if identical else 0)
        if self.cfg.append_check == "one-free-block":
            grow = n  # vLLM v0's `can_swap_in`: a free block per sample, needed or not
        if first.swapped_blocks + grow + self.cfg.watermark_blocks > self.kv.num_free_blocks:
            return 0
        kv = self.kv
        prefix = c if identical else shared * bs
        restored = kv._restore(first.idx, first.segments(), prefix)
        for s in unit[1:]:
            kv.fork(first.idx, s.idx)
        for i, s in enumerate(unit):
            own = kv.allocate(s.idx, s.segments(), c - prefix) if c > prefix else []
            assert own is not None, "the group's room was checked"
            self.log("swap-in", s, -1, shared if i > 0 else -1)
            self.log_allocations(s, (restored if i == 0 else []) + own)
        self.cpu_used -= first.swapped_blocks
        self.swap_blocks_step += first.swapped_blocks
        self.c["num_swapped_blocks"] += first.swapped_blocks
        first.swapped_blocks = first.shared_blocks = 0
        for s in unit:
            grown = self.try_grow(s, 1, check=False)
            assert grown, "the group's room was checked"
        return n

    def reject(self, s: Seq, reason: int) -> None:
        """Rejects `s` (and the samples it would have forked) now, with a reason code."""
        self.num_rejected += 1
        for r in (s, *([] if s.forked else s.children)):
            self.log("reject", r)
            self.cols["status"][r.idx] = REJECTED
            self.cols["reject_reason"][r.idx] = reason
            self.cols["finish"][r.idx] = self.t

    def schedule(self) -> list[tuple[Seq, int]]:
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        scheduled: list[tuple[Seq, int]] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            j = self.unit_end(i)
            if j - i > 1:
                # A group (vLLM v0): all its samples or none, each one token; its room checked as a whole.
                unit = self.running[i:j]
                if len(unit) > budget:
                    break
                while not self.group_fits(unit):
                    preempted = True
                    if self.preempt_tail(unit[0]):
                        break
                else:
                    for s in unit:
                        grown = self.try_grow(s, 1, check=False)
                        assert grown, "the group's room was checked"
                        scheduled.append((s, 1))
                    budget -= len(unit)
                    i = j
                    continue
                break  # the group preempted itself: it was the tail, nothing after it
            s = self.running[i]
            num_new = min(s.num_tokens - s.num_computed, budget)
            # `while ... else`: the else branch runs when the allocation succeeds (possibly after
            # preempting others); `break` leaves when s itself was the victim.
            while not self.try_grow(s, num_new):
                preempted = True
                if self.preempt_tail(s):
                    break
            else:
                scheduled.append((s, num_new))
                budget -= num_new
                i += 1
                continue
            break  # s preempted itself: it was the tail, nothing after it
        if preempted:
            return scheduled
        # Swapped units come back before any new admission (FCFS, head-of-line).
        while self.swapped and budget > 0:
            unit = self.swapped[0]
            if len(self.running) + sum(s.seats for s in unit) > cfg.max_num_seqs:
                break
            if len(unit) > 1:
                num_new = self.try_swap_in_group(unit, budget)
            else:
                num_new = self.try_swap_in(unit[0], budget)
            if num_new == 0:
                if not self.running:
                    self.swapped.popleft()
                    self.cpu_used -= unit[0].swapped_blocks
                    for s in unit:
                        self.reject(s, 6)
                    continue
                break
            self.swapped.popleft()
            self.running.extend(unit)
            if len(unit) > 1:
                scheduled.extend((s, 1) for s in unit)
            else:
                scheduled.append((unit[0], num_new))
            budget -= num_new
        if self.swapped:
            return scheduled
        skipped: list[Seq] = []
        while self.waiting and budget > 0:
            s = self.waiting[0]
            if len(self.running) + s.seats > cfg.max_num_seqs:
                if not self.running:
                    self.waiting.popleft()
                    self.reject(s, 5)
                    continue
                break
            num_new = self.try_admit(s, budget)
            if num_new == NEVER:
                self.waiting.popleft()
                self.reject(s, 4)
                continue
            if num_new == SKIP:
                self.waiting.popleft()
                skipped.append(s)
                continue
            if num_new == 0:
                if not self.running:
                    self.waiting.popleft()
                    self.reject(s, 5)
                    continue
                break  # head-of-line blocking: a waiting request never preempts
            self.waiting.popleft()
            self.running.append(s)
            scheduled.append((s, num_new))
            budget -= num_new
            if self.cols["first_scheduled"][s.idx] < 0:
                self.cols["first_scheduled"][s.idx] = self.t
        # vLLM 0.9.2-0.11.2 put skipped requests back at the head in reverse order (`prepend_request` into
        # a queue, then `prepend_requests`, which reversed it once more): the last skipped comes first.
        self.waiting.extendleft(skipped)
        return scheduled

    def fork(self, parent: Seq) -> list[Seq]:
        """Forks `parent`'s samples after its first token (paper §4.4): each shares every block of the
        parent (copy-on-write) and has sampled its own first token. Returns those already finished."""
        parent.forked = True
        parent.group = parent.idx
        at = self.running.index(parent) + 1
        finished = []
        for c in parent.children:
            self.log("fork", c)
            self.kv.fork(parent.idx, c.idx)
            c.num_computed = parent.num_computed
            c.generated = 1
            c.decoding = True
            c.admitted_before = True  # admitted with its parent: a later admission is a resume
            c.group = parent.idx
            self.running.insert(at, c)
            at += 1
            self.cols["first_scheduled"][c.idx] = self.cols["first_scheduled"][parent.idx]
            self.cols["first_token"][c.idx] = self.t
            if c.generated == c.target:
                finished.append(c)
        return finished

    def step_time(self, scheduled: list[tuple[Seq, int]]) -> int:
        cfg = self.cfg
        if cfg.time_model == "ticks":
            return cfg.iteration_time_ps + self.swap_time()
        assert cfg.c0_ps is not None
        assert cfg.c_tok_ps is not None
        assert cfg.c_ctx_ps is not None
        tokens = sum(n for _, n in scheduled)
        context = sum(s.num_computed for s, _ in scheduled)
        return cfg.c0_ps + cfg.c_tok_ps * tokens + cfg.c_ctx_ps * context + self.swap_time()

    def swap_time(self) -> int:
        """PCIe time of the blocks swapped out or in during this step (both time models)."""
        blocks, self.swap_blocks_step = self.swap_blocks_step, 0
        return blocks * self.cfg.swap_ps_per_block

    def measure(self, dt: int, batch: int, tokens: int) -> None:
        """Time-weighted memory state during the step (after allocation, before finishing)."""
        c, bs = self.c, self.bs
        stored = internal = reserved = external = held = logical = 0
        if self.paged:
            logical = sum(-(-s.num_computed // bs) for s in self.running)
            held = self.cfg.capacity_blocks - self.kv.num_free_blocks
            # A partial block shared by forked samples (until their first write) counts once.
            partial = {self.kv.block_table(s.idx)[-1]: (-s.num_computed) % bs for s in self.running}
            internal = sum(partial.values())
            allocated = held * bs
            stored = allocated - internal
            reserved = self.outstanding * bs
        else:
            allocated = 0
            for s in self.running:
                assert s.region is not None
                size = s.region[1]
                final = s.prompt_len + s.target
                allocated += size
                stored += s.num_computed
                reserved += final - s.num_computed
                internal += size - final
            external = self.space.external_fragmentation()
        c["w_batch"] += dt * batch
        c["w_stored"] += dt * stored
        c["w_allocated"] += dt * allocated
        c["w_internal"] += dt * internal
        c["w_reserved"] += dt * reserved
        c["w_external"] += dt * external
        c["w_held_blocks"] += dt * held
        c["w_logical_blocks"] += dt * logical
        c["peak_allocated_tokens"] = max(c["peak_allocated_tokens"], allocated)
        if self.ts_every and c["num_steps"] % self.ts_every == 0:
            free = self.cfg.capacity_tokens - allocated
            row = (
                c["num_steps"],
                self.t,
                batch,
                tokens,
                free,
                stored,
                allocated,
                internal,
                reserved,
                external,
            )
            for name, value in zip(TIMESERIES, row, strict=True):
                self.ts[name].append(value)

    def feed(self, inp: EngineInput) -> None:
        """Appends a chunk's sequences (rows numbered on from those fed before; its `fork_parent` counts
        from the chunk's first row). Chunks come in arrival order."""
        self.push(inp, 0, len(inp))

    def push(self, inp: EngineInput, lo: int, hi: int | None = None) -> None:
        """Appends rows `lo..hi` of `inp` (one row if `hi` is None) as this engine's next rows; a row's
        `fork_parent` names a row of `inp` among them (a fork-cow group is pushed together, parent first).
        Rows come in arrival order. Amortised O(rows pushed): the columns grow by doubling."""
        hi = lo + 1 if hi is None else hi
        base = len(self.seqs)
        m = hi - lo
        self._reserve(base + m)
        for i in range(lo, hi):
            s = Seq(
                base + i - lo,
                inp.segments(i),
                int(inp.prompt_len[i]),
                int(inp.target[i]),
                int(inp.max_gen[i]),
                int(inp.output_seg[i]),
            )
            self.seqs.append(s)
            parent = int(inp.fork_parent[i])
            self.fork_of.append(base + parent - lo if parent >= 0 else -1)
            if parent >= 0:
                self.seqs[base + parent - lo].children.append(s)
            else:
                self.num_units_pushed += 1
            self.arrivals.append(int(inp.arrival_ps[i]))

    def _reserve(self, n: int) -> None:
        """Room for `n` rows in the output columns (doubling, so appends are amortised O(1))."""
        cap = len(self.cols["status"])
        if n <= cap:
            return
        cap = max(n, 2 * cap) if cap else n
        for k, col in self.cols.items():
            grown = np.full(cap, COLUMN_FILL[k], dtype=col.dtype)
            grown[: len(col)] = col
            self.cols[k] = grown

    def join_arrivals(self) -> None:
        """Step part 1: every pushed row with `arrival <= t` joins (or is rejected at arrival)."""
        seqs, arrivals = self.seqs, self.arrivals
        n = len(seqs)
        while self.nxt < n and arrivals[self.nxt] <= self.t:
            s = seqs[self.nxt]
            self.nxt += 1
            if self.fork_of[s.idx] >= 0:
                continue  # a fork-cow sample: it starts when its parent samples its first token
            self.num_units_joined += 1
            reason = self.reject_at_arrival(s)
            if reason:
                self.reject(s, reason)
            else:
                self.waiting.append(s)

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting and not self.swapped

    def advance(self, final: bool) -> None:
        """Steps until the run is over or, with more input to come (`final` false), until a step could
        depend on rows not fed yet: later rows arrive no earlier than the last one fed, so a step that
        starts before it is safe, one at or after it is not, nor an idle jump to the next arrival."""
        arrivals = self.arrivals
        n = len(self.seqs)
        last_arrival = arrivals[-1] if arrivals else 0
        while True:
            self.join_arrivals()
            idle = self.idle
            if self.nxt == n and not final and (idle or self.t >= last_arrival):
                return
            if idle:
                if self.nxt == n:
                    break
                self.t = arrivals[self.nxt]
                continue
            self.step()
        self.finish_counters()

    def advance_until(self, horizon: int) -> None:
        """Runs every step that starts strictly before `horizon` (ps) and nothing else: rows with
        `arrival <= t` join the step at `t`; an idle engine jumps to its next pushed arrival only if that
        is before the horizon, else it stops without moving its clock. A step may end past the horizon."""
        arrivals = self.arrivals
        while self.t < horizon:
            self.join_arrivals()
            if self.idle:
                if self.nxt < len(self.seqs) and arrivals[self.nxt] < horizon:
                    self.t = arrivals[self.nxt]
                    continue
                return
            self.step()

    def finish(self) -> EngineOutput:
        """Runs every row pushed to its end and returns the output (what `run` returns for them)."""
        self.advance(final=True)
        n = len(self.seqs)
        cols = {k: v[:n] for k, v in self.cols.items()}
        cols["generated"][cols["status"] == REJECTED] = 0
        ts = {k: np.asarray(v, dtype=np.int64) for k, v in self.ts.items()} if self.ts_every else {}
        events = {}
        if self.events is not None:
            table = np.asarray(self.events, dtype=np.int64).reshape(-1, len(EVENT_COLUMNS))
            events = {name: np.ascontiguousarray(table[:, i]) for i, name in enumerate(EVENT_COLUMNS)}
        return EngineOutput(**cols, counters=self.c, timeseries=ts, events=events)

    def step(self) -> None:
        """One iteration at `t` once the arrivals joined: schedule, time, measure, sample, finish."""
        cols = self.cols
        before = (self.num_rejected, self.c["num_preemptions"])
        scheduled = self.schedule()
        if not scheduled:
            # Fine if a head was rejected or a sequence preempted itself (no time passes); anything
            # else would repeat forever.
            if before == (self.num_rejected, self.c["num_preemptions"]):
                raise InternalError(f"no progress at time {self.t} ps")
            return
        self.log_schedule(scheduled)
        dt = self.step_time(scheduled)
        if self.t + dt > MAX_TIME_PS:
            raise InvalidArgumentError(clock_overflow_message(self.c["num_steps"], self.t))
        self.measure(dt, len(scheduled), sum(k for _, k in scheduled))
        self.t += dt
        c = self.c
        c["num_steps"] += 1
        c["busy_ps"] += dt
        c["sum_batch"] += len(scheduled)
        c["sum_batched_tokens"] += sum(k for _, k in scheduled)
        c["peak_batch"] = max(c["peak_batch"], len(scheduled))
        done = []
        for s, _ in scheduled:
            if s.num_computed == s.num_tokens:
                s.generated += 1
                s.decoding = True
                if cols["first_token"][s.idx] < 0:
                    cols["first_token"][s.idx] = self.t
                if s.generated == s.target:
                    done.append(s)
                if s.children and not s.forked:
                    done.extend(self.fork(s))
        for s in done:
            self.log("finish", s)
            self.release(s)
            self.running.remove(s)
            cols["status"][s.idx] = FINISHED
            cols["finish"][s.idx] = self.t
            cols["generated"][s.idx] = s.generated

    def finish_counters(self) -> None:
        """The counters summed at the end of a run."""
        if self.paged:
            self.c["num_evictions"] = self.kv.num_evictions
            self.c["num_cow_copies"] = self.kv.num_cow_copies
            self.c["num_block_allocations"] = self.kv.pool.num_allocated
        self.c["makespan_ps"] = self.t

    def take_done(self) -> dict[str, np.ndarray]:
        """The output columns of the rows done since the last call (finished or rejected, every earlier
        row too)."""
        status = self.cols["status"][: len(self.seqs)]
        pending = np.flatnonzero(status[self.emitted :] < 0)
        end = self.emitted + int(pending[0]) if len(pending) else len(status)
        out = {k: v[self.emitted : end].copy() for k, v in self.cols.items()}
        out["generated"][out["status"] == REJECTED] = 0
        self.emitted = end
        return out

    def run(self) -> EngineOutput:
        self.feed(self.inp)
        return self.finish()


class Replica:
    """A replica of a cluster (DESIGN.md §Engine): an `Engine` fed rows as they are routed to it and
    stepped to given instants, with the signals a router reads (the cluster contract's names)."""

    def __init__(
        self, inp: EngineInput, config: SimConfig, timeseries_every: int = 0, record_events: bool = False
    ) -> None:
        self.engine = Engine(inp, config, timeseries_every, record_events)

    def push(self, inp: EngineInput, lo: int, hi: int | None = None) -> None:
        self.engine.push(inp, lo, hi)

    def advance_until(self, horizon_ps: int) -> None:
        self.engine.advance_until(horizon_ps)

    def finish(self) -> EngineOutput:
        return self.engine.finish()

    @property
    def block_size(self) -> int:
        return self.engine.bs

    def waiting(self) -> int:
        """Sequences that joined and wait to be (re)admitted: the waiting queue and the swapped units'
        samples."""
        e = self.engine
        return len(e.waiting) + sum(len(unit) for unit in e.swapped)

    def running(self) -> int:
        return len(self.engine.running)

    def in_flight(self) -> int:
        """Rows pushed but not joined yet (a fork-cow group counts its parent only)."""
        e = self.engine
        return e.num_units_pushed - e.num_units_joined

    def load(self) -> int:
        return self.waiting() + self.running() + self.in_flight()

    def kv_used(self) -> int:
        """Paged: blocks with `ref_cnt > 0` (the null block excluded); contiguous: reserved tokens."""
        e = self.engine
        if e.paged:
            return e.kv.pool.capacity - e.kv.num_free_blocks
        return e.space.capacity - e.space.num_free

    def kv_total(self) -> int:
        """Paged: the usable blocks (`num_blocks - 1`); contiguous: the capacity in tokens."""
        e = self.engine
        return e.kv.pool.capacity if e.paged else e.space.capacity

    def caches(self) -> bool:
        """Whether a prompt can hit this replica's prefix cache at all (paged, caching on)."""
        return self.engine.paged and self.engine.cfg.enable_prefix_caching

    def key_set(self) -> set[int]:
        """The keys of this replica's prefix map now (empty when it does not cache)."""
        return self.engine.kv.pool.key_set() if self.caches() else set()

    def prefix_hit_blocks(
        self, segments: list[tuple[int, int]], prompt_len: int, keys: set[int] | None = None
    ) -> int:
        """Leading full blocks of a prompt, among its first `(prompt_len - 1) // block_size`, whose key
        is in this replica's prefix map (or in `keys`, a snapshot of it): the hit it would give now."""
        if not self.caches():
            return 0
        pool = self.engine.kv.pool
        held = pool.holds_key if keys is None else keys.__contains__
        bs = self.engine.bs
        hit = 0
        for key in iter_block_keys(segments, bs, 0, None, max(prompt_len - 1, 0) // bs):
            if not held(key):
                break
            hit += 1
        return hit


def run(
    inp: EngineInput, config: SimConfig, timeseries_every: int = 0, record_events: bool = False
) -> EngineOutput:
    """Simulates every sequence of `inp` under `config`, iteration by iteration; with
    `timeseries_every = N > 0`, records the memory state of every N-th step; with `record_events`, logs
    every block and scheduling event (`EVENT_KINDS`)."""
    return Engine(inp, config, timeseries_every, record_events).run()


def clock_overflow_message(step: int, t: int) -> str:
    """The error of a step that would end past `MAX_TIME_PS` (the Rust engine raises the same text)."""
    return (
        f"step {step} starting at {t} ps would end past the simulated clock's range of {MAX_TIME_PS} ps "
        "(about 53 days): the time model's coefficients (iteration_time_ps, c0_ps, c_tok_ps, c_ctx_ps, "
        "swap_ps_per_block) are too large for this workload"
    )
