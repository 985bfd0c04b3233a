//! Asynchronous scheduling with a CPU tier (DESIGN.md §Engine, "Asynchronous scheduling", *With a CPU
//! tier*; `kvsim.reference.engine.offload_async` is the executable spec): vLLM 0.33.0's `AsyncScheduler`
//! with its `OffloadingConnector` under the engine core's batch queue of two (`step_with_batch_queue`).
//! Every schedule is a batch, an empty one included; a batch's connector metadata (its stores, the
//! finished requests it names) is built inside its schedule, and the batch in flight's output (its
//! finishers, the transfers the workers report done by its end) arrives after the next batch was
//! scheduled, or, with nothing left to schedule, on its own.

use crate::engine::Engine;

/// The batch queue (`Tier::batches`).
#[derive(Debug, Default)]
pub(in crate::engine) struct Batches {
    /// A batch is in flight: its output has not arrived (with `Engine::async_prev` >= 0 it computes
    /// tokens, and a sequence it scheduled has `Seq::sched_step` the step it is committed under). Its
    /// output's observation is numbered when it is launched (`TierHot::observed` counts it), so the
    /// next batch's transfers report at the one after.
    pub(in crate::engine) flight: bool,
    /// When the batch in flight ends.
    flight_end: i64,
    /// Finishers whose blocks wait for the batch in flight (a discarded token: `defer_block_free`).
    deferred: Vec<usize>,
    /// This schedule left a preemption to a later one (`victim_in_flight`).
    victim_deferred: bool,
}

impl Batches {
    /// Finishers hold blocks behind the batch in flight (they come back at its output).
    #[inline]
    pub(in crate::engine) fn holds_blocks(&self) -> bool {
        !self.deferred.is_empty()
    }
}

impl Engine<'_> {
    /// `defer_block_free`: the running tail (the preemption's victim) was scheduled in the batch in
    /// flight (`async_prev` >= 0), so freeing it would not help this schedule: the running phase stops
    /// without preempting (a schedule after that batch's output may: `victim_deferred`).
    #[cold]
    #[inline(never)]
    pub(in crate::engine) fn victim_in_flight(&mut self) -> bool {
        let tail = *self.running.last().expect("a running tail");
        let deferred = self.slab[tail].sched_step + 1 == self.step;
        if let Some(tier) = self.tier.as_deref_mut() {
            tier.batches.victim_deferred |= deferred; // (a prefill replica has no batch queue to tell)
        }
        deferred
    }

    /// A batch's turn once it is scheduled (`Engine::async_turn` with a CPU tier; `before`: the
    /// progress marks before the schedule): its connector metadata (the stores offered, the finished
    /// requests named), the output of the batch in flight, then the batch itself (an empty one takes no
    /// time). An empty batch that changed nothing, behind which nothing could be seen at `t`, leaves
    /// the engine stalled (`resolve_stall`). Returns true: the step counts as progress.
    #[inline(never)]
    pub(in crate::engine) fn async_tier_turn(&mut self, before: u64) -> bool {
        let start = self.t;
        let flight = self.tier_ref().batches.flight;
        if self.scheduled.is_empty() {
            let (planned, flush_end) = self.offer_stores(start);
            let arrived = flight && self.tier_output();
            self.launch();
            // An empty batch: it computes nothing and takes no time (but a flush's wait).
            self.t = self.t.max(flush_end);
            self.tier_mut().batches.flight_end = self.t;
            let changed = planned
                || arrived
                || self.tier_ref().batches.victim_deferred
                || self.progress_marks() != before;
            if !changed && self.has_work() && self.next_transfer().is_none_or(|e| e > self.t) {
                // The next schedule would be this one: wait for a transfer or an arrival.
                self.tier_hot.stalled = true;
            }
            self.tier_mut().batches.victim_deferred = false;
            return true;
        }
        if self.log.is_some() {
            self.log_schedule(0);
        }
        let (dt, tokens) = self.step_time();
        let step = self.step; // (the index this step is committed under)
        let steps = self.out.counters.num_steps; // (the same, as a hybrid pool's `settled` counts it)
        for i in 0..self.scheduled.len() {
            let (k, n) = self.scheduled[i];
            let s = &mut self.slab[k];
            s.prefilling = s.prefilling && s.num_computed < s.num_tokens();
            s.sched_step = step;
            if let Some(hs) = s.hybrid.as_deref_mut() {
                hs.flight = (steps, n); // (a hybrid pool's tokens in flight: `settled`)
            }
        }
        let dt = if (start as u64).saturating_add(dt) > crate::engine::MAX_TIME_PS {
            dt // (`record` stops the run at the clock's range, before its stores)
        } else {
            let (_, flush_end) = self.offer_stores(start + dt as i64);
            dt.max((flush_end - start).max(0) as u64)
        };
        if flight {
            self.tier_output();
        }
        self.launch();
        self.async_prev = start;
        let mut m = self.memory_state();
        // (the finishers whose blocks wait for this batch hold them outside the running list: they count
        // among the blocks the tables cover, as a held request's do, `idle_table_blocks`)
        let b = &self.tier_ref().batches;
        m.logical += b
            .deferred
            .iter()
            .map(|&k| self.table_blocks(k))
            .sum::<u64>();
        self.record(dt, self.scheduled.len() as u64, tokens, m);
        self.finish_step();
        self.tier_mut().batches.flight_end = self.t;
        self.tier_mut().batches.victim_deferred = false;
        true
    }

    /// The batch just scheduled is in flight: its output's observation numbered now.
    fn launch(&mut self) {
        self.tier_mut().batches.flight = true;
        self.tier_hot.observed += 1;
    }

    /// The batch in flight's output arrives (`update_from_output`): the finishers deferred behind it free
    /// their blocks; the requests that finished in it reach the connector (`request_finished`: the next
    /// batch offers their last stores) and leave the running list, their blocks freed now unless the
    /// batch just scheduled computes them (a discarded token: freed at its output, `defer_block_free`);
    /// then the transfers reported done by its end complete (its observation, numbered at its launch).
    /// In a hybrid pool the sequences it sampled first key their blocks (`settle_keys`), and a
    /// finisher's windows free what they left behind at its tokens but those the batch just scheduled
    /// computes (`hybrid_remove_skipped`). Returns whether anything changed.
    #[inline(never)]
    pub(in crate::engine) fn tier_output(&mut self) -> bool {
        let b = &mut self.tier_mut().batches;
        b.flight = false;
        let deferred = std::mem::take(&mut b.deferred);
        self.async_prev = -1;
        let mut changed = !self.async_done.is_empty() || !deferred.is_empty();
        for &k in &deferred {
            self.release_deferred(k);
            self.remove(k);
        }
        if !self.flight_sampled.is_empty() {
            self.settle_keys(); // (a hybrid pool's: the sampled tokens' blocks keyed first)
        }
        let mut later = deferred;
        later.clear();
        let done = std::mem::take(&mut self.async_done);
        for &k in &done {
            self.tier_finished(k);
            let at = self
                .running
                .iter()
                .position(|&j| j == k)
                .expect("a finisher in flight is running");
            self.running.remove(at);
            if self.slab[k].sched_step == self.step && !self.scheduled.is_empty() {
                later.push(k); // scheduled by the batch just scheduled, not committed yet
            } else {
                self.release(k);
                self.remove(k);
            }
        }
        self.async_done = done;
        self.async_done.clear();
        self.tier_mut().batches.deferred = later;
        let (t, end) = (self.t, self.tier_ref().batches.flight_end);
        self.tier_hot.observed -= 1; // (`observe` counts it again)
        self.t = end;
        changed |= self.observe();
        self.t = t;
        changed
    }
}
