"""Reference engine: the scheduler and memory model, one model iteration at a time (DESIGN.md §Engine).

This is the executable spec of `rust/core/src/engine/` (this module: its `mod.rs`, the engine's state and
its loop): written for clarity, slow by design. One call of `run(inp, config)` simulates every sequence
of an `EngineInput` to completion or rejection and returns raw integer columns and counters;
`kvsim.simulate` turns them into frames and the summary for both backends. The rules live in the
modules beside this one, one concern each (DESIGN.md §"The reference engine's modules").
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from kvsim.engine.engine_input import EngineInput
from kvsim.errors import InternalError
from kvsim.model.config import SimConfig
from kvsim.reference.contiguous import Buddy, FirstFit
from kvsim.reference.engine.admission import Admission
from kvsim.reference.engine.events import EVENT_COLUMNS, EventLog
from kvsim.reference.engine.group import Group
from kvsim.reference.engine.hybrid import Hybrid
from kvsim.reference.engine.memory import Memory
from kvsim.reference.engine.offload import Offload
from kvsim.reference.engine.output import (
    COLUMN_DTYPE,
    COLUMN_FILL,
    COUNTERS,
    ITL_RUNS,
    ITL_STEPS,
    REJECTED,
    TIMESERIES,
    EngineOutput,
)
from kvsim.reference.engine.preemption import Preemption
from kvsim.reference.engine.running import Running
from kvsim.reference.engine.seq import Seq, cut_segments
from kvsim.reference.engine.timing import Timing
from kvsim.reference.kv_cache_manager import KVCacheManager
from kvsim.reference.kv_groups import HybridKVCacheManager


class Engine(Admission, Running, Preemption, Memory, Hybrid, Offload, Timing, EventLog, Group):
    """One replica's state and its loop; each base class holds one concern's rules (as Rust's `impl
    Engine` blocks, one per file)."""

    def __init__(
        self,
        inp: EngineInput,
        config: SimConfig,
        timeseries_every: int = 0,
        record_events: bool = False,
        pd_link: tuple[int, int] | None = None,
    ) -> None:
        self.inp, self.cfg = inp, config
        # A decode replica of a disaggregated fleet: its inbound link's (latency ps, ps per block).
        self.pd_link = pd_link
        # A decode replica: (row, transfer end) of each remote request decided (admitted or rejected),
        # for the driver to hand to its prefill replica (`take_sends_decided`).
        self.sends_decided: list[tuple[int, int]] = []
        # A prefill replica of a disaggregated fleet (`hold_sends`): its finished requests keep their
        # blocks until their transfer ends (`sending`: row -> sequence; `send_ends`: a heap of (end, row)
        # once the decode side decided it), freed at the first observation point at or after the end.
        self.hold_sends = False
        self.prefill_side = False  # reports its rows done (`done_rows`), held or not
        self.done_rows: list[int] = []
        self.sending: dict[int, Seq] = {}
        self.send_ends: list[tuple[int, int]] = []
        self.events: list[tuple[int, int, int, int, int, int]] | None = [] if record_events else None
        self.ts_every = timeseries_every
        self.ts: dict[str, list[int]] = {name: [] for name in TIMESERIES}
        self.itl_steps: list[list[int]] = []
        self.itl_runs: list[tuple[int, int, int, int]] = []
        self.token_times: dict[int, list[int]] | None = None
        self.bs = config.engine_block_size
        self.paged = not config.is_contiguous
        groups = config.kv_groups
        self.hybrid = bool(groups)
        if self.hybrid:
            assert config.num_blocks is not None, "SimConfig sizes the pool"
            layout = config.pool.layout
            self.hkv = HybridKVCacheManager(
                config.num_blocks,
                groups,
                layout.scheduler_block_size,
                config.enable_prefix_caching,
                config.free_order,
                config.prefix_cache_retention_interval,
            )
            if record_events:
                self.hkv.pool.evicted = []
        elif self.paged:
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
        self.sampled = 0  # tokens the steps sampled (a hybrid pool's livelock watch reads it)
        self.t = 0
        self.waiting: deque[Seq] = deque()
        # Preempted by swapping (a sequence, or a group's running members): their blocks are in the CPU pool.
        self.swapped: deque[list[Seq]] = deque()
        self.cpu_used = 0
        self.swap_blocks_step = 0
        self.running: list[Seq] = []
        self.async_prev = -1
        self.retiring: list[Seq] = []
        self.flight_sampled: list[tuple[Seq, int]] = []
        self.planned: list[tuple[Seq, int]] = []  # a rank of a DP group: the step `group_plan` scheduled
        self.init_tier()
        self.c = dict.fromkeys(COUNTERS, 0)
        for g in range(len(groups)):  # hybrid: time-weighted and peak blocks each group's tables hold
            self.c[f"w_group_blocks_{g}"] = self.c[f"peak_group_blocks_{g}"] = 0
            self.ts[f"blocks_group_{g}"] = []
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

    def feed(self, inp: EngineInput) -> None:
        """Appends a chunk's sequences (rows numbered on from those fed before; its `fork_parent` counts
        from the chunk's first row). Chunks come in arrival order."""
        self.push(inp, 0, len(inp))

    def push(
        self,
        inp: EngineInput,
        lo: int,
        hi: int | None = None,
        *,
        arrival: int | None = None,
        first_token_only: bool = False,
        remote: bool = False,
        backoff: int = 0,
    ) -> None:
        """Appends rows `lo..hi` of `inp` (one row if `hi` is None) as this engine's next rows; a row's
        `fork_parent` names a row of `inp` among them (a fork-cow group is pushed together, parent first).
        Rows come in arrival order. Amortised O(rows pushed): the columns grow by doubling.

        Prefill/decode disaggregation (one row): `arrival` replaces the row's arrival (a hand-off joins its
        decode replica when its prefill finished); `first_token_only` caps its target at 1 (vLLM's
        `max_tokens=1` on a prefill replica); `remote` marks its prompt as computed on a prefill replica;
        `backoff` drops that many tokens from the end of a prompt longer than it (vLLM's
        `_truncate_request_for_prefill` on a prefill replica of a model with Mamba groups)."""
        hi = lo + 1 if hi is None else hi
        base = len(self.seqs)
        m = hi - lo
        self._reserve(base + m)
        for i in range(lo, hi):
            s = Seq(
                base + i - lo,
                inp.segments(i),
                int(inp.prompt_len[i]),
                min(int(inp.target[i]), 1) if first_token_only else int(inp.target[i]),
                min(int(inp.max_gen[i]), 1) if first_token_only else int(inp.max_gen[i]),
                int(inp.output_seg[i]),
            )
            s.remote = remote
            if backoff and s.prompt_len > backoff:
                s.prompt = cut_segments(s.prompt, backoff)
                s.prompt_len -= backoff
            self.seqs.append(s)
            parent = int(inp.fork_parent[i])
            self.fork_of.append(base + parent - lo if parent >= 0 else -1)
            if parent >= 0:
                self.seqs[base + parent - lo].children.append(s)
            else:
                self.num_units_pushed += 1
            self.arrivals.append(int(inp.arrival_ps[i]) if arrival is None else arrival)

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
        """Step part 1: every pushed row with `arrival <= t` joins (or is rejected at arrival); under
        `async_scheduling`, while a step is in flight, those with `arrival <=` its start (the next step is
        scheduled then)."""
        seqs, arrivals = self.seqs, self.arrivals
        n = len(seqs)
        limit = self.async_prev if self.async_prev >= 0 else self.t
        while self.nxt < n and arrivals[self.nxt] <= limit:
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
        return not self.running and not self.waiting and not self.swapped and not self.held

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
                # (idle: before `async_prev`'s reset below, as the Rust engine's `advance` does too: a row fed
                # later may arrive by the start of the step in flight and join the next step's schedule,
                # which the reset, taking the arrivals up to the step's end, would pass by)
                return
            if self.stalled:  # CPU tier: waits for a transfer or the next arrival
                if not self.resolve_stall(None):
                    raise InternalError(f"no progress at time {self.t} ps")
                continue
            if idle:
                if self.idle_turn():
                    continue
                if self.nxt == n:
                    break
                self.t = arrivals[self.nxt]
                if self.connector and not self.cfg.async_scheduling:
                    self.observe()  # (under async_scheduling only a batch's output observes)
                continue
            if self.send_ends:
                self.free_sent()
            self.step()
        self.finish_counters()

    def advance_until(self, horizon: int) -> None:
        """Runs every step that starts strictly before `horizon` (ps) and nothing else: rows with
        `arrival <= t` join the step at `t`; an idle engine jumps to its next pushed arrival only if that
        is before the horizon, else it stops without moving its clock. A step may end past the horizon."""
        arrivals = self.arrivals
        while self.t < horizon:
            self.join_arrivals()
            if self.stalled:
                if not self.resolve_stall(horizon):
                    return
                continue
            if self.idle:
                if self.idle_turn():
                    continue
                if self.nxt < len(self.seqs) and arrivals[self.nxt] < horizon:
                    self.t = arrivals[self.nxt]
                    if self.connector and not self.cfg.async_scheduling:
                        self.observe()
                    continue
                return
            if self.send_ends:
                self.free_sent()
            self.step()

    def idle_turn(self) -> bool:
        """An idle engine's turn before it jumps to the next arrival; returns whether it took one (the
        Rust engine's `Engine::idle_turn`). With a CPU tier under `async_scheduling`, the batch in
        flight's output arrives (`tier_output`), unless the finished requests' last stores wait for a batch
        of their own. Under `async_scheduling`, nothing left to schedule behind the step in flight (its
        batch was only discarded tokens): the engine waits for it, then takes arrivals up to its end. With
        a CPU tier, the finished requests' last stores, in a step of their own (under `async_scheduling` a
        batch)."""
        if self.tier_flight and not self.finished_last:
            self.tier_output()
            return True
        if self.finished_last and self.cfg.async_scheduling:
            # (before the wait below: vLLM schedules the batch naming them while the batch in flight, of
            # discarded tokens only, runs, and takes that batch's output, its deferred frees, before the
            # schedule after)
            self.step()
            return True
        if self.async_prev >= 0:
            self.async_prev = -1
            return True
        if self.finished_last:
            self.tier_empty_step()
            return True
        return False

    # -- a disaggregated fleet's prefill side (DESIGN.md §Prefill/decode disaggregation, step 7) -------
    def send_ended(self, row: int, end: int) -> None:
        """The decode side decided the transfer of finished row `row` (held in `sending`): it ends at
        `end`, and the blocks are freed at the first observation point at or after it (a replica that
        does not hold them, contiguous, freed them at its finish)."""
        if self.hold_sends:
            heapq.heappush(self.send_ends, (end, row))

    def free_sent(self) -> None:
        """An observation point at `t`: every held request whose transfer ended at or before `t` frees its
        blocks, in order of end, then row. Under `async_scheduling`, while a step is in flight, those ended
        by its start (the join limit: vLLM applies `finished_sending` from that step's output, after the
        schedule made at its start)."""
        ends = self.send_ends
        limit = self.async_prev if self.async_prev >= 0 else self.t
        while ends and ends[0][0] <= limit:
            _, row = heapq.heappop(ends)
            self.release(self.sending.pop(row))

    def take_done_rows(self) -> list[int]:
        """A prefill replica: its rows finished or rejected since the last call."""
        out, self.done_rows = self.done_rows, []
        return out

    def take_sends_decided(self) -> list[tuple[int, int]]:
        """A decode replica: (row, transfer end) of the remote requests decided since the last call."""
        out, self.sends_decided = self.sends_decided, []
        return out

    def next_event(self) -> int | None:
        """The instant this engine's next step starts (an idle jump's or a stall's included) given the rows
        pushed so far; None if it has nothing left to do."""
        n = len(self.seqs)
        if self.nxt < n and self.arrivals[self.nxt] <= self.t:
            return self.t
        if self.stalled:
            target = self.next_transfer()
            if self.nxt < n:
                arrival = self.arrivals[self.nxt]
                target = arrival if target is None else min(target, arrival)
            return target
        if not self.idle or self.finished_last or self.tier_flight:
            return self.t
        return self.arrivals[self.nxt] if self.nxt < n else None

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
        steps = np.asarray(self.itl_steps, dtype=np.int64).reshape(-1, len(ITL_STEPS))
        runs = np.asarray(self.itl_runs, dtype=np.int64).reshape(-1, len(ITL_RUNS))
        itl = {name: np.ascontiguousarray(steps[:, i]) for i, name in enumerate(ITL_STEPS)}
        itl.update({name: np.ascontiguousarray(runs[:, i]) for i, name in enumerate(ITL_RUNS)})
        return EngineOutput(**cols, counters=self.c, timeseries=ts, events=events, itl=itl)

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


def run(
    inp: EngineInput, config: SimConfig, timeseries_every: int = 0, record_events: bool = False
) -> EngineOutput:
    """Simulates every sequence of `inp` under `config`, iteration by iteration; with
    `timeseries_every = N > 0`, records the memory state of every N-th step; with `record_events`, logs
    every block and scheduling event (`EVENT_KINDS`)."""
    return Engine(inp, config, timeseries_every, record_events).run()
