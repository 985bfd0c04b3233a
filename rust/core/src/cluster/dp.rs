//! Data-parallel groups (DESIGN.md §Data-parallel groups): a mixture-of-experts model's DP ranks, `size`
//! consecutive replicas of the fleet, step together on one clock. Each group step every rank schedules
//! (`Replica::group_plan`), the step lasts the slowest rank's time (a rank with nothing runs a dummy
//! batch of one token; each rank's routed experts compute every rank's tokens, gathered), every rank
//! that scheduled records it with that duration and the others' clocks move with the group; vLLM's wave (`DPEngineCoreProc`'s busy loop) ends only at a 32nd step with no rank holding a
//! request. The reference's twin is `kvsim.reference.dp`.

use std::sync::atomic::{AtomicBool, Ordering};

use super::Replica;
use crate::engine::first_start_at_or_after;
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
    /// `quiet_span`'s scratch: each rank's line over a quiet span (whether it has work, the step's
    /// duration at the span's start, its growth a step), and the lines' upper envelope's pieces.
    lines: Vec<(bool, i128, i128)>,
    pieces: Vec<(i128, i128, i128, i128)>,
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

/// The upper envelope of the lines `a + b j` (`(_, a, b)`) over the steps `0..limit`, as pieces `(j0, j1,
/// a, b)`: over steps `j0..j1` the line `(a, b)` is the largest. Each next piece's line is steeper than the
/// last (a line that is the largest at j0 and at least as steep as the others stays so), so there are at
/// most as many pieces as lines.
fn envelope(lines: &[(bool, i128, i128)], limit: i128, pieces: &mut Vec<(i128, i128, i128, i128)>) {
    pieces.clear();
    let mut j0 = 0i128;
    while j0 < limit {
        let &(_, a, b) = lines
            .iter()
            .max_by_key(|&&(_, a, b)| (a + b * j0, b))
            .expect("a line");
        // The first step where a steeper line passes this one: `(a − ao) / (bo − b)` (floored) is at
        // least j0, this one being the largest there.
        let end = lines
            .iter()
            .filter(|l| l.2 > b)
            .map(|&(_, ao, bo)| (a - ao).div_euclid(bo - b) + 1)
            .min()
            .unwrap_or(limit)
            .min(limit);
        pieces.push((j0, end, a, b));
        j0 = end;
    }
}

/// How many of the envelope's steps start before `gap` after the first's start (every one of them, if
/// all do): the steps a span may take before an arrival at `gap` (it joins the first step starting at
/// or after it).
fn steps_before(pieces: &[(i128, i128, i128, i128)], gap: i128) -> i128 {
    let mut start = 0i128; // where the piece's first step starts
    let mut span = 0;
    for &(j0, j1, a, b) in pieces {
        let first = a + b * j0; // the piece's first step's duration
        let at = |i: i128| start + first * i + b * (i * (i - 1) / 2); // its i-th step's start
        let len = j1 - j0;
        let lo = first_start_at_or_after!(0i128, len, gap, at);
        span = j0 + lo;
        if lo < len {
            break;
        }
        start = at(len);
    }
    span
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
            lines: Vec::with_capacity(size),
            pieces: Vec::with_capacity(size),
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
            if self.quiet_span(g, reps, t, horizon) {
                continue;
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

    /// Takes group `g`'s quiet steps from its clock `t` together, in closed form, and returns whether it
    /// took any (at least two): every rank with work is quiet (`Replica::group_quiet`: lockstep, no event,
    /// nothing waiting or due), the others run dummy batches, and the span ends before the first step
    /// holding any rank's event, the first starting at or after the next arrival or `horizon`, the next
    /// recorded time-series step or a ring's length. Over it each rank's batch and the tokens gathered
    /// are constant (so is each rank's experts' term), rank r's step j lasts `a_r + b_r j` (a dummy
    /// rank's `b_r` is 0) and the group's the largest: the upper envelope of the ranks' lines, taken
    /// in pieces (at most one a rank: each next piece's line is steeper), each recorded on every quiet
    /// rank with its line (`take_quiet_steps`' exact sums). The wave runs on (a rank has work at
    /// every 32nd step of the span) and counts the span's steps.
    fn quiet_span(&mut self, g: usize, reps: &mut [Replica], t: i64, horizon: i64) -> bool {
        let ranks = self.ranks(g);
        self.lines.clear();
        let (mut cap, mut gathered, mut bound) = (u64::MAX, 0u64, horizon);
        for (rep, dummy) in reps[ranks.clone()]
            .iter()
            .zip(&mut self.dummy[ranks.clone()])
        {
            if let Some((batch, dt0, ddt, c)) = rep.group_quiet() {
                cap = cap.min(c);
                gathered = gathered.saturating_add(batch);
                self.lines.push((true, dt0, ddt));
            } else if rep.has_work() {
                return false;
            } else {
                gathered = gathered.saturating_add(1); // (a dummy batch's one token)
                let d = *dummy.get_or_insert_with(|| rep.dummy_time());
                self.lines.push((false, i128::from(d), 0));
            }
            if let Some(a) = rep.next_arrival() {
                if a <= t {
                    return false; // (a row joins now: `group_plan`)
                }
                bound = bound.min(a);
            }
        }
        if cap == u64::MAX {
            return false; // no rank with work: the idle group's path
        }
        for (line, rep) in self.lines.iter_mut().zip(&reps[ranks.clone()]) {
            line.1 += i128::from(rep.experts_time(gathered));
        }
        // The events first (a few loads a step; the time bound's search below then spans only these
        // steps): the first step holding any quiet rank's (steps 0 and 1 hold none).
        let mut span = 2;
        'scan: while span < cap {
            for (rep, line) in reps[ranks.clone()].iter().zip(&self.lines) {
                if line.0 && rep.quiet_event_at(span) {
                    break 'scan;
                }
            }
            span += 1;
        }
        envelope(&self.lines, i128::from(span), &mut self.pieces);
        let span = steps_before(&self.pieces, i128::from(bound) - i128::from(t));
        if span < 2 {
            return false;
        }
        // The span's end, within the clock's range (else single steps, which stop at the right one).
        let mut end = i128::from(t);
        for &(j0, j1, a, b) in &self.pieces {
            let len = j1.min(span) - j0;
            if len <= 0 {
                break;
            }
            let first = a + b * j0;
            end += first * len + b * (len * (len - 1) / 2);
        }
        if end > i128::from(crate::engine::MAX_TIME_PS) {
            return false;
        }
        for &(j0, j1, a, b) in &self.pieces {
            let len = j1.min(span) - j0;
            if len <= 0 {
                break;
            }
            let first = a + b * j0;
            for (rep, line) in reps[ranks.clone()].iter_mut().zip(&self.lines) {
                if line.0 {
                    rep.take_group_quiet(len as u64, first, b);
                }
            }
        }
        for (rep, line) in reps[ranks.clone()].iter_mut().zip(&self.lines) {
            if !line.0 {
                rep.group_dummy(end as i64);
            }
        }
        let w = &mut self.waves[g];
        w.running = true;
        w.steps += span as u64;
        true
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

    proptest::proptest! {
        /// The envelope's pieces cover the steps in order, at most one a line, each step's piece's line
        /// the largest there; `steps_before` counts the steps starting before the gap, summed one at a time.
        #[test]
        fn the_envelope_is_the_largest_line_step_by_step(
            lines in proptest::collection::vec((0i128..2_000, 0i128..40), 1..5),
            limit in 1i128..120,
            gap in 1i128..100_000,
        ) {
            let lines: Vec<(bool, i128, i128)> = lines.into_iter().map(|(a, b)| (true, a, b)).collect();
            let mut pieces = Vec::new();
            envelope(&lines, limit, &mut pieces);
            proptest::prop_assert!(pieces.len() <= lines.len());
            proptest::prop_assert_eq!(pieces[0].0, 0);
            proptest::prop_assert_eq!(pieces.last().unwrap().1, limit);
            let (mut start, mut want) = (0i128, None);
            for w in pieces.windows(2) {
                proptest::prop_assert_eq!(w[0].1, w[1].0);
                proptest::prop_assert!(w[1].3 > w[0].3);
            }
            for j in 0..limit {
                let largest = lines.iter().map(|&(_, a, b)| a + b * j).max().unwrap();
                let &(_, _, a, b) = pieces.iter().find(|p| p.0 <= j && j < p.1).unwrap();
                proptest::prop_assert_eq!(a + b * j, largest);
                if want.is_none() && start >= gap {
                    want = Some(j);
                }
                start += largest;
            }
            proptest::prop_assert_eq!(steps_before(&pieces, gap), want.unwrap_or(limit));
        }
    }

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
