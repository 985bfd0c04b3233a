//! A rank of a data-parallel group (DESIGN.md §Data-parallel groups): the engine's step split in two, so
//! that the group's driver (`crate::cluster::dp`) can time every rank's step by the slowest: `group_plan`
//! joins the rows due and schedules (the step's batch and its own duration but the experts' term, which
//! the driver adds for the ranks' tokens gathered), `group_commit` records the step with the group's
//! duration; a rank with nothing to run takes `group_dummy` (its clock moves, its counters do not). The
//! twin of `python/kvsim/reference/engine/group.py`.

use super::seq::join_arrived;
use super::timing::AttnSums;
use super::{AttnKind, Engine, KvError, Result, TimeModel};

impl Engine<'_> {
    /// The rows pushed whose arrival is at or before the clock join (as at the head of `advance`).
    fn join_due(&mut self) {
        let base = self.row_base;
        let end = base + self.inp.arrival_ps.len();
        join_arrived!(self, self.inp.arrival_ps, base, end, self.nxt);
    }

    /// The arrival of the next row pushed that has not joined (None: none).
    pub(crate) fn next_arrival(&self) -> Option<i64> {
        let base = self.row_base;
        (self.nxt < base + self.inp.arrival_ps.len()).then(|| self.inp.arrival_ps[self.nxt - base])
    }

    /// The clock.
    pub(crate) fn clock(&self) -> i64 {
        self.t
    }

    /// Moves an idle rank's clock to `t` (never back): the group jumped or ran a dummy batch.
    pub(crate) fn group_dummy(&mut self, t: i64) {
        debug_assert!(t >= self.t);
        self.t = t;
    }

    /// The group step's first half at the clock: the rows due join and the rank schedules, again while a
    /// schedule only rejects or preempts (no time passes, as in one engine). Returns the step's own
    /// duration but the routed experts' term (`step_time_apart`: the driver adds `experts_time` of the
    /// ranks' tokens gathered) and its batched tokens, or None when it scheduled nothing (a dummy batch).
    pub(crate) fn group_plan(&mut self) -> Result<Option<(u64, u64)>> {
        loop {
            self.join_due();
            if !self.has_work() {
                return Ok(None);
            }
            let before = (self.num_rejected, self.out.counters.num_preemptions);
            self.schedule();
            if self.cancelled() {
                self.discard();
                return Err(KvError::InvalidOperation("interrupted".into()));
            }
            if !self.scheduled.is_empty() {
                if self.log.is_some() {
                    self.log_schedule(0);
                }
                return Ok(Some(self.step_time_apart()));
            }
            if before == (self.num_rejected, self.out.counters.num_preemptions) {
                return Err(KvError::Internal(format!(
                    "no progress at time {} ps",
                    self.t
                )));
            }
        }
    }

    /// The group step's second half: the step planned by `group_plan` recorded with the group's
    /// duration `d` (tokens sampled, requests finished at its end).
    pub(crate) fn group_commit(&mut self, d: u64, tokens: u64) -> Result<()> {
        let m = self.memory_state();
        self.record(d, self.scheduled.len() as u64, tokens, m);
        if let Some(msg) = &self.clock_overflow {
            return Err(KvError::InvalidArgument(msg.clone()));
        }
        self.finish_step();
        Ok(())
    }

    /// A dummy batch's duration under the time model: one sequence computing one token over one key
    /// (vLLM's `execute_dummy_batch`, `_dummy_run(1)`), no swap; the routed experts' term left to the
    /// group's driver (`experts_time`: the rank's one token joins the gather).
    pub(crate) fn dummy_time(&self) -> u64 {
        match &self.cfg.time {
            TimeModel::Ticks { iteration_ps } => *iteration_ps,
            TimeModel::Linear {
                c0_ps,
                c_tok_ps,
                c_ctx_ps,
            } => c0_ps.saturating_add(*c_tok_ps).saturating_add(*c_ctx_ps),
            TimeModel::Roofline(r) => {
                let sums: Vec<AttnSums> = r
                    .attention
                    .iter()
                    .map(|a| {
                        let keys = if a.kind == AttnKind::Full {
                            1
                        } else {
                            a.keys_and_pairs(1, 1).0
                        };
                        AttnSums {
                            xd: keys,
                            ..AttnSums::default()
                        }
                    })
                    .collect();
                r.time_apart(1, 1, &sums)
            }
        }
    }
}
