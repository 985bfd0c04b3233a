//! The CPU tier's observations (DESIGN.md §CPU tier): when the engine sees transfers complete, the
//! stall of an engine that waits for nothing but transfers, and the quiet, progress and occupancy
//! helpers the run loop and lockstep mode read.

use super::{Job, Stored, What};
use crate::engine::{Engine, MAX_TIME_PS, event};

impl Engine<'_> {
    /// An observation point at `t` (a step's end, an idle jump, a stall's end): every transfer that has
    /// ended and that this observation may see completes. Returns whether one did.
    #[inline]
    pub(in crate::engine) fn observe(&mut self) -> bool {
        self.tier_hot.observed += 1;
        if self.t < self.tier_hot.min_end {
            return false; // (nothing in flight has ended: most observations)
        }
        self.observe_now()
    }

    /// `observe` when a transfer in flight may have ended: the usual case, one own run's store in
    /// flight, done, no load (nothing else in flight after it), seen in place; any other, by
    /// `observe_any`.
    #[inline(never)]
    fn observe_now(&mut self) -> bool {
        let (t, now) = (self.t, self.tier_hot.observed);
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        if tier.loads.is_empty()
            && let [job] = tier.stores.as_slice()
            && job.end <= t
            && job.avail <= now
            && let What::Own { h, lo, n } = job.what
        {
            let (k, row) = (job.k, job.row);
            tier.stores.clear();
            tier.cpu
                .complete_own_store(h, super::private_hi(row), lo, n);
            self.tier_hot.min_end = i64::MAX;
            self.store_seen(k, row, n);
            return true;
        }
        self.observe_any()
    }

    /// `observe_now` of anything in flight.
    #[inline(never)]
    fn observe_any(&mut self) -> bool {
        let mut tier = self.tier.take().expect("a CPU tier");
        let (t, now) = (self.t, self.tier_hot.observed);
        let done = |j: &Job| j.end <= t && j.avail <= now;
        if tier.loads.is_empty()
            && let [job] = tier.stores.as_slice()
            && done(job)
        {
            // One store in flight, done, no load: nothing else in flight after it.
            let job = tier.stores.pop().expect("one store");
            self.store_done(&mut tier, job);
            self.tier_hot.min_end = i64::MAX;
            self.tier = Some(tier);
            return true;
        }
        let mut seen = false;
        if tier.loads.iter().any(done) {
            let loads = std::mem::take(&mut tier.loads);
            for job in loads {
                if !done(&job) {
                    tier.loads.push(job);
                    continue;
                }
                let What::Load(keys) = &job.what else {
                    // (a decode replica's transfer)
                    self.slab[job.k].jobs -= 1;
                    tier.watch.landings += 1;
                    self.land(job.k);
                    continue;
                };
                tier.cpu.complete_load(keys);
                for key in keys {
                    if let Some(n) = tier.loading.get_mut(key) {
                        *n -= 1;
                        if *n == 0 {
                            tier.loading.remove(key);
                        }
                    }
                }
                self.slab[job.k].jobs -= 1;
                tier.watch.landings += 1;
                self.land(job.k);
                self.log_count(event::LOAD_DONE, job.row, -1, keys.len() as i64);
            }
            seen = true;
        }
        if let [job] = tier.stores.as_slice()
            && done(job)
        {
            // One store in flight, done (the usual case): no reordering to do.
            let job = tier.stores.pop().expect("one store");
            self.store_done(&mut tier, job);
            seen = true;
        } else if tier.stores.iter().any(done) {
            // The stores not done kept in order, in the spare vector (no allocation).
            let mut stores =
                std::mem::replace(&mut tier.stores, std::mem::take(&mut tier.stores_spare));
            for job in stores.drain(..) {
                if done(&job) {
                    self.store_done(&mut tier, job);
                } else {
                    tier.stores.push(job);
                }
            }
            tier.stores_spare = stores;
            seen = true;
        }
        self.tier_hot.min_end = tier.min_end();
        self.tier = Some(tier);
        seen
    }

    /// A store seen done: its chunks ready, its blocks unfenced, its request's count of transfers down,
    /// its vectors kept for a later store (`offer_one`; a run's job has no keys' vector).
    #[inline(always)]
    #[allow(clippy::inline_always)] // one call a request: measured (results/README.md §CPU tier)
    fn store_done(&mut self, tier: &mut super::Tier, job: Job) {
        let Job {
            id, k, row, what, ..
        } = job;
        let n = match what {
            What::Own { h, lo, n } => return self.own_done(tier, (k, row), h, lo, n),
            What::Run { hi, lo, n } => {
                tier.cpu.complete_store_run(hi, lo, n);
                n
            }
            What::Stored(mut st) => {
                let n = if let Some((hi, lo, n)) = st.run {
                    tier.cpu.complete_store_run(hi, lo, n);
                    n
                } else {
                    tier.cpu.complete_store(&st.keys);
                    st.keys.len() as u64
                };
                if !tier.fences.is_empty() {
                    tier.unfence(id, &st.blocks);
                }
                let Stored { keys, blocks, .. } = &mut *st;
                if keys.capacity() > 0 {
                    keys.clear();
                    tier.spare_keys.push(std::mem::take(keys));
                }
                if blocks.capacity() > 0 {
                    blocks.clear();
                    tier.spare_blocks.push(std::mem::take(blocks));
                }
                n
            }
            What::Load(_) | What::Remote => unreachable!("a store"),
        };
        self.store_seen(k, row, n);
    }

    /// `store_done` of an own run's store (`What::Own`, handle `h`, chunks `lo..lo + n`) of request
    /// `k` of row `row`.
    #[inline(always)]
    #[allow(clippy::inline_always)] // one call a request: measured (results/README.md §CPU tier)
    fn own_done(
        &mut self,
        tier: &mut super::Tier,
        (k, row): (usize, usize),
        h: u32,
        lo: u64,
        n: u64,
    ) {
        tier.cpu
            .complete_own_store(h, super::private_hi(row), lo, n);
        self.store_seen(k, row, n);
    }

    /// What every store seen done ends with (`store_done`, `own_done`): its request's count of
    /// transfers down (if it has not finished: its slot `k` still holds row `row`), and its
    /// `store-done` row of `n` chunks.
    #[inline(always)]
    #[allow(clippy::inline_always)] // the tail of the two above, one store a request: as it was written in them
    fn store_seen(&mut self, k: usize, row: usize, n: u64) {
        if k != usize::MAX && self.slab[k].row == row {
            self.slab[k].jobs -= 1; // (its request not finished)
        }
        self.log_count(event::STORE_DONE, row, -1, n as i64);
    }

    /// When the earliest transfer in flight ends (not before now), None if none is.
    pub(in crate::engine) fn next_transfer(&self) -> Option<i64> {
        let tier = self.tier_ref();
        tier.loads
            .iter()
            .chain(tier.stores.iter())
            .map(|j| j.end)
            .min()
            .map(|e| e.max(self.t))
    }

    /// A step that scheduled nothing: the finished requests' stores are offered now, then the engine
    /// observes; returns whether anything changed.
    #[inline(never)]
    pub(in crate::engine) fn tier_empty_step(&mut self) -> bool {
        self.scheduled.clear(); // (an idle engine's last step's batch may still be there)
        let (planned, flush_end) = self.offer_stores(self.t);
        self.t = self.t.max(flush_end);
        self.observe() || planned
    }

    /// Why a stalled engine with no transfer in flight and no arrival to come cannot go on: requests
    /// held for loads that landed and cannot continue (a deadlock vLLM would wait in), else a bug.
    #[cold]
    fn stall_error(&self) -> crate::KvError {
        let held = self.tier_ref().held.len();
        if held > 0 {
            return crate::KvError::InvalidArgument(format!(
                "the run deadlocks at {} ps: {held} {} blocks for loads that landed and cannot allocate what their prompts still need, and nothing runs; vLLM 0.33.0's and 0.34.0's scheduler would wait here forever (its reservation for requests still prefilling counts no block a sliding window needs: DESIGN.md §CPU tier)",
                self.t,
                if held == 1 {
                    "request holds"
                } else {
                    "requests hold"
                }
            ));
        }
        crate::KvError::Internal(format!("no progress at time {} ps", self.t))
    }

    /// A stalled engine jumps to the earliest end of a transfer or `arrival` (the next row's), if before
    /// `limit`, and observes there: `Ok(true)`; `Ok(false)` if it must wait for the caller; an error if
    /// nothing can ever happen.
    #[inline(never)]
    pub(in crate::engine) fn resolve_stall(
        &mut self,
        arrival: Option<i64>,
        limit: i64,
    ) -> crate::Result<bool> {
        let target = match (self.next_transfer(), arrival) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => {
                let Some(x) = a.or(b) else {
                    return Err(self.stall_error());
                };
                x
            }
        };
        if target >= limit {
            return Ok(false);
        }
        self.t = target;
        self.tier_hot.stalled = false;
        if !self.cfg.async_scheduling {
            self.observe(); // (asynchronous: only a batch's output observes, `async_tier.rs`)
        }
        Ok(true)
    }

    /// Decode steps leave the tier to the scheduled and finished requests: prompt tokens only, every
    /// running request's prompt offered (its decode steps offer nothing), and no store fencing blocks (a
    /// step's allocations must be watched for them: §CPU tier, flush). Lockstep mode may then run
    /// (lockstep.rs): its admissions, loads, stores and transfers are the full step's, as lockstep
    /// steps schedule, offer (`tier_step_stores`) and observe as full ones do.
    #[inline(never)]
    pub(in crate::engine) fn tier_quiet(&self) -> bool {
        let tier = self.tier_ref();
        if !tier.has_cpu {
            return true;
        }
        if !(tier.cfg.prompt_only && tier.fences.is_empty()) {
            return false;
        }
        self.running.iter().all(|&k| {
            let s = &self.slab[k];
            s.next_store >= tier.per_chunk(s.prompt_len)
        })
    }

    /// A step's tier work after scheduling, its duration `dt` so far: the scheduled requests still
    /// prefilling, the stores offered (from the step's end) and the flush; returns the step's duration.
    #[inline]
    pub(in crate::engine) fn tier_step_stores(&mut self, dt: u64) -> u64 {
        if self.nothing_to_offer() {
            self.tier_mut().touched.clear();
            return dt;
        }
        for i in 0..self.scheduled.len() {
            let s = &mut self.slab[self.scheduled[i].0];
            s.prefilling = s.prefilling && s.num_computed < s.num_tokens();
        }
        self.tier_step_stores_now(dt).0
    }

    /// `tier_step_stores_now` of a lockstep step (not `tier_idle`), its usual cases inline: only
    /// admissions to offer for (`offer_scheduled`: no flush, so the step's duration stands), only
    /// requests finished in the step before with nothing left to offer (`finish_retired`: the step
    /// stays quiet, as `tier_stays_quiet` then tells), or both (`offer_scheduled_then_finish`). Keep in
    /// step with `offer_stores`' dispatch (`offload/stores.rs`), whose cases these are.
    #[inline(always)]
    #[allow(clippy::inline_always)] // one call site, a lockstep step's: measured (results/README.md §CPU tier)
    pub(in crate::engine) fn tier_lockstep_stores(&mut self, dt: u64) -> (u64, bool) {
        if self.cfg.groups.is_none() && dt <= MAX_TIME_PS.saturating_sub(self.t as u64) {
            if !self.tier_hot.pending {
                debug_assert!(!self.scheduled.is_empty()); // (not `tier_idle`)
                self.offer_scheduled(self.t + dt as i64);
                return (dt, !self.tier_stays_quiet_offered());
            }
            if self.tier_ref().finishes_only() {
                if self.scheduled.is_empty() {
                    self.finish_retired();
                    debug_assert!(self.tier_stays_quiet());
                    return (dt, false);
                }
                self.offer_scheduled_then_finish(self.t + dt as i64);
                return (dt, !self.tier_stays_quiet_offered());
            }
        }
        self.tier_step_stores_now(dt)
    }

    /// `tier_stays_quiet` after `offer_scheduled` (or `offer_scheduled_then_finish`) of a lockstep
    /// step's admissions, told from the offer's own flag: no fence stood (`pending` was false, or
    /// `finishes_only`) and the offer made none, so the step stays quiet exactly when its admissions
    /// offered their whole prompts (`offered_all`, which the offer sets true for a connector, whose
    /// tier is always quiet).
    #[inline(always)]
    #[allow(clippy::inline_always)] // a flag read, in the lockstep step's inline dispatch
    fn tier_stays_quiet_offered(&self) -> bool {
        debug_assert_eq!(self.tier_hot.offered_all, self.tier_stays_quiet());
        self.tier_hot.offered_all
    }

    /// `tier_step_stores` of a lockstep step with something to offer (not `tier_idle`): its scheduled
    /// requests are its admissions, whose `prefilling` is already as after the step (`tier_admitted`).
    /// Also returns whether the tier may have left the quiet (`tier_stays_quiet` false: lockstep mode
    /// ends after the step; told before the step's observation, which only unfences, so it may say so
    /// where the observation would have made it quiet again: lockstep mode ending is always exact).
    #[inline(never)]
    pub(in crate::engine) fn tier_step_stores_now(&mut self, dt: u64) -> (u64, bool) {
        // A step ending past the clock's range offers nothing: `record` stops the run with its error
        // (the reference raises it before its offers).
        if dt > MAX_TIME_PS.saturating_sub(self.t as u64) {
            return (dt, true);
        }
        let step_end = self.t + dt as i64;
        let (_, flush_end) = self.offer_stores(step_end);
        let dt = if flush_end > step_end {
            (flush_end - self.t) as u64 // (a flush waits past the step's end)
        } else {
            dt
        };
        (dt, !self.tier_stays_quiet())
    }

    /// Whether the next step must offer for requests finished or preempted before it (their stores and
    /// finishes, or the flush): a quiet span, which offers nothing, cannot start then.
    #[inline(never)]
    pub(in crate::engine) fn tier_offers_pending(&self) -> bool {
        self.tier
            .as_deref()
            .is_some_and(|t| t.has_finished_last() || !t.preempted_now.is_empty())
    }

    /// A lockstep step that admitted nobody with nothing pending (`tier_step_stores` has nothing to
    /// do, and the step stays quiet whatever the observation sees: it adds no fence).
    #[inline]
    pub(in crate::engine) fn tier_idle(&self) -> bool {
        self.scheduled.is_empty() && !self.tier_hot.pending
    }

    /// `tier_quiet` after a lockstep step that was: only the step's admissions can have changed it
    /// (the decoding requests offer nothing), so only they are looked at.
    #[inline]
    pub(in crate::engine) fn tier_stays_quiet(&self) -> bool {
        if self.tier_idle() {
            return true; // (no admission, no fence: the usual decode step)
        }
        let tier = self.tier_ref();
        // (the step's offer noted whether its admissions offered their whole prompts)
        !tier.has_cpu
            || tier.fences.is_empty() && (self.scheduled.is_empty() || self.tier_hot.offered_all)
    }

    /// What a step that schedules nothing may have changed before: loads and remote transfers
    /// admitted, rejections, preemptions (`tier_scheduled_nothing` compares): their count so far
    /// (`Engine::progress`), unchanged exactly when none happened.
    #[inline]
    pub(in crate::engine) fn progress_marks(&self) -> u64 {
        self.progress
    }

    /// A step that scheduled nothing, with a CPU tier (a full step's or a lockstep step's): it offers
    /// the stores of requests finished before and observes; if nothing changed since `before`
    /// (`progress_marks`), the engine stalls until a transfer ends or a request arrives
    /// (`resolve_stall`). Returns true: the step counts as progress (a stall resolves it).
    #[inline(never)]
    pub(in crate::engine) fn tier_scheduled_nothing(&mut self, before: u64) -> bool {
        let changed = self.tier_empty_step() || self.progress_marks() != before;
        self.tier_hot.stalled = !changed;
        true
    }

    /// The occupancy's weighted sum and peak take the steps recorded since it last changed; called
    /// before it changes (a store's offer) and when the run pauses.
    #[inline]
    pub(in crate::engine) fn flush_occupancy(&mut self) {
        let Some(tier) = self.tier.as_deref_mut() else {
            return;
        };
        let c = &mut self.out.counters;
        if c.num_steps == tier.occ_steps {
            return; // (no step since)
        }
        let used = tier.cpu.used();
        // (busy time below the clock's range, 2^62 ps: one widening multiply)
        let busy = (c.busy_ps - tier.occ_busy) as u64;
        c.w_cpu_chunks += (u128::from(busy) * u128::from(used)) as i128;
        c.peak_cpu_chunks = c.peak_cpu_chunks.max(i128::from(used));
        (tier.occ_busy, tier.occ_steps) = (c.busy_ps, c.num_steps);
    }
}
