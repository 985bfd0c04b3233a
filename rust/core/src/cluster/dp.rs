//! Data-parallel groups (DESIGN.md §Data-parallel groups): a mixture-of-experts model's DP ranks, `size`
//! consecutive replicas of the fleet, step together on one clock. Each group step every rank schedules
//! (`Replica::group_plan`), the step lasts the slowest rank's time (a rank with nothing runs a dummy
//! batch of one token; each rank's routed experts compute every rank's tokens, gathered), every rank
//! that scheduled records it with that duration and the others' clocks move with the group; vLLM's wave (`DPEngineCoreProc`'s busy loop) ends only at a 32nd step with no rank holding a
//! request. The reference's twin is `kvsim.reference.dp`.

use std::sync::atomic::{AtomicBool, Ordering};

use super::Replica;
use crate::{KvError, Result};

/// vLLM's `_has_global_unfinished_reqs` all-reduces the ranks' unfinished requests every this many
/// steps of a wave.
pub const WAVE_CHECK_STEPS: u64 = 32;

/// One group's wave: running (it stepped since its last end) and the steps taken in it.
#[derive(Clone, Copy, Debug, Default)]
struct Wave {
    running: bool,
    steps: u64,
}

/// The fleet's DP groups: replicas `g·size .. g·size + size − 1` form group g.
pub struct Groups {
    size: usize,
    waves: Vec<Wave>,
    /// `advance`'s scratch: each rank's batched tokens (None: a dummy batch) and its own time but the
    /// routed experts' term.
    plans: Vec<(Option<u64>, u64)>,
    /// Each replica's dummy batch time but the experts' term (its config's: computed once, on first use).
    dummy: Vec<Option<u64>>,
}

/// Where an idle group at `now` lands for a row arriving at `arrival > now`, with its `wave` and the
/// ranks' longest dummy batch `dummy`: the first dummy step at or after the arrival while the wave's
/// steps last, else the wave ends and the next starts at the arrival (or at the last dummy step's end,
/// if later). Returns the landing instant and the wave there.
fn landing(now: i64, arrival: i64, wave: Wave, dummy: u64) -> (i64, Wave) {
    let ended = Wave::default();
    if !wave.running || dummy == 0 {
        return (arrival, ended);
    }
    let left = u128::from(WAVE_CHECK_STEPS - wave.steps % WAVE_CHECK_STEPS);
    let step = u128::from(dummy);
    let steps = ((arrival - now) as u128).div_ceil(step);
    if steps < left {
        let at = i128::from(now) + (steps * step) as i128;
        let next = Wave {
            running: true,
            steps: wave.steps + steps as u64,
        };
        return (at as i64, next);
    }
    let tail_end = i128::from(now) + (left * step) as i128;
    (i128::from(arrival).max(tail_end) as i64, ended)
}

impl Groups {
    /// `n` replicas in groups of `size` (`n` a multiple of `size`, checked by the caller).
    pub fn new(n: usize, size: usize) -> Self {
        debug_assert!(size > 1 && n % size == 0);
        Groups {
            size,
            waves: vec![Wave::default(); n / size],
            plans: Vec::with_capacity(size),
            dummy: vec![None; n],
        }
    }

    /// The group of replica `r`.
    pub fn group_of(&self, r: usize) -> usize {
        r / self.size
    }

    /// The replicas of group `g`.
    pub fn ranks(&self, g: usize) -> std::ops::Range<usize> {
        g * self.size..(g + 1) * self.size
    }

    pub fn len(&self) -> usize {
        self.waves.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waves.is_empty()
    }

    /// Takes every step of group `g` that starts strictly before `horizon` (an idle group's landing
    /// too); a group with no row left stops at its last step's end.
    pub fn advance(
        &mut self,
        g: usize,
        reps: &mut [Replica],
        horizon: i64,
        cancel: &AtomicBool,
    ) -> Result<()> {
        let ranks = self.ranks(g);
        loop {
            let t = reps[ranks.start].clock();
            if t >= horizon {
                return Ok(());
            }
            if cancel.load(Ordering::Relaxed) {
                return Err(KvError::InvalidOperation("interrupted".into()));
            }
            self.plans.clear();
            let (mut any, mut gathered) = (false, 0u64);
            for (rep, dummy) in reps[ranks.clone()]
                .iter_mut()
                .zip(&mut self.dummy[ranks.clone()])
            {
                let plan = rep.group_plan()?;
                let own = if let Some((dt, tokens)) = plan {
                    any = true;
                    gathered = gathered.saturating_add(tokens);
                    dt
                } else {
                    gathered = gathered.saturating_add(1); // (a dummy batch's one token)
                    *dummy.get_or_insert_with(|| rep.dummy_time())
                };
                self.plans.push((plan.map(|(_, tokens)| tokens), own));
            }
            // Every rank's experts compute the tokens gathered from all ranks (a dummy batch's one too).
            let d = reps[ranks.clone()]
                .iter()
                .zip(&self.plans)
                .map(|(rep, &(_, own))| own.saturating_add(rep.experts_time(gathered)))
                .max()
                .unwrap_or(0);
            if !any {
                let next = reps[ranks.clone()]
                    .iter()
                    .filter_map(Replica::next_arrival)
                    .min();
                let Some(a) = next else {
                    return Ok(()); // nothing left: the wave's remaining dummy steps observe nothing
                };
                let (at, wave) = landing(t, a, self.waves[g], d);
                if at >= horizon {
                    return Ok(());
                }
                for rep in &mut reps[ranks.clone()] {
                    rep.group_dummy(at);
                }
                self.waves[g] = wave;
                continue;
            }
            for (rep, &(plan, _)) in reps[ranks.clone()].iter_mut().zip(&self.plans) {
                if let Some(tokens) = plan {
                    rep.group_commit(d, tokens)?;
                }
            }
            // (no overflow: `group_commit` refused an end past the clock's range)
            let end = t + d as i64;
            for (rep, &(plan, _)) in reps[ranks.clone()].iter_mut().zip(&self.plans) {
                if plan.is_none() {
                    rep.group_dummy(end);
                }
            }
            let w = &mut self.waves[g];
            w.running = true;
            w.steps += 1;
            if w.steps % WAVE_CHECK_STEPS == 0 && !reps[ranks.clone()].iter().any(Replica::has_work)
            {
                *w = Wave::default();
            }
        }
    }

    /// Every group run to its end (every row pushed joined and done).
    pub fn finish(&mut self, reps: &mut [Replica], cancel: &AtomicBool) -> Result<()> {
        for g in 0..self.len() {
            self.advance(g, reps, i64::MAX, cancel)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_group_lands_on_its_dummy_steps_or_after_its_wave() {
        let at = |t, a, steps, d| {
            let (at, w) = landing(
                t,
                a,
                Wave {
                    running: true,
                    steps,
                },
                d,
            );
            (at, w.running, w.steps)
        };
        // 29 steps taken: dummy steps 30, 31, 32 of 10 ps left; an arrival at 15 joins the step at 20.
        assert_eq!(at(0, 15, 29, 10), (20, true, 31));
        // 30 taken: the arrival at 15 comes during step 32, after which the wave ends: a new one at 20.
        assert_eq!(at(0, 15, 30, 10), (20, false, 0));
        // After the last dummy step's end: the arrival itself.
        assert_eq!(at(0, 25, 30, 10), (25, false, 0));
        // On a boundary: joins the step starting there.
        assert_eq!(at(5, 15, 1, 10), (15, true, 2));
        // No wave, or dummy steps of no time: the arrival itself.
        let (t, w) = landing(0, 7, Wave::default(), 10);
        assert_eq!((t, w.running), (7, false));
        assert_eq!(at(0, 7, 3, 0), (7, false, 0));
    }
}
