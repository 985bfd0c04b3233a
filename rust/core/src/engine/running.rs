//! The running phase (DESIGN.md §Engine, step 2): each unit (a sequence, or a fork-cow group scheduled
//! whole) grows by its tokens, preempting the tail when its blocks do not fit; the step's end samples
//! tokens, forks samples and retires finished sequences; `full_step` is one step walked explicitly.

use super::{Engine, FINISHED, Memory, event};
use crate::block_table::{blocks_for, rem_bs};

impl Engine<'_> {
    /// Room for `num_new` more tokens of running `k`; false, changing nothing, if they do not fit.
    /// `check = false`: a group member whose group's room was checked as a whole (`group_fits`).
    pub(super) fn try_grow(&mut self, k: usize, num_new: u64, check: bool) -> bool {
        let bs = self.cfg.block_size;
        let s = &mut self.slab[k];
        let Memory::Paged(pool) = &mut self.mem else {
            s.num_computed += num_new;
            return true;
        };
        if self.cfg.groups.is_some() {
            return self.hybrid_try_grow(k, num_new);
        }
        if check && self.cfg.one_free_block && s.decoding && pool.num_free_blocks() == 0 {
            return false; // vLLM v0: every decoding sequence scheduled wants a free block, needed or not
        }
        self.new_blocks.clear();
        let Some(copied) = s.table.grow(pool, bs, num_new, &mut self.new_blocks) else {
            return false;
        };
        let phantom = self.defer_keys.then_some(s.private_from);
        s.sync_output();
        // A discarded token (`async_scheduling`: a request that stopped early in the step in flight, `done`)
        // keys nothing: vLLM keys up to the tokens that have arrived, the stop token not yet, and the
        // request is freed before it arrives, so the block that token fills goes back unkeyed
        // (DESIGN.md §Engine, "Asynchronous scheduling"; every block before it was keyed already).
        if !s.done {
            s.table
                .register_full_blocks_cached(pool, bs, &s.segs, &s.tier_keys, phantom);
        }
        let row = s.row;
        if let Some(tier) = &mut self.tier
            && (!self.lockstep || (self.tier_hot.pending && tier.may_fence()))
        {
            // (in lockstep mode only while a store may fence blocks: a request that finished in the
            // step before with stores in flight fences its blocks, and one with chunks left to offer
            // stores them in this step's offer; a block this step allocates among them makes the step
            // wait for the store: vLLM's flush)
            tier.touched.extend_from_slice(&self.new_blocks);
        }
        if copied {
            self.out.counters.num_cow_copies += 1;
        }
        if s.reserved_blocks > 0 {
            let taken = (self.new_blocks.len() as u32).min(s.reserved_blocks);
            s.reserved_blocks -= taken;
            self.outstanding -= u64::from(taken);
        }
        s.num_computed += num_new;
        if self.log.is_some() && !self.new_blocks.is_empty() {
            self.log_allocations(
                row,
                if copied {
                    event::COW_COPY
                } else {
                    event::ALLOCATE
                },
            );
        }
        true
    }

    /// End (exclusive) of the scheduling unit starting at `running[i]`: a sequence, or its group.
    pub(super) fn unit_end(&self, i: usize) -> usize {
        let mut j = i + 1;
        if let Some(g) = self.slab[self.running[i]].group {
            while j < self.running.len() && self.slab[self.running[j]].group == Some(g) {
                j += 1;
            }
        }
        j
    }

    /// Blocks the group `running[i..j]` pops for one more token each, in order: a new block at a block
    /// boundary, a copy of a shared partial last block (its last holder writes in place).
    pub(super) fn group_need(&mut self, i: usize, j: usize) -> u64 {
        let Memory::Paged(pool) = &self.mem else {
            unreachable!("groups are paged only")
        };
        let bs = self.cfg.block_size;
        let mut writers = std::mem::take(&mut self.writers);
        writers.clear();
        let mut need = 0;
        for &k in &self.running[i..j] {
            let s = &self.slab[k];
            let blocks = s.table.blocks();
            need += blocks_for(s.num_computed + 1, bs) - blocks.len() as u64;
            if rem_bs(s.num_computed, bs) != 0 {
                let last = *blocks.last().expect("a partial block");
                let pos = writers.iter().position(|&(b, _)| b == last);
                let copied = pos.map_or(0, |p| writers[p].1);
                if pool.ref_cnt_of(last) - copied > 1 {
                    need += 1;
                    match pos {
                        Some(p) => writers[p].1 += 1,
                        None => writers.push((last, 1)),
                    }
                }
            }
        }
        self.writers = writers;
        need
    }

    /// vLLM v0's `can_append_slots` for the group `running[i..j]`: its blocks fit (and, with
    /// `one_free_block`, a block is free for every member).
    pub(super) fn group_fits(&mut self, i: usize, j: usize) -> bool {
        let free = match &self.mem {
            Memory::Paged(pool) => u64::from(pool.num_free_blocks()),
            Memory::Contiguous(_) => unreachable!("groups are paged only"),
        };
        if self.cfg.one_free_block && (j - i) as u64 > free {
            return false;
        }
        self.group_need(i, j) <= free
    }

    /// fork-cow (paper §4.4): after `k` samples its first token, each of its samples starts sharing
    /// every block (copy-on-write) with its own first token; those already finished go to `done`.
    /// Returns the new slab indices in sample order.
    pub(super) fn fork(&mut self, k: usize) -> std::ops::Range<usize> {
        let Memory::Paged(_) = &self.mem else {
            unreachable!("fork-cow is paged only")
        };
        self.slab[k].forked = true;
        let (row, n) = (self.slab[k].row, self.slab[k].num_children as usize);
        self.slab[k].group = Some(row);
        let parent_adm = self.slab[k].adm_no;
        // Right after the parent (the running list is sorted by admission number).
        let at = self
            .running
            .partition_point(|&j| self.slab[j].adm_no <= parent_adm);
        let mut children = Vec::with_capacity(n);
        let (t, step) = (self.t, self.step - 1);
        for child_row in row + 1..=row + n {
            self.log(event::FORK, child_row, -1);
            let ck = self.new_seq(child_row);
            let Memory::Paged(pool) = &mut self.mem else {
                unreachable!()
            };
            let table = self.slab[k].table.fork(pool);
            let num_computed = self.slab[k].num_computed;
            let c = &mut self.slab[ck];
            c.table = table;
            c.num_computed = num_computed;
            c.set_generated(1);
            // Its first token, sampled with the parent's: no gap before it (metrics.py).
            (c.itl_first, c.itl_gap, c.itl_last, c.itl_last_t) = (step, -1, step, t);
            c.decoding = true;
            c.admitted_before = true; // admitted with its parent: a later admission is a resume
            c.group = Some(row);
            c.adm_no = parent_adm + (child_row - row) as u64;
            let done = c.generated == c.target;
            self.out.first_scheduled[child_row - self.out_base] =
                self.out.first_scheduled[row - self.out_base];
            self.out.first_token[child_row - self.out_base] = self.t;
            children.push(ck);
            if done {
                self.done.push(ck);
            }
        }
        self.running.splice(at..at, children);
        at..at + n
    }

    pub(super) fn schedule(&mut self) {
        let cfg = self.cfg;
        let mut budget = cfg.max_num_batched_tokens;
        self.scheduled.clear();
        self.step_keys.clear(); // vLLM's `new_step_starts`: the states keyed last step exist now
        let mut preempted = false;
        let mut i = 0;
        'running: while i < self.running.len() && budget > 0 {
            if self.cancelled() {
                return;
            }
            let j = if self.forks { self.unit_end(i) } else { i + 1 };
            let k = self.running[i];
            if j - i > 1 {
                // A group (vLLM v0): all its samples or none, a token each; its room checked as a whole.
                if (j - i) as u64 > budget {
                    break;
                }
                while !self.group_fits(i, j) {
                    preempted = true;
                    if self.preempt_tail(k) {
                        break 'running; // the group was the tail: nothing after it
                    }
                }
                for idx in i..j {
                    let m = self.running[idx];
                    let grown = self.try_grow(m, 1, false);
                    assert!(grown, "the group's room was checked");
                    self.scheduled.push((m, 1));
                }
                budget -= (j - i) as u64;
                i = j;
                continue;
            }
            let s = &self.slab[k];
            if s.done && s.generated >= s.max_gen {
                i += 1; // async_scheduling: finished at its limit in the step in flight, passed over
                continue;
            }
            let mut num_new = (s.num_tokens() - s.num_computed).min(budget);
            if cfg.groups.is_some() {
                num_new = self.hybrid_split(k, num_new);
                if num_new == 0 {
                    i += 1; // a chunk cut to nothing (Mamba align mode): passed over, not preempted
                    continue;
                }
            }
            loop {
                if self.try_grow(k, num_new, true) {
                    self.scheduled.push((k, num_new));
                    budget -= num_new;
                    i += 1;
                    continue 'running;
                }
                if self.async_prev >= 0
                    && (self.tier.is_some() || self.sends.is_some())
                    && self.victim_in_flight()
                {
                    break 'running; // defer_block_free: nothing preempted for it (offload/async_tier.rs)
                }
                preempted = true;
                if self.preempt_tail(k) {
                    break 'running; // k was the tail: nothing after it
                }
            }
        }
        if !preempted {
            self.admit_waiting(budget);
        }
    }

    /// After a full step: every scheduled sequence whose tokens are all computed samples one; those that
    /// reach their target finish, in scheduled order.
    pub(super) fn finish_step(&mut self) {
        let t = self.t;
        let step = self.step - 1;
        self.done.clear();
        for i in 0..self.scheduled.len() {
            let k = self.scheduled[i].0;
            // (done: async_scheduling's discarded token of a request that finished the step before)
            if self.slab[k].num_computed == self.slab[k].num_tokens() && !self.slab[k].done {
                self.note_token(k, step);
                self.sampled += 1;
                let s = &mut self.slab[k];
                s.generate_one();
                if self.out.first_token[s.row - self.out_base] < 0 {
                    self.out.first_token[s.row - self.out_base] = t;
                }
                if s.generated == s.target {
                    self.done.push(k);
                }
                if s.num_children > 0 && !s.forked {
                    self.fork(k);
                }
            }
        }
        if self.cfg.async_scheduling && self.cfg.groups.is_some() {
            self.note_flight_sampled();
        }
        self.retire_done();
    }

    /// ITL: `k` samples a token in `step`, ending at `t` (before its generated count grows). A token
    /// whose sequence sampled none in the step before starts a new run (its first token, or one after a
    /// break: preempted, swapped, left out of a step) and closes the run before it, if any.
    #[inline]
    pub(super) fn note_token(&mut self, k: usize, step: u64) {
        let t = self.t;
        let s = &mut self.slab[k];
        if s.generated == 0 {
            (s.itl_first, s.itl_gap) = (step, -1);
        } else if s.itl_last + 1 != step {
            self.break_run(k, step);
        }
        let s = &mut self.slab[k];
        (s.itl_last, s.itl_last_t) = (step, t);
    }

    /// `note_token` after a break: records `k`'s run that ended before it and starts the next at `step`.
    #[cold]
    #[inline(never)]
    fn break_run(&mut self, k: usize, step: u64) {
        let s = &mut self.slab[k];
        self.out.push_itl_run([
            s.row as i64,
            s.itl_first as i64,
            s.itl_last as i64,
            s.itl_gap,
        ]);
        (s.itl_first, s.itl_gap) = (step, self.t - s.itl_last_t);
    }

    /// Frees and records every sequence in `done`, in order, and drops them from the running list.
    #[inline]
    pub(super) fn retire_done(&mut self) {
        if !self.done.is_empty() {
            self.retire_done_now();
        }
    }

    #[inline(never)]
    pub(super) fn retire_done_now(&mut self) {
        let done = std::mem::take(&mut self.done);
        for &k in &done {
            let row = self.slab[k].row;
            self.log(event::FINISH, row, -1);
            if self.tier.is_some() {
                if !self.cfg.async_scheduling {
                    self.tier_finished(k); // (asynchronous: at its output, `tier_output`)
                }
            } else if self.cfg.groups.is_some()
                && !self.cfg.async_scheduling
                && self.sends.as_ref().is_some_and(|s| s.hold)
            {
                // A hybrid prefill replica (DESIGN.md §Prefill/decode disaggregation; asynchronous: at
                // its output, `release_async_done`).
                self.hybrid_connector_finished(k);
            }
            if let Some(sends) = self.sends.as_deref_mut() {
                sends.done.push(row);
            }
            if self.sends.as_ref().is_some_and(|s| s.hold) && !self.cfg.async_scheduling {
                let sends = self.sends.as_deref_mut().expect("a prefill replica");
                sends.sending.insert(row, k); // freed when its transfer ends (`free_sent`)
            } else if self.cfg.async_scheduling {
                // Keeps its seat and blocks through the next schedule (`release_async_done`; a prefill
                // replica's are then held for its transfer).
                self.slab[k].done = true;
                self.async_done.push(k);
            } else {
                self.release(k);
            }
            let s = &mut self.slab[k];
            s.lazy = false;
            s.retiring = true;
            // Its last run ends with the step just taken (a lazy sequence's `itl_last` lags).
            self.out.push_itl_run([
                s.row as i64,
                s.itl_first as i64,
                self.step as i64 - 1,
                s.itl_gap,
            ]);
            self.out.status[s.row - self.out_base] = FINISHED;
            self.out.finish[s.row - self.out_base] = self.t;
            self.out.generated[s.row - self.out_base] = s.generated as i64;
        }
        if self.cfg.async_scheduling {
            // (they stay running until the next schedule, `release_async_done`)
            self.done = done;
            self.done.clear();
            return;
        }
        let slab = &self.slab;
        // The running list ascends in admission order: one finisher is found by binary search.
        let one = match done[..] {
            [k] => Some((
                k,
                self.running
                    .partition_point(|&j| slab[j].adm_no < slab[k].adm_no),
            )),
            _ => None,
        };
        match one {
            Some((k, i)) if self.running.get(i) == Some(&k) => {
                self.running.remove(i);
            }
            _ => self.running.retain(|&k| !slab[k].retiring),
        }
        if !self.sends.as_ref().is_some_and(|s| s.hold) {
            for &k in &done {
                self.remove(k);
            }
        }
        self.done = done;
        self.done.clear();
    }

    /// `async_scheduling`: the step in flight's outputs arrive once the next step is scheduled: in a hybrid
    /// pool the sequences it sampled key their blocks (`settle_keys`), then the requests that finished in
    /// it free their seats and blocks (in the order they finished); one a preemption freed only leaves.
    pub(super) fn release_async_done(&mut self) {
        if !self.flight_sampled.is_empty() {
            self.settle_keys(); // (a hybrid pool's: the sampled tokens' blocks keyed first)
        }
        if self.async_done.is_empty() {
            return;
        }
        let done = std::mem::take(&mut self.async_done);
        let hold = self.sends.as_ref().is_some_and(|s| s.hold);
        for &k in &done {
            if !self.slab[k].freed {
                let at = self
                    .running
                    .iter()
                    .position(|&j| j == k)
                    .expect("a finisher in flight is running");
                self.running.remove(at);
                if hold {
                    // A prefill replica (vLLM's `_connector_finished`, then the delayed free): its windows
                    // free what they left behind, the rest is held until its transfer ends (`free_sent`).
                    if self.cfg.groups.is_some() {
                        self.hybrid_connector_finished(k);
                    }
                    let row = self.slab[k].row;
                    let sends = self.sends.as_deref_mut().expect("a prefill replica");
                    sends.sending.insert(row, k);
                    continue;
                }
                self.release(k);
            }
            // (its slot is taken again only by a later join: this step's `finish_step` still reads `done`)
            self.remove(k);
        }
        self.async_done = done;
        self.async_done.clear();
    }

    /// `async_scheduling`'s turn after a schedule (DESIGN.md §Engine, "Asynchronous scheduling"), for one
    /// engine's step and a DP rank's alike: an empty batch with a step in flight lets that step's outputs
    /// arrive and asks for the schedule again at `t` (true); otherwise notes whether a step is now in
    /// flight and, in a hybrid pool, each scheduled sequence's tokens in it (`settled`). False, doing
    /// nothing, without the rule. With a CPU tier, the batch queue's turn (`async_tier_turn`, `before`:
    /// the progress marks before the schedule).
    #[inline]
    pub(super) fn async_turn(&mut self, before: u64) -> bool {
        if !self.cfg.async_scheduling {
            return false;
        }
        if self.tier.is_some() {
            return self.async_tier_turn(before);
        }
        if self.scheduled.is_empty() && self.async_prev >= 0 {
            self.release_async_done();
            self.async_prev = -1;
            return true;
        }
        self.async_prev = if self.scheduled.is_empty() {
            -1
        } else {
            self.t
        };
        if self.sends.is_some() {
            // A prefill replica's connector defers its frees behind the step in flight (`victim_in_flight`).
            let step = self.step; // (the index this step is committed under)
            for &(k, _) in &self.scheduled {
                self.slab[k].sched_step = step;
            }
        }
        if self.cfg.groups.is_some() {
            let step = self.out.counters.num_steps; // (the index this step is committed under)
            for &(k, n) in &self.scheduled {
                if let Some(hs) = self.slab[k].hybrid.as_deref_mut() {
                    hs.flight = (step, n);
                }
            }
        }
        false
    }

    /// An idle engine's turn before it jumps to the next arrival; returns whether it took one. With a CPU
    /// tier under `async_scheduling`, the batch in flight's output arrives (`tier_output`), unless the
    /// finished requests' last stores wait for a batch of their own. Under `async_scheduling`, nothing
    /// left to schedule behind the step in flight (its batch was only discarded tokens): the engine waits
    /// for it, then takes arrivals up to its end. With a CPU tier, the finished requests' last stores, in
    /// a step of their own (under `async_scheduling` a batch, `async_tier_turn`).
    #[inline]
    pub(super) fn idle_turn(&mut self) -> bool {
        if self
            .tier
            .as_ref()
            .is_some_and(|t| t.batches.flight && !t.has_finished_last())
        {
            self.tier_output();
            return true;
        }
        let finished_last = self.tier.as_ref().is_some_and(|t| t.has_finished_last());
        if finished_last && self.cfg.async_scheduling {
            // (before the wait below: vLLM schedules the batch naming them while the batch in flight, of
            // discarded tokens only, runs, and takes that batch's output, its deferred frees, before the
            // schedule after)
            self.full_step();
            return true;
        }
        if self.async_prev >= 0 {
            self.async_prev = -1;
            return true;
        }
        if finished_last {
            self.tier_empty_step();
            return true;
        }
        false
    }

    /// One step with every running sequence walked explicitly (the reference's loop, rule for rule).
    /// Returns false if nothing was scheduled (every waiting head was rejected: no time passes).
    pub(super) fn full_step(&mut self) -> bool {
        let before = self.progress_marks(); // (a tier's only)
        self.schedule();
        if self.async_turn(before) {
            return true;
        }
        if self.scheduled.is_empty() {
            return self.tier.is_some() && self.tier_scheduled_nothing(before);
        }
        if self.log.is_some() {
            self.log_schedule(0);
        }
        // async_scheduling: the step in flight's outputs arrive after the schedule
        self.release_async_done();
        let (mut dt, tokens) = self.step_time();
        if self.tier.is_some() {
            dt = self.tier_step_stores(dt);
        }
        let m = self.memory_state();
        self.record(dt, self.scheduled.len() as u64, tokens, m);
        self.finish_step();
        if self.tier.is_some() {
            self.observe();
        }
        self.maybe_enter_lockstep();
        true
    }
}
