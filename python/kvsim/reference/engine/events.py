"""The event log (DESIGN.md §Event log; the twin of `rust/core/src/engine/events.rs`): its kinds and
columns, and the engine's `log*` calls, which write nothing unless the run records events."""

from __future__ import annotations

from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State

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
    "window",
    # The CPU tier (DESIGN.md §CPU tier): a store or a load starts (`count`: its chunks), the tier holds
    # `count` tokens of a request beyond its GPU hits, a store evicts a chunk, a transfer is observed done.
    "store",
    "load",
    "cpu-hit",
    "cpu-evict",
    "store-done",
    "load-done",
)
EVENT = {kind: code for code, kind in enumerate(EVENT_KINDS)}
EVENT_COLUMNS = ("step", "time_ps", "kind", "seq", "block", "count")


class EventLog(State):
    """Appends `(step, time_ps, kind, seq, block, count)` rows to `self.events` (when it is a list)."""

    def log(self, kind: str, s: Seq, block: int = -1, count: int = -1) -> None:
        if self.events is not None:
            self.events.append((self.c["num_steps"], self.t, EVENT[kind], s.idx, block, count))

    def log_schedule(self, scheduled: list[tuple[Seq, int]]) -> None:
        """A `schedule` row for every sequence of the step's batch that does not compute exactly one
        token or computes a discarded one (`done`: its count), then one (count 0) for each running
        sequence the step left out; a running sequence without a row computed one token (DESIGN.md
        §Event log)."""
        if self.events is None:
            return
        for s, n in scheduled:
            if n != 1 or s.done:
                self.log("schedule", s, -1, n)
        if len(self.running) > len(scheduled):
            # In running order; a Mamba chunk that reaches no block boundary leaves one out mid-list.
            batch = {id(s) for s, _ in scheduled}
            for s in self.running:
                if id(s) not in batch:
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
