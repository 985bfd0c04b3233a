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
    /// schedule only rejects or preempts (no time passes, as in one engine) and notes no step error
    /// (`stop_after_step`: one such schedule stops the rank with it, as `advance` stops one engine).
    /// Returns the step's own duration but the routed experts' term (`step_time_apart`: the driver adds
    /// `experts_time` of the ranks' tokens gathered) and its batched tokens, or None when it scheduled
    /// nothing (a dummy batch).
    /// In lockstep mode (lockstep.rs: entered after a full step as one engine enters it) the step is
    /// `lockstep_step`'s first half, touching only the sequences with an event.
    pub(crate) fn group_plan(&mut self) -> Result<Option<(u64, u64)>> {
        loop {
            self.join_due();
            if !self.has_work() {
                if self.async_prev >= 0 {
                    self.async_prev = -1; // async_scheduling: as `advance`, arrivals up to the clock join
                    continue;
                }
                return Ok(None);
            }
            let before = (self.num_rejected, self.out.counters.num_preemptions);
            if self.lockstep && self.one_free_block_binds() {
                self.exit_lockstep(); // (as `lockstep_step`: every sequence walked)
            }
            if self.lockstep {
                if let Some((tokens, decoding_keys)) = self.lockstep_schedule::<true>() {
                    let dt = if matches!(self.cfg.time, TimeModel::Roofline(_)) {
                        self.lockstep_time_apart(tokens, decoding_keys)
                    } else {
                        self.linear_time(tokens, self.agg.c)
                    };
                    return Ok(Some((dt, tokens)));
                }
            } else {
                self.schedule();
                if self.cancelled() {
                    self.discard();
                    return Err(KvError::InvalidOperation("interrupted".into()));
                }
                if self.async_turn(self.progress_marks()) {
                    continue; // (its schedule again at the clock, the group step's start)
                }
                if !self.scheduled.is_empty() {
                    if self.log.is_some() {
                        self.log_schedule(0);
                    }
                    self.release_async_done(); // async_scheduling: after the schedule, as `full_step`
                    return Ok(Some(self.step_time_apart()));
                }
            }
            if let Some(msg) = &self.step_error {
                return Err(KvError::InvalidArgument(msg.clone()));
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
    /// duration `d` (tokens sampled, requests finished at its end); after a full step, lockstep is
    /// entered where one engine would enter it.
    pub(crate) fn group_commit(&mut self, d: u64, tokens: u64) -> Result<()> {
        if self.lockstep {
            let (step, batch) = (self.step, self.running.len() as u64);
            let state = self.aggregate_state();
            self.record(d, batch, tokens, state);
            if let Some(msg) = &self.step_error {
                return Err(KvError::InvalidArgument(msg.clone()));
            }
            self.lockstep_finish::<true>(step, false);
            return Ok(());
        }
        let m = self.memory_state();
        self.record(d, self.scheduled.len() as u64, tokens, m);
        if let Some(msg) = &self.step_error {
            return Err(KvError::InvalidArgument(msg.clone()));
        }
        self.finish_step();
        self.maybe_enter_lockstep();
        Ok(())
    }

    /// A grouped rank's quiet state at its clock (DESIGN.md §Data-parallel groups, "Fast paths"): in
    /// lockstep, nothing waiting, swapped or due (no row pushed arrives at or before the clock), no swap
    /// pending, no event in its current step nor the next, and the next step not a recorded time-series
    /// step. Returns its batch, its step j's own duration `dt0 + ddt j` but the experts' term, and how
    /// many steps at most a span may hold (a ring's length, the next recorded time-series step); None:
    /// it takes its next step in full.
    pub(crate) fn group_quiet(&self) -> Option<(u64, i128, i128, u64)> {
        if !self.lockstep
            || self.running.is_empty()
            || !self.nothing_waits()
            || !self.swapped.is_empty()
            || self.swap_blocks_step != 0
            || self.tier.is_some()
            || self.next_arrival().is_some_and(|a| a <= self.t)
            || self.one_free_block_binds()
        {
            return None;
        }
        let (step, mask) = (self.step, self.ring_mask);
        let mut cap = mask as u64;
        if self.ts_every > 0 {
            cap = cap.min((self.ts_every - step % self.ts_every) % self.ts_every);
        }
        if cap < 2 || self.quiet_event_at(0) || self.quiet_event_at(1) {
            return None;
        }
        let (dt0, ddt) = self.quiet_step_lengths_apart();
        Some((self.running.len() as u64, dt0, ddt, cap))
    }

    /// Whether the rank's `j`-th step from its current one holds an event (a ring's bucket not empty,
    /// a stale entry too): a quiet span ends before it.
    #[inline]
    pub(crate) fn quiet_event_at(&self, j: u64) -> bool {
        !self.ring[(self.step + j) as usize & self.ring_mask].is_empty()
    }

    /// `quiet_step_lengths` but the routed experts' term (the group's driver adds it for the ranks'
    /// tokens gathered, constant over a span).
    fn quiet_step_lengths_apart(&self) -> (i128, i128) {
        let TimeModel::Roofline(r) = &self.cfg.time else {
            return self.quiet_step_lengths();
        };
        let batch = self.running.len() as u64;
        let dec = r.decode_ps();
        let keys = u128::from(self.agg.c + batch);
        let cap = |x: u128| i128::try_from(x.min(u128::from(u64::MAX))).unwrap_or(i128::MAX);
        (
            cap(r
                .base_apart(batch, batch)
                .saturating_add(dec.saturating_mul(keys))),
            cap(dec.saturating_mul(u128::from(batch))),
        )
    }

    /// `span` quiet steps of the rank's batch recorded with the group's durations, step j lasting
    /// `dt0 + ddt j` (exact integer sums, `take_quiet_steps`); the caller checked `group_quiet` and
    /// that no step of the span holds an event or ends past the clock's range.
    pub(crate) fn take_group_quiet(&mut self, span: u64, dt0: i128, ddt: i128) {
        let batch = self.running.len() as u64;
        self.take_quiet_steps(span, batch, dt0, ddt);
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

#[cfg(test)]
mod tests {
    use super::super::{EngineConfig, EngineInput};
    use super::*;

    /// A schedule that only rejects (a 100-token prompt over a step's budget of 32, chunked prefill off:
    /// rejected by the waiting phase, not at arrival) after a step error was noted stops the rank with
    /// that error, as `advance` stops after such a step: the loop does not go on to an idle rank's dummy
    /// batch. Without the error the same rank idles (`Ok(None)`).
    #[test]
    fn a_step_error_stops_a_rank_whose_schedule_only_rejects() {
        let inp = EngineInput {
            arrival_ps: &[0],
            prompt_len: &[100],
            target: &[1],
            max_gen: &[1],
            fork_parent: &[-1],
            output_seg: &[1 << 63],
            seg_offsets: &[0, 1],
            segment_id: &[1],
            segment_len: &[100],
        };
        let cfg = EngineConfig {
            chunked_prefill: false,
            max_num_batched_tokens: 32,
            ..EngineConfig::for_tests(64, 16)
        };
        let mut idle = Engine::new(inp, &cfg).unwrap();
        assert!(matches!(idle.group_plan(), Ok(None)));
        assert_eq!(idle.num_rejected, 1);
        let mut stopped = Engine::new(inp, &cfg).unwrap();
        stopped.stop_after_step("the step's error".into());
        let err = stopped.group_plan().unwrap_err();
        assert!(matches!(err, KvError::InvalidArgument(_)), "{err}");
        assert_eq!(err.to_string(), "the step's error");
        assert_eq!(stopped.num_rejected, 1);
    }
}
