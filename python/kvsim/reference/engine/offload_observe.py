"""The CPU tier's observations (DESIGN.md §CPU tier; the twin of `rust/core/src/engine/offload/observe.rs`):
when the engine sees transfers complete, the step that schedules nothing with a tier, the stall of an engine
that waits for nothing but transfers, and the tier's occupancy measure."""

from __future__ import annotations

from collections import Counter, deque
from typing import TYPE_CHECKING

from kvsim.errors import InternalError, InvalidArgumentError
from kvsim.model.units import fmt_count
from kvsim.reference.engine.job import Job
from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State


class TierObserve(State):
    """The tier's observation points and stall (`offload.Offload` takes them)."""

    if TYPE_CHECKING:
        # offload.py's state and the method these call there
        loads: deque[Job]
        stores: deque[Job]
        loading: Counter[int]
        num_observed: int

        def land(self, s: Seq) -> None: ...
        def unfence(self, job: Job) -> None: ...

    def observe(self, at: int | None = None) -> bool:
        """An observation point at `t` (a step's end, an idle jump, a stall's end; under
        `async_scheduling` a batch's output, `at` its end): every transfer that has ended and that this
        observation may see completes. Returns whether one did."""
        tier = self.tier
        self.num_observed += 1
        t, now = self.t if at is None else at, self.num_observed
        seen = False
        if any(job.end <= t and job.avail <= now for job in self.loads):
            kept: deque[Job] = deque()
            for job in self.loads:
                if job.end > t or job.avail > now:
                    kept.append(job)
                    continue
                if not job.remote:
                    assert tier is not None
                    tier.complete_load(job.keys)
                    self.loading.subtract(job.keys)
                    self.loading = +self.loading
                job.seq.jobs -= 1
                self.land(job.seq)
                if not job.remote:
                    self.log("load-done", job.seq, -1, len(job.keys))
            self.loads = kept
            seen = True
        if any(job.end <= t and job.avail <= now for job in self.stores):
            kept = deque()
            for job in self.stores:
                if job.end > t or job.avail > now:
                    kept.append(job)
                    continue
                assert tier is not None
                tier.complete_store(job.keys)
                self.unfence(job)
                job.seq.jobs -= 1
                self.log("store-done", job.seq, -1, len(job.keys))
            self.stores = kept
            seen = True
        return seen

    def next_transfer(self) -> int | None:
        """When the earliest transfer in flight ends (not before now), None if none is."""
        ends = [job.end for q in (self.loads, self.stores) for job in q]
        if self.send_ends:  # a prefill replica's held blocks: the earliest transfer end decided
            ends.append(self.send_ends[0][0])
        return max(self.t, min(ends)) if ends else None

    def tier_empty_step(self) -> bool:
        """A step that scheduled nothing: the finished requests' stores are offered now, then the
        engine observes; returns whether anything changed."""
        planned, flush_end = self.offer_stores([], self.t)
        self.t = max(self.t, flush_end)
        return self.observe() or planned

    def resolve_stall(self, limit: int | None) -> bool:
        """A stalled engine jumps to the earliest end of a transfer or the next arrival, if before `limit`
        (None: no limit), and observes there; False if it must wait for the caller."""
        target = self.next_transfer()
        if self.nxt < len(self.seqs):
            arrival = self.arrivals[self.nxt]
            target = arrival if target is None else min(target, arrival)
        if target is None:
            if self.sending:
                return False  # a prefill replica: its transfers' ends are not decided yet
            if self.held:
                raise InvalidArgumentError(
                    f"the run deadlocks at {self.t} ps: {fmt_count(len(self.held), 'request')} "
                    f"{'holds' if len(self.held) == 1 else 'hold'} blocks for loads that landed and "
                    "cannot allocate what their prompts still need, and nothing runs; vLLM 0.33.0's and 0.34.0's "
                    "scheduler would wait here forever (its reservation for requests still prefilling counts no block a sliding "
                    "window needs: DESIGN.md §CPU tier)"
                )
            raise InternalError(f"no progress at time {self.t} ps")
        if limit is not None and target >= limit:
            return False
        self.t = target
        self.stalled = False
        if not self.cfg.async_scheduling:  # (under it only a batch's output observes)
            self.observe()
        return True

    def tier_measure(self, dt: int) -> None:
        assert self.tier is not None
        used = self.tier.used
        self.c["w_cpu_chunks"] += dt * used
        self.c["peak_cpu_chunks"] = max(self.c["peak_cpu_chunks"], used)
