"""Asynchronous scheduling with a CPU tier (DESIGN.md §Engine, "Asynchronous scheduling", *With a CPU
tier*; the twin of `rust/core/src/engine/offload/async_tier.rs`): vLLM 0.33.0's `AsyncScheduler` with its
`OffloadingConnector` under the engine core's batch queue of two (`step_with_batch_queue`). Every schedule
is a batch, an empty one included; a batch's connector metadata (its stores, the finished requests it
names) is built inside its schedule, and the batch in flight's output (its finishers, the transfers the
workers report done by its end) arrives after the next batch was scheduled, or, with nothing left to
schedule, on its own."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from kvsim.errors import InvalidArgumentError
from kvsim.model.config import MAX_TIME_PS
from kvsim.reference.engine.job import Job
from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State
from kvsim.reference.engine.timing import clock_overflow_message


class TierAsync(State):
    """The batch queue: whether a batch is in flight (`tier_flight`: its output has not arrived; with
    `async_prev` >= 0 it computes tokens, and a sequence it scheduled has `sched_step` the step it is
    committed under) and when it ends (`flight_end`)."""

    tier_flight: bool
    flight_end: int
    deferred: list[Seq]  # finishers whose blocks wait for the batch in flight (`defer_block_free`)
    victim_deferred: bool  # this schedule left a preemption to a later one (`victim_in_flight`)

    if TYPE_CHECKING:
        # offload.py's state
        loads: deque[Job]
        stores: deque[Job]
        num_observed: int

    def victim_in_flight(self) -> bool:
        """`defer_block_free`: the running tail (the preemption's victim) was scheduled in the batch in
        flight, so freeing it would not help this schedule: the running phase stops without preempting
        (a schedule after that batch's output may: `victim_deferred`)."""
        deferred = self.async_prev >= 0 and self.running[-1].sched_step == self.c["num_steps"] - 1
        self.victim_deferred |= deferred
        return deferred

    def async_tier_step(self) -> None:
        """One batch at `t` once the arrivals joined: schedule (building the connector's metadata: the
        stores offered, the finished requests named), the output of the batch in flight arrives, then this
        batch runs (an empty one takes no time). An empty batch that changed nothing, behind which nothing
        could be seen at `t`, leaves the engine stalled (`resolve_stall`)."""
        before = (self.num_rejected, self.c["num_preemptions"], self.c["num_loads"])
        start = self.t
        flight = self.tier_flight
        if flight:
            # The batch in flight's output is observed first: this batch's transfers report at the next.
            self.num_observed += 1
        self.victim_deferred = False
        scheduled = self.schedule()
        dt = 0
        if scheduled:
            self.log_schedule(scheduled)
            dt = self.step_time(scheduled)
            step = self.c["num_steps"]  # (the index this step is committed under)
            for s, n in scheduled:
                s.prefilling = s.prefilling and s.num_computed < s.num_tokens
                s.sched_step = step
                s.flight_step, s.flight_tokens = step, n  # (a hybrid pool's tokens in flight: `settled`)
            if start + dt > MAX_TIME_PS:  # before its stores: they would start past the clock's range
                raise InvalidArgumentError(clock_overflow_message(step, start))
        planned, flush_end = self.offer_stores(scheduled, start + dt)
        arrived = False
        if flight:
            self.num_observed -= 1  # (its observation's number, taken above)
            arrived = self.tier_output()
        self.tier_flight = True
        if scheduled:
            self.async_prev = start
            self.commit_step(scheduled, max(dt, flush_end - start))
            self.flight_end = self.t
            return
        # An empty batch: it computes nothing and takes no time (but a flush's wait).
        self.t = max(self.t, flush_end)
        self.flight_end = self.t
        changed = (
            planned
            or arrived
            or self.victim_deferred
            or before != (self.num_rejected, self.c["num_preemptions"], self.c["num_loads"])
        )
        if (
            not changed
            and not self.idle
            and all(job.end > self.t for q in (self.loads, self.stores) for job in q)
        ):
            self.stalled = True  # the next schedule would be this one: wait for a transfer or an arrival

    def tier_output(self) -> bool:
        """The batch in flight's output arrives (`update_from_output`): the finishers deferred behind it
        free their blocks; the requests that finished in it reach the connector (`request_finished`: the
        next batch offers their last stores) and leave the running list, their blocks freed now unless the
        batch just scheduled computes them (a discarded token: freed at its output, `defer_block_free`);
        then the transfers reported done by its end complete. In a hybrid pool the sequences it sampled
        first key their blocks (`settle_keys`), and a finisher's windows free what they left behind at its
        tokens but those the batch just scheduled computes (`hybrid_remove_skipped`). Returns whether
        anything changed."""
        self.tier_flight = False
        self.async_prev = -1
        changed = bool(self.retiring or self.deferred)
        for s in self.deferred:
            self.release_deferred(s)
        self.deferred = []
        if self.flight_sampled:
            self.settle_keys()
        step = self.c["num_steps"]
        for s in self.retiring:
            self.tier_finished(s)
            self.finished_last.append(s)
            self.running.remove(s)
            if s.sched_step == step:  # scheduled by the batch just scheduled, not committed yet
                self.deferred.append(s)
            else:
                self.release(s)
        self.retiring.clear()
        return self.observe(self.flight_end) or changed
