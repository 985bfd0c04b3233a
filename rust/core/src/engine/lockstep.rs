//! Lockstep mode: event skipping (SPEC §6). While every running sequence decodes one token per step and
//! the token budget covers them all, a sequence only needs attention at its *events*: the step it needs a
//! new block, the step a block of its fills (its key is registered, caching on), and the step it
//! finishes. Between events it gains one computed and one generated token per step and nothing in the
//! pool changes, so the engine keeps it implicit: `base_step`, `base_c`, `base_g` give its state at any
//! step; a calendar ring of per-step buckets (sorted by admission order when a step comes up: the order
//! the reference walks the running list) holds the events; sums over the running list are kept
//! incrementally (`Aggregates`). Work per step is then O(events + arrivals + admissions), not O(running).
//!
//! Key registration of a filled block may wait until the sequence's next event (its next block, its
//! finish, its preemption, or the end of lockstep) when no prompt in the workload quotes an output: then
//! no lookup can hit a block holding generated tokens before its owner frees it, the block is in use so
//! no free-queue order or eviction can see the difference, and one event per block is saved.
//!
//! Everything else (the waiting phase, admissions, preemption of the tail, finishing) runs the same code
//! as a full step, so results equal the reference's step for step. A step that leaves a sequence
//! prefilling, or more running sequences than the budget, drops back to full steps.

use super::{Engine, MAX_TIME_PS, Memory, MemoryState, Seq, TimeModel, first_start_at_or_after};
use crate::block_table::{blocks_for, rem_bs};

/// What `fast_event` did with a ring entry.
enum Fast {
    /// A stale entry: nothing to do.
    Stale,
    /// The whole event, done.
    Done,
    /// Not the common case: nothing changed, the general path takes it.
    Slow,
}

/// Unused slots in a last block holding `r` tokens (`r` = tokens mod block size).
#[inline]
fn slack_of(r: u64, block_size: u64) -> i64 {
    if r == 0 { 0 } else { (block_size - r) as i64 }
}

impl Engine<'_> {
    #[inline]
    fn slack(&self, c: u64) -> i64 {
        slack_of(self.rem_bs(c), self.cfg.block_size)
    }

    #[inline]
    fn rem_bs(&self, x: u64) -> u64 {
        rem_bs(x, self.cfg.block_size)
    }

    /// The aggregate contribution of sequence `s` (after the current step's allocation) in the state
    /// `self.agg` assumes: computed tokens, block slack and blocks covered.
    fn contribution(&self, s: &Seq) -> (u64, i64, u64) {
        let c = s.num_computed;
        (c, self.slack(c), blocks_for(c, self.cfg.block_size))
    }

    /// What `self.agg` holds for lazy `s` at step `j`, after the step's implicit advance.
    fn implicit(&self, s: &Seq, j: u64) -> (u64, i64, u64) {
        let d = j - s.base_step + 1;
        let c = s.base_c;
        (
            c + d,
            self.slack(c) - d as i64,
            blocks_for(c, self.cfg.block_size),
        )
    }

    fn add(&mut self, (c, int, log): (u64, i64, u64), k: usize, sign: i64) {
        let s = &self.slab[k];
        let (fin, size) = (s.prompt_len + s.target, s.region.map_or(0, |r| r.1));
        let a = &mut self.agg;
        if sign > 0 {
            a.c += c;
            a.internal += int;
            a.logical = a.logical.wrapping_add(log);
            a.fin += fin;
            a.size += size;
        } else {
            a.c -= c;
            a.internal -= int;
            // Wrapping, as release builds do: contiguous policies never read `logical`, and there a
            // finisher's covered blocks can exceed what its lazy contribution added (debug builds
            // stopped on that; paged runs read it, and it stays exact there).
            a.logical = a.logical.wrapping_sub(log);
            a.fin -= fin;
            a.size -= size;
        }
    }

    /// The next step at which lazy `s` must be touched (at most one ring's length ahead: a far event
    /// becomes a wake-up that only rebases the sequence).
    fn next_event(&self, s: &Seq) -> u64 {
        let paged = match &self.mem {
            Memory::Paged(pool) => {
                let r = self.rem_bs(s.base_c);
                if self.forks
                    && r != 0
                    && s.table
                        .blocks()
                        .last()
                        .is_some_and(|&b| pool.ref_cnt_of(b) > 1)
                {
                    return s.base_step; // its next write copies a shared partial block (copy-on-write)
                }
                Some(r)
            }
            Memory::Contiguous(_) => None,
        };
        s.base_step + self.event_distance(s.target - 1 - s.base_g, paged)
    }

    /// Steps from a lazy sequence's base to its next event, given the tokens it has left to generate
    /// after the base's and (paged) the tokens in its last block. Finishes cap at `ring_mask - 1` (a far
    /// one becomes a wake-up), so an event is at most one ring length after the current step and never
    /// lands in the current step's bucket, taken out while it is processed.
    #[inline]
    fn event_distance(&self, left: u64, last_block_tokens: Option<u64>) -> u64 {
        let bs = self.cfg.block_size;
        let mut d = left.min(self.ring_mask as u64 - 1);
        if let Some(r) = last_block_tokens {
            d = d.min(if r == 0 { 0 } else { bs - r }); // needs a new block
            if self.fill_events {
                d = d.min(bs - 1 - r); // fills a block: register its key
            }
        }
        d
    }

    /// Registers keys of blocks `k` filled since its last event (deferred registration, see above).
    fn flush_keys(&mut self, k: usize) {
        if let Memory::Paged(pool) = &mut self.mem {
            let s = &mut self.slab[k];
            s.sync_output();
            let phantom = self.defer_keys.then_some(s.private_from);
            s.table
                .register_full_blocks_cached(pool, self.cfg.block_size, &s.segs, &[], phantom);
        }
    }

    /// The running phase's common case, all of it in one place with one look at the sequence: a paged
    /// decode step that needs no copy, no reservation and no event log, and either no block or a free
    /// one taken while no CPU-tier fence stands (else `try_grow` notes it for vLLM's flush). Does what
    /// `sync`, `try_grow`, the aggregate correction, sampling and `make_lazy` do there; `Slow` (nothing
    /// changed) leaves the rest to them.
    #[inline]
    fn fast_event<const G: bool>(&mut self, adm: u64, k: usize, step: u64) -> Fast {
        let bs = self.cfg.block_size;
        let s = &mut self.slab[k];
        if !(s.lazy && s.adm_no == adm && s.next_event == step) {
            return Fast::Stale; // the sequence finished, was preempted, or was rebased since
        }
        let (Memory::Paged(pool), None) = (&mut self.mem, &self.log) else {
            return Fast::Slow;
        };
        let since = step - s.base_step;
        let c = s.base_c + since; // computed before this step
        let gen_after = s.base_g + since + 1; // generated after it
        let rem = rem_bs(c, bs);
        if rem == 0 {
            if s.reserved_blocks > 0
                || (self.forks && s.group.is_some())
                || (self.tier_hot.pending && self.tier.as_ref().is_some_and(|t| t.may_fence()))
            {
                // (a group's blocks are checked as a whole, `lockstep_group`; while a CPU tier's store
                // may fence blocks, a fence or a finished request's last offer, the step's new blocks
                // are watched for vLLM's flush, `try_grow`)
                return Fast::Slow;
            }
            let Some(block) = pool.allocate_one() else {
                return Fast::Slow; // preemption
            };
            s.table.blocks.push(block);
        } else if self.forks {
            return Fast::Slow; // the last block may be shared: copy-on-write
        }
        s.num_computed = c + 1;
        s.table.num_computed_tokens = c + 1;
        s.generated = gen_after;
        s.decoding = true;
        if self.cfg.enable_prefix_caching {
            if !self.defer_keys {
                s.sync_output(); // output blocks get real keys: hash the current output length
            }
            let from = self.defer_keys.then_some(s.private_from);
            s.table
                .register_full_blocks_cached(pool, bs, &s.segs, &[], from);
        }
        // The implicit advance assumed +1 token and -1 slack in the same blocks: correct it.
        let r1 = rem_bs(c + 1, bs);
        self.agg.internal += slack_of(r1, bs) - slack_of(rem, bs) + 1;
        self.agg.logical += u64::from(rem == 0);
        if gen_after == s.target {
            self.touched.push(k); // finishes after the step
            return Fast::Done;
        }
        // make_lazy from step + 1 (the last block is this sequence's own: no copy-on-write ahead).
        s.base_step = step + 1;
        s.base_c = c + 1;
        s.base_g = gen_after;
        // `event_distance(s.target - 1 - gen_after, Some(r1))`, written out: called here, the helper
        // costs 2 % of the run's instructions (callgrind).
        let mut d = (s.target - 1 - gen_after).min(self.ring_mask as u64 - 1);
        d = d.min(if r1 == 0 { 0 } else { bs - r1 });
        if self.fill_events {
            d = d.min(bs - 1 - r1);
        }
        let next = step + 1 + d;
        s.next_event = next;
        self.ring[next as usize & self.ring_mask].push((adm, k));
        Fast::Done
    }

    /// Makes `k` implicit from step `from` on, with its current computed and generated counts.
    #[inline]
    fn make_lazy(&mut self, k: usize, from: u64) {
        let s = &mut self.slab[k];
        s.lazy = true;
        s.base_step = from;
        s.base_c = s.num_computed;
        s.base_g = s.generated;
        let next = self.next_event(&self.slab[k]);
        let s = &mut self.slab[k];
        s.next_event = next;
        self.ring[next as usize & self.ring_mask].push((s.adm_no, k));
    }

    /// Writes lazy `k`'s state at the start of step `j` into its fields.
    fn sync(&mut self, k: usize, j: u64) {
        let s = &mut self.slab[k];
        let d = j - s.base_step;
        s.num_computed = s.base_c + d;
        s.table.num_computed_tokens = s.num_computed;
        s.set_generated(s.base_g + d);
        s.decoding |= d > 0; // each implicit step sampled a token
        // Lazy, it sampled a token in every step before `j` since its last recorded one (ITL).
        (s.itl_last, s.itl_last_t) = (j - 1, self.t);
    }

    /// Under `one_free_block`, whether the pool may run empty during the next step's running phase (each
    /// running sequence pops at most one block): then every sequence must be checked, as a full step does.
    pub(super) fn one_free_block_binds(&self) -> bool {
        self.cfg.one_free_block
            && matches!(&self.mem, Memory::Paged(pool) if pool.num_free_blocks() as usize <= self.running.len())
    }

    /// After a full step: enter lockstep if every running sequence decodes and the budget covers them.
    pub(super) fn maybe_enter_lockstep(&mut self) {
        if self.running.is_empty()
            || self.cfg.groups.is_some()
            || self.cfg.async_scheduling
            || matches!(&self.cfg.time, TimeModel::Roofline(r) if r.needs_full_steps())
            || self.running.len() as u64 > self.cfg.max_num_batched_tokens
            || self.one_free_block_binds()
            || (self.tier.is_some() && !self.tier_quiet())
        {
            return;
        }
        // Decoding: one pending token, and past the first (a prompt with one token left to prefill also
        // has one pending token, but its step samples the first token, which must be recorded).
        // And sampled in the step just taken (ITL: a lazy sequence's tokens are consecutive; one left
        // out of that step, its budget spent, waits a full step).
        let step = self.step;
        let decoding = |s: &Seq| {
            s.num_tokens() - s.num_computed == 1 && s.generated >= 1 && s.itl_last + 1 == step
        };
        if !self.running.iter().all(|&k| decoding(&self.slab[k])) {
            return;
        }
        self.lockstep = true;
        for bucket in &mut self.ring {
            bucket.clear();
        }
        self.agg = super::Aggregates::default();
        for i in 0..self.running.len() {
            let k = self.running[i];
            let contribution = self.contribution(&self.slab[k]);
            self.add(contribution, k, 1);
            self.make_lazy(k, self.step);
        }
    }

    pub(super) fn exit_lockstep(&mut self) {
        for i in 0..self.running.len() {
            let k = self.running[i];
            if self.slab[k].lazy {
                self.sync(k, self.step);
                self.flush_keys(k);
                self.slab[k].lazy = false;
            }
        }
        for bucket in &mut self.ring {
            bucket.clear();
        }
        self.lockstep = false;
    }

    /// One step in lockstep mode; same outcome as `full_step`. Returns false if nothing was scheduled.
    pub(super) fn lockstep_step(&mut self) -> bool {
        if self.one_free_block_binds() {
            // A sequence without an event could find the pool empty this step: walk them all.
            self.exit_lockstep();
            return self.full_step();
        }
        let marks = self.progress_marks(); // (a tier's only)
        let step = self.step;
        let Some((tokens, decoding_keys)) = self.lockstep_schedule::<false>() else {
            return self.tier.is_some() && self.tier_scheduled_nothing(marks);
        };
        let batch = self.running.len() as u64;
        let mut dt = if matches!(self.cfg.time, TimeModel::Roofline(_)) {
            self.lockstep_time(tokens, decoding_keys)
        } else {
            self.linear_time(tokens, self.agg.c)
        };
        // A CPU tier (present or not for the whole run): the admitted requests' stores and the
        // finished ones' (the decoding ones offer nothing: `tier_quiet`), and the flush; none of it
        // when nobody was admitted and nothing is pending (`tier_idle`: the usual decode step, which
        // stays quiet whatever the observation sees: it adds no fence).
        let mut tier_moves = false;
        if self.tier.is_some() && !self.tier_idle() {
            (dt, tier_moves) = self.tier_lockstep_stores(dt);
        }
        let state = self.aggregate_state();
        self.record(dt, batch, tokens, state);
        self.lockstep_finish::<false>(step, tier_moves);
        true
    }

    /// A lockstep step's first half (the running phase, the admissions, the aggregates): its batched
    /// tokens and the running sequences' keys before the admissions joined, or None when nothing was
    /// scheduled (lockstep is left). Shared by `lockstep_step` (`G` false) and a DP rank's `group_plan`
    /// (`G` true): one copy each, down to `fast_event` (and a closure for `is_sorted`), so that each
    /// callee has one caller and one engine's step inlines them as before they were shared (shared, they
    /// were called out of line: +5.9 % to +13.6 % of the single-engine benchmark's instructions,
    /// results/README.md, "DP groups' fast paths").
    #[inline]
    pub(super) fn lockstep_schedule<const G: bool>(&mut self) -> Option<(u64, u64)> {
        let step = self.step;
        let before = self.running.len() as u64;
        self.agg.c += before;
        self.agg.internal -= before as i64;
        let preempted = self.lockstep_running_phase::<G>(step);
        let decoding = self.running.len() as u64;
        self.scheduled.clear();
        if !preempted && (!self.nothing_waits() || !self.swapped.is_empty()) {
            self.admit_waiting(self.cfg.max_num_batched_tokens - decoding);
        }
        let mut tokens = decoding;
        let decoding_keys = self.agg.c; // the running sequences' keys, before the admissions join
        for i in 0..self.scheduled.len() {
            let (k, n) = self.scheduled[i];
            tokens += n;
            let contribution = self.contribution(&self.slab[k]);
            self.add(contribution, k, 1);
        }
        if self.running.is_empty() {
            self.exit_lockstep();
            return None;
        }
        if self.log.is_some() {
            self.log_schedule(decoding as usize);
        }
        Some((tokens, decoding_keys))
    }

    /// A lockstep step's second half, after `record` of step `step`: sampling, and lockstep left where the step leaves
    /// a sequence prefilling, the tier moving, nothing running or more running than the budget.
    #[inline]
    pub(super) fn lockstep_finish<const G: bool>(&mut self, step: u64, tier_moves: bool) {
        let prefilling = self.lockstep_sample::<G>(step);
        if self.tier.is_some() {
            self.observe();
        }
        if prefilling
            || tier_moves
            || self.running.is_empty()
            || self.running.len() as u64 > self.cfg.max_num_batched_tokens
        {
            self.exit_lockstep();
        }
    }

    /// Takes the *quiet* steps from the current one on together, in closed form, and returns whether it
    /// took any (at least two). A step is quiet when no sequence has an event in it, nothing waits or is
    /// swapped out (so admission has nothing to try) and no arrival joins at its start: then every
    /// running sequence gains one token, the blocks, the batch and the budget stay as they are, and the
    /// step's duration and the memory state it is weighed with change linearly from step to step. A
    /// recorded time-series step is never skipped.
    #[inline(never)]
    pub(super) fn skip_quiet_steps(&mut self, next_arrival: Option<i64>) -> bool {
        if !self.nothing_waits()
            || !self.swapped.is_empty()
            || self.running.is_empty()
            || self.swap_blocks_step != 0
            || self.one_free_block_binds()
            || self.tier_hot.pending && self.tier_offers_pending()
        {
            return false;
        }
        // The caps first (the bucket scan below is the costly part): at most a ring's length, never a
        // recorded time-series step, nor one at whose start an arrival joins. `run` reads the cancel
        // flag after the span, which is at most a ring's length of steps (a scan of as many buckets).
        let (step, mask) = (self.step, self.ring_mask);
        let mut span = mask as u64;
        if self.ts_every > 0 {
            span = span.min((self.ts_every - step % self.ts_every) % self.ts_every);
        }
        if span < 2 || !self.ring[(step + 1) as usize & mask].is_empty() {
            return false; // the next step has an event: nothing to take together
        }
        let batch = self.running.len() as u64;
        let (dt0, ddt) = self.quiet_step_lengths();
        let start = |j: u64| -> i128 {
            let j = i128::from(j);
            j * dt0 + ddt * (j * (j - 1) / 2) // start of step j, from the span's start
        };
        if let Some(arrival) = next_arrival {
            // An arrival joins at the first step starting at or after it: the span ends before that.
            let gap = i128::from(arrival - self.t);
            if ddt == 0 {
                // Steps of equal length: the first step starting at or after the arrival, directly.
                if dt0 > 0 {
                    let first = (gap + dt0 - 1) / dt0;
                    span = span.min(u64::try_from(first).unwrap_or(u64::MAX));
                }
            } else if start(span - 1) >= gap {
                span = first_start_at_or_after!(1, span - 1, gap, start); // start(0) < gap <= start(span - 1)
            }
        }
        if let Some(end) = self.tier.is_some().then(|| self.next_transfer()).flatten() {
            // A CPU tier: a transfer is seen at the end of the first step ending at or after its end,
            // which is taken alone: the span holds only steps ending before it (step j ends when step
            // j + 1 starts).
            let gap = i128::from(end - self.t);
            let (mut lo, mut hi) = (0u64, span); // steps 0..lo end before `end`
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if start(mid) < gap {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            span = span.min(lo);
        }
        // Then the events: the span ends at the next bucket holding anything (a stale entry too).
        let limit = span;
        span = 0;
        while span < limit && self.ring[(step + span) as usize & mask].is_empty() {
            span += 1;
        }
        // A span running past the clock's range is left to single steps, which stop at the right one.
        if span < 2 || i128::from(self.t) + start(span) > i128::from(MAX_TIME_PS) {
            return false;
        }
        self.take_quiet_steps(span, batch, dt0, ddt);
        true
    }

    /// Step j of a quiet span (from 0) lasts `dt0 + ddt j`: the context read grows by the batch a step.
    /// The roofline's is affine too: every term but decode attention depends on the batch alone, and
    /// decode attention is `max(kv, flop)` per key read (full attention only: a window keeps the
    /// engine out of lockstep). A duration past `i64` (saturated) is past the clock's range: the
    /// caller leaves such a span to single steps.
    #[inline]
    pub(super) fn quiet_step_lengths(&self) -> (i128, i128) {
        let batch = self.running.len() as u64;
        let wide = |x: u64| i128::from(x);
        match &self.cfg.time {
            TimeModel::Ticks { iteration_ps } => (wide(*iteration_ps), 0),
            TimeModel::Linear {
                c0_ps,
                c_tok_ps,
                c_ctx_ps,
            } => (
                wide(*c0_ps)
                    + wide(*c_tok_ps) * wide(batch)
                    + wide(*c_ctx_ps) * wide(self.agg.c + batch),
                wide(*c_ctx_ps) * wide(batch),
            ),
            TimeModel::Roofline(r) => {
                let dec = r.decode_ps();
                let keys = u128::from(self.agg.c + batch);
                let cap =
                    |x: u128| i128::try_from(x.min(u128::from(u64::MAX))).unwrap_or(i128::MAX);
                (
                    cap(r
                        .base(batch, batch)
                        .saturating_add(dec.saturating_mul(keys))),
                    cap(dec.saturating_mul(u128::from(batch))),
                )
            }
        }
    }

    /// Records `span` quiet steps of `batch` decoding sequences, step j lasting `dt0 + ddt j`: the sums `record`
    /// would make one step at a time, in closed form (exact integers, so equal to the reference's).
    pub(super) fn take_quiet_steps(&mut self, span: u64, batch: u64, dt0: i128, ddt: i128) {
        let (kk, nn) = (i128::from(span), i128::from(batch));
        let s1 = kk * (kk - 1) / 2; // sum of j
        let s2 = (kk - 1) * kk * (2 * kk - 1) / 6; // sum of j^2
        let busy = dt0 * kk + ddt * s1;
        // Sum over the span of dt_j * x_j, where x_j = x + dx j.
        let weigh = |x: i128, dx: i128| dt0 * x * kk + (dt0 * dx + ddt * x) * s1 + ddt * dx * s2;
        let bs = self.cfg.block_size;
        // Step j's state: c and slack after its advance, j + 1 tokens into the span.
        let c1 = i128::from(self.agg.c) + nn;
        let internal1 = i128::from(self.agg.internal) - nn;
        // Held requests' tables (`idle_table_blocks`): constant over a span, as the pool's held blocks.
        let idle = if matches!(self.mem, Memory::Paged(_)) {
            self.idle_table_blocks()
        } else {
            0
        };
        let ctr = &mut self.out.counters;
        ctr.w_batch += weigh(nn, 0);
        match &self.mem {
            Memory::Paged(pool) => {
                let held = self.cfg.capacity_blocks() - u64::from(pool.num_free_blocks());
                ctr.w_internal += weigh(internal1, -nn);
                ctr.w_reserved += weigh(i128::from(self.outstanding * bs), 0);
                ctr.w_held_blocks += weigh(i128::from(held), 0);
                ctr.w_logical_blocks += weigh(i128::from(self.agg.logical) + i128::from(idle), 0);
                self.peak_held = self.peak_held.max(held);
            }
            Memory::Contiguous(space) => {
                let (size, fin) = (i128::from(self.agg.size), i128::from(self.agg.fin));
                ctr.w_stored += weigh(c1, nn);
                ctr.w_allocated += weigh(size, 0);
                ctr.w_internal += weigh(size - fin, 0);
                ctr.w_reserved += weigh(fin - c1, -nn);
                ctr.w_external += weigh(i128::from(space.external_fragmentation()), 0);
                ctr.peak_allocated_tokens = ctr.peak_allocated_tokens.max(size);
            }
        }
        // (A quiet tier holds still: its occupancy takes these steps at its next flush.)
        ctr.num_steps += kk;
        ctr.busy_ps += busy;
        ctr.sum_batch += kk * nn;
        ctr.sum_batched_tokens += kk * nn;
        ctr.peak_batch = ctr.peak_batch.max(nn);
        // Exact: each step's duration is below the clock's range (checked by the caller).
        self.out.itl_steps.push_steps(dt0 as i64, ddt as i64, span);
        self.agg.c += span * batch;
        self.agg.internal -= (span * batch) as i64;
        self.t += busy as i64;
        self.step += span;
    }

    /// The running phase: only sequences with an event at `step` are touched, in admission order; the
    /// others gain their token implicitly. Returns whether anything was preempted.
    fn lockstep_running_phase<const G: bool>(&mut self, step: u64) -> bool {
        let mask = self.ring_mask;
        let mut bucket = std::mem::take(&mut self.ring[step as usize & mask]);
        // (a closure, not `is_sorted`: one instance per copy of this function, each inlined)
        if bucket.len() > 1 && !bucket.windows(2).all(|w| w[0] <= w[1]) {
            bucket.sort_unstable();
        }
        self.touched.clear();
        let mut preempted = false;
        for &(adm, k) in &bucket {
            match self.fast_event::<G>(adm, k, step) {
                Fast::Stale | Fast::Done => continue,
                Fast::Slow => {}
            }
            if self.forks
                && self.slab[k].group.is_some()
                && self.lockstep_group(k, step, &mut preempted)
            {
                continue;
            }
            self.sync(k, step);
            loop {
                let c = self.slab[k].num_computed;
                if self.try_grow(k, 1, true) {
                    self.grown_and_sampled(k, c, step);
                    break;
                }
                preempted = true;
                if self.lockstep_preempt_tail(k, step) {
                    break;
                }
            }
        }
        bucket.clear();
        self.ring[step as usize & mask] = bucket;
        preempted
    }

    /// Preempts the running list's tail unit (a sequence or a whole group) in the running phase, its
    /// members' implicit state written out first; returns whether `k` was in it.
    fn lockstep_preempt_tail(&mut self, k: usize, step: u64) -> bool {
        let victim = self.pop_tail_unit();
        let own = victim.contains(&k);
        for &v in &victim {
            let held = self.implicit(&self.slab[v], step);
            self.add(held, v, -1);
            self.sync(v, step); // again for `k`: the same state
            self.flush_keys(v);
            self.slab[v].lazy = false;
        }
        self.preempt_unit(&victim);
        own
    }

    /// A group member's event: if its group needs blocks this step (every member reaches a block boundary,
    /// or writes into the partial block they share), the whole group is checked, grown (or the tail
    /// preempted) and sampled here, as the running phase of a full step does. Returns false, with nothing
    /// done, when the member can be handled on its own (no block needed, or alone in its group). The
    /// members of a group compute in step and sit together in admission order, so the first of them
    /// comes first in the bucket; each has an event at such a step.
    fn lockstep_group(&mut self, k: usize, step: u64, preempted: &mut bool) -> bool {
        let adm = self.slab[k].adm_no;
        let start = self.running.partition_point(|&x| self.slab[x].adm_no < adm);
        assert_eq!(
            self.running.get(start),
            Some(&k),
            "the running list is sorted"
        );
        let end = self.unit_end(start);
        let first = start == 0 || self.slab[self.running[start - 1]].group != self.slab[k].group;
        if end - start == 1 || !first {
            return false;
        }
        for idx in start..end {
            let member = self.running[idx];
            self.sync(member, step);
        }
        if self.group_need(start, end) == 0 {
            return false; // nothing to pop: each member on its own, at its own events
        }
        while !self.group_fits(start, end) {
            *preempted = true;
            if self.lockstep_preempt_tail(k, step) {
                return true;
            }
        }
        for idx in start..end {
            let member = self.running[idx];
            let c = self.slab[member].num_computed;
            let grown = self.try_grow(member, 1, false);
            assert!(grown, "the group's room was checked");
            self.grown_and_sampled(member, c, step);
        }
        true
    }

    /// After `k` (which had computed `c` tokens) grew by this step's token in the running phase: corrects
    /// the implicit advance (+1 token, -1 slack, same blocks) to the truth and samples now (nothing later
    /// in the step reads `k`, and it cannot be a preemption victim: victims come from the tail, admitted
    /// after any touched sequence). A finisher waits for the step's end in `touched`, its other entries in
    /// this bucket (a group's) made stale; the others go on lazily.
    fn grown_and_sampled(&mut self, k: usize, c: u64, step: u64) {
        let bs = self.cfg.block_size;
        self.agg.internal += self.slack(c + 1) - self.slack(c) + 1;
        // Wrapping: see `add` (contiguous runs never read `logical`).
        self.agg.logical = self
            .agg
            .logical
            .wrapping_add(blocks_for(c + 1, bs) - blocks_for(c, bs));
        let s = &mut self.slab[k];
        s.generate_one();
        if s.generated == s.target {
            s.next_event = u64::MAX;
            self.touched.push(k);
        } else {
            self.make_lazy(k, step + 1);
        }
    }

    /// Sampling after a lockstep step: touched sequences that reached their target (the others sampled
    /// in the running phase), then admitted ones (the scheduled order), finish or go on lazily. Returns
    /// whether an admitted sequence is still prefilling.
    fn lockstep_sample<const G: bool>(&mut self, step: u64) -> bool {
        let t = self.t;
        let mut prefilling = false;
        self.done.clear();
        self.done.extend_from_slice(&self.touched);
        for i in 0..self.scheduled.len() {
            let k = self.scheduled[i].0;
            if self.slab[k].num_computed < self.slab[k].num_tokens() {
                prefilling = true;
                continue;
            }
            self.note_token(k, step);
            let s = &mut self.slab[k];
            s.generate_one();
            if self.out.first_token[s.row - self.out_base] < 0 {
                self.out.first_token[s.row - self.out_base] = t;
            }
            let finished = s.generated == s.target;
            if finished {
                self.done.push(k);
            }
            if s.num_children > 0 && !s.forked {
                for i in self.fork(k) {
                    let c = self.running[i];
                    let contribution = self.contribution(&self.slab[c]);
                    self.add(contribution, c, 1);
                    if self.slab[c].generated < self.slab[c].target {
                        self.make_lazy(c, step + 1);
                    }
                }
            }
            if !finished {
                self.make_lazy(k, step + 1);
            }
        }
        for i in 0..self.done.len() {
            let k = self.done[i];
            let contribution = self.contribution(&self.slab[k]);
            self.add(contribution, k, -1);
        }
        self.retire_done();
        prefilling
    }

    pub(super) fn aggregate_state(&self) -> MemoryState {
        let bs = self.cfg.block_size;
        let a = self.agg;
        match &self.mem {
            Memory::Paged(pool) => {
                let held = self.cfg.capacity_blocks() - u64::from(pool.num_free_blocks());
                let internal = a.internal as u64;
                MemoryState {
                    stored: held * bs - internal,
                    allocated: held * bs,
                    internal,
                    reserved: self.outstanding * bs,
                    external: 0,
                    held,
                    logical: a.logical + self.idle_table_blocks(),
                    extra: 0,
                }
            }
            Memory::Contiguous(space) => MemoryState {
                stored: a.c,
                allocated: a.size,
                internal: a.size - a.fin,
                reserved: a.fin - a.c,
                external: space.external_fragmentation(),
                held: 0,
                logical: 0,
                extra: 0,
            },
        }
    }
}
