"""A rank of a data-parallel group (DESIGN.md §Data-parallel groups; the twin of
`rust/core/src/engine/group.rs`): the engine's step split in two so that the group's driver
(`kvsim.reference.dp`) can time every rank's step by the slowest: `group_plan` joins the rows due and
schedules (the step's batch and its own duration but the experts' term, which the driver adds for the
ranks' tokens gathered), `group_commit` records it with the group's duration; a rank with nothing to run
takes `group_dummy` (its clock moves, its counters do not)."""

from __future__ import annotations

from kvsim.errors import InternalError
from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State


class Group(State):
    """The group step's halves and what the group's driver reads of a rank."""

    planned: list[tuple[Seq, int]]

    def has_work(self) -> bool:
        """A request is running, waiting or swapped out (vLLM's `has_unfinished_requests`)."""
        return not self.idle

    def next_arrival(self) -> int | None:
        """The arrival of the next row pushed that has not joined (None: none)."""
        return self.arrivals[self.nxt] if self.nxt < len(self.seqs) else None

    def group_plan(self) -> tuple[int, int] | None:
        """The rows due join and the rank schedules at its clock, again while a schedule only rejects or
        preempts (no time passes, as in one engine); the step's own duration but the routed experts' term
        (`step_time_apart`: the driver adds `experts_time` of the ranks' tokens) and its batched tokens, or
        None when it scheduled nothing (a dummy batch)."""
        while True:
            self.join_arrivals()
            if self.idle:
                if self.async_prev >= 0:
                    self.async_prev = -1  # async_scheduling: as `advance`, arrivals up to the clock join
                    continue
                return None
            before = (self.num_rejected, self.c["num_preemptions"])
            scheduled = self.schedule()
            if self.async_turn(scheduled):
                continue  # (its schedule again at the clock, the group step's start)
            if scheduled:
                self.log_schedule(scheduled)
                if self.retiring or self.flight_sampled:
                    self.release_retiring()  # async_scheduling: after the schedule, as `step`
                self.planned = scheduled
                return self.step_time_apart(scheduled), sum(n for _, n in scheduled)
            if before == (self.num_rejected, self.c["num_preemptions"]):
                raise InternalError(f"no progress at time {self.t} ps")

    def group_commit(self, d: int) -> None:
        """The step `group_plan` planned, recorded with the group's duration `d`."""
        scheduled, self.planned = self.planned, []
        self.commit_step(scheduled, d)

    def group_dummy(self, t: int) -> None:
        """An idle rank's clock moved to `t` with its group (a jump or a dummy batch)."""
        assert t >= self.t
        self.t = t
