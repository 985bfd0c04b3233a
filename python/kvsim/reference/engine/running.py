"""The running phase and the step (DESIGN.md §Engine, steps 2, 4 and 5; the twin of
`rust/core/src/engine/running.rs`): one step's schedule in vLLM's order, a running sequence's growth,
its scheduling unit, the step itself (time, measure, sampling, finishes) and the fork of samples."""

from __future__ import annotations

from kvsim.errors import InternalError, InvalidArgumentError
from kvsim.model.config import MAX_TIME_PS
from kvsim.reference.engine.output import FINISHED, push_step
from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State
from kvsim.reference.engine.timing import clock_overflow_message


class Running(State):
    """The running list in admission order; a unit is a sequence or its sequence group."""

    def schedule(self) -> list[tuple[Seq, int]]:
        """One step's batch, in vLLM's order: the running phase; if it preempted nothing, swapped units
        come back; if none is left swapped out, waiting sequences are admitted."""
        scheduled: list[tuple[Seq, int]] = []
        if self.hybrid:
            self.hkv.new_step()
        budget, preempted = self.running_phase(scheduled, self.cfg.max_num_batched_tokens)
        if preempted:
            return scheduled
        budget = self.swap_in_phase(scheduled, budget)
        if self.swapped:
            return scheduled
        if self.connector:
            self.tier_waiting_phase(scheduled, budget)
        else:
            self.waiting_phase(scheduled, budget)
        return scheduled

    def running_phase(self, scheduled: list[tuple[Seq, int]], budget: int) -> tuple[int, bool]:
        """Step part 2 (DESIGN.md §Engine): the running list, unit by unit in admission order, while the
        budget lasts; a unit whose blocks do not fit preempts the tail unit until they do. Appends to
        `scheduled`; returns the budget left and whether anything was preempted."""
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
            if s.done and s.generated >= s.max_gen:
                i += 1  # async_scheduling: finished at its limit in the step in flight, passed over
                continue
            num_new = min(s.num_tokens - s.num_computed, budget)
            if self.hybrid and self.hkv.align:
                num_new = self.hybrid_split(s, s.num_computed, num_new, self.hkv.junction(s.idx))
                if num_new == 0:
                    i += 1  # its chunk reaches no block boundary: passed over this step
                    continue
            # `while ... else`: the else branch runs when the allocation succeeds (possibly after
            # preempting others); `break` leaves when s itself was the victim.
            while not self.try_grow(s, num_new):
                if (self.tier_flight or self.prefill_side) and self.victim_in_flight():
                    return budget, preempted  # defer_block_free: nothing preempted for it (offload_async)
                preempted = True
                if self.preempt_tail(s):
                    break
            else:
                scheduled.append((s, num_new))
                budget -= num_new
                i += 1
                continue
            break  # s preempted itself: it was the tail, nothing after it
        return budget, preempted

    def unit_end(self, i: int) -> int:
        """End of the scheduling unit starting at running[i]: a sequence, or its group's members."""
        g = self.running[i].group
        j = i + 1
        if g >= 0:
            while j < len(self.running) and self.running[j].group == g:
                j += 1
        return j

    def try_grow(self, s: Seq, num_new: int, check: bool = True) -> bool:
        """Room for `num_new` more tokens of running `s`; False, changing nothing, if they do not fit.
        `check=False`: a group member whose group's room was checked as a whole (`group_fits`)."""
        if not self.paged:
            s.num_computed += num_new
            return True
        if self.hybrid:
            return self.hybrid_try_grow(s, num_new)
        one_free = self.cfg.append_check == "one-free-block"
        if check and one_free and s.decoding and self.kv.num_free_blocks < 1:
            return False  # vLLM v0: every decoding sequence scheduled wants a free block, needed or not
        before = self.kv.num_free_blocks
        copies = self.kv.num_cow_copies
        # Under `reserve` a sequence only ever grows into blocks it was promised at admission.
        # A discarded token (async_scheduling: `done`, stopped early in the step in flight) keys nothing:
        # vLLM keys up to the tokens that have arrived and frees the request before its stop token arrives.
        new = self.kv._allocate(s.idx, s.segments(), num_new, not s.done)
        if new is None:
            return False
        if self.connector:
            self.touched.update(new)
        self.log_allocations(s, new, "cow-copy" if self.kv.num_cow_copies > copies else "allocate")
        used = before - self.kv.num_free_blocks
        if s.reserved_blocks:
            taken = min(used, s.reserved_blocks)
            s.reserved_blocks -= taken
            self.outstanding -= taken
        s.num_computed += num_new
        return True

    def async_turn(self, scheduled: list[tuple[Seq, int]]) -> bool:
        """`async_scheduling`'s turn after a schedule (DESIGN.md §Engine, "Asynchronous scheduling"), for
        one engine's step and a DP rank's alike: an empty batch with a step in flight lets that step's
        outputs arrive and asks for the schedule again at `t` (True); otherwise notes whether a step is now
        in flight and, in a hybrid pool, each scheduled sequence's tokens in it (`Hybrid.settled`). False,
        doing nothing, without the rule."""
        if not self.cfg.async_scheduling:
            return False
        if not scheduled and self.async_prev >= 0:
            self.release_retiring()
            self.async_prev = -1
            return True
        self.async_prev = self.t if scheduled else -1
        if self.prefill_side:
            # A prefill replica's connector defers its frees behind the step in flight (`victim_in_flight`).
            step = self.c["num_steps"]  # (the index this step is committed under)
            for s, _ in scheduled:
                s.sched_step = step
        if self.hybrid:
            step = self.c["num_steps"]  # (the index this step is committed under)
            for s, n in scheduled:
                s.flight_step, s.flight_tokens = step, n
        return False

    def step(self) -> None:
        """One iteration at `t` once the arrivals joined: schedule, time, measure, sample, finish."""
        if self.cfg.async_scheduling and self.connector:
            self.async_tier_step()  # the batch queue with a CPU tier (offload_async.py)
            return
        before = (self.num_rejected, self.c["num_preemptions"])
        loads = self.c["num_loads"] + self.c["pd_transfers"]  # loads or transfers admitted: progress
        scheduled = self.schedule()
        tier = self.connector
        if self.async_turn(scheduled):
            return
        if not scheduled:
            # Fine if a head was rejected or a sequence preempted itself (no time passes); anything
            # else would repeat forever. With a CPU tier, a step may also wait for transfers: it offers
            # the stores of requests finished before and observes; if nothing changed, the engine stalls
            # until a transfer ends or a request arrives (`resolve_stall`).
            changed = before != (self.num_rejected, self.c["num_preemptions"])
            if tier:
                changed = (
                    self.tier_empty_step() or changed or loads != self.c["num_loads"] + self.c["pd_transfers"]
                )
                self.stalled = not changed
            elif self.sending and not changed:
                self.stalled = True  # a prefill replica waits for its held blocks' transfers to end
            elif not changed:
                raise InternalError(f"no progress at time {self.t} ps")
            return
        self.log_schedule(scheduled)
        if self.retiring or self.flight_sampled:
            self.release_retiring()  # async_scheduling: the step in flight's outputs arrive after the schedule
        dt = self.step_time(scheduled)
        if tier:
            for s, _ in scheduled:
                s.prefilling = s.prefilling and s.num_computed < s.num_tokens
            if self.t + dt > MAX_TIME_PS:  # before its stores: they would start past the clock's range
                raise InvalidArgumentError(clock_overflow_message(self.c["num_steps"], self.t))
            _, flush_end = self.offer_stores(scheduled, self.t + dt)
            dt = max(dt, flush_end - self.t)
        self.commit_step(scheduled, dt)

    def commit_step(self, scheduled: list[tuple[Seq, int]], dt: int) -> None:
        """The step's second half, once its batch is scheduled and it lasts `dt`: measure, sample, finish
        (a rank of a data-parallel group takes it with its group's duration, `group.py`)."""
        cols = self.cols
        # (with `async_scheduling` the finishers reach the tier when their output arrives: `tier_output`)
        tier = self.connector and not self.cfg.async_scheduling
        if self.t + dt > MAX_TIME_PS:
            raise InvalidArgumentError(clock_overflow_message(self.c["num_steps"], self.t))
        self.measure(dt, len(scheduled), sum(k for _, k in scheduled))
        self.t += dt
        push_step(self.itl_steps, dt)
        c = self.c
        step = c["num_steps"]
        c["num_steps"] += 1
        c["busy_ps"] += dt
        c["sum_batch"] += len(scheduled)
        c["sum_batched_tokens"] += sum(k for _, k in scheduled)
        c["peak_batch"] = max(c["peak_batch"], len(scheduled))
        done = []
        settle = self.hybrid and self.cfg.async_scheduling and self.cfg.enable_prefix_caching
        for s, _ in scheduled:
            if s.num_computed == s.num_tokens and not s.done:  # (done: async_scheduling's discarded token)
                if settle:
                    self.flight_sampled.append((s, s.num_computed))
                self.note_token(s, step)
                self.sampled += 1
                s.generated += 1
                s.decoding = True
                if cols["first_token"][s.idx] < 0:
                    cols["first_token"][s.idx] = self.t
                if s.generated == s.target:
                    done.append(s)
                if s.children and not s.forked:
                    done.extend(self.fork(s, step))
        for s in done:
            self.itl_runs.append((s.idx, s.run_first, step, s.run_gap))
            self.log("finish", s)
            if tier:
                self.tier_finished(s)  # (a hybrid decode replica's: `hybrid_connector_finished` there)
            if self.prefill_side:
                self.done_rows.append(s.idx)
            if self.cfg.async_scheduling:
                # Keeps its seat and blocks through the next schedule (`release_retiring`; a prefill
                # replica's are then held for its transfer).
                s.done = True
                self.retiring.append(s)
            elif self.hold_sends:
                if self.hybrid:
                    self.hybrid_connector_finished(s)
                self.sending[s.idx] = s  # freed when its transfer ends (`free_sent`)
            else:
                self.release(s)
            if not s.done:
                self.running.remove(s)
            cols["status"][s.idx] = FINISHED
            cols["finish"][s.idx] = self.t
            cols["generated"][s.idx] = s.generated
        if tier:
            if self.tier is not None:
                self.finished_last.extend(done)
            self.observe()

    def release_retiring(self) -> None:
        """async_scheduling: the step in flight's outputs arrive once the next step is scheduled: in a hybrid
        pool the sequences it sampled key their blocks (`settle_keys`), then the requests that finished in it
        free their seats and blocks (in the order they finished); one a preemption freed only leaves."""
        if self.flight_sampled:
            self.settle_keys()
        for s in self.retiring:
            if s.freed:
                continue
            self.running.remove(s)
            if self.hold_sends:
                # A prefill replica (vLLM's `_connector_finished`, then the delayed free): its windows free
                # what they left behind, the rest is held until its transfer ends (`free_sent`).
                if self.hybrid:
                    self.hybrid_connector_finished(s)
                self.sending[s.idx] = s
            else:
                self.release(s)
        self.retiring.clear()

    def note_token(self, s: Seq, step: int) -> None:
        """ITL: `s` samples a token in `step`, ending at `t`. A token whose sequence sampled none in the
        step before starts a new run (the sequence's first, or one after a break: preempted, swapped,
        left out of a step) and closes the one before it, if any (`ITL_RUNS`)."""
        if s.generated == 0:
            s.run_first, s.run_gap = step, -1
        elif s.last_step != step - 1:
            self.itl_runs.append((s.idx, s.run_first, s.last_step, s.run_gap))
            s.run_first, s.run_gap = step, self.t - s.last_time
        s.last_step, s.last_time = step, self.t
        if self.token_times is not None:
            self.token_times.setdefault(s.idx, []).append(self.t)

    def fork(self, parent: Seq, step: int) -> list[Seq]:
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
            self.note_token(c, step)  # its first token: sampled with the parent's, no gap before it
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
