//! A livelock vLLM would loop in (DESIGN.md §CPU tier, "A livelock vLLM would loop in"; the twin of
//! `kvsim.reference.engine.livelock`): requests of a hybrid model preempt one another forever, each
//! resumed from its load and preempted again before anyone samples a token. The engine notes its state
//! at each such preemption and stops when one state comes back `REPEATS` times, a load landing between
//! each two.

use std::collections::HashMap;

use super::super::{Engine, Memory};

/// How often one scheduler state is met, a load landing between each two, before the run livelocks.
const REPEATS: u32 = 4;
/// The distinct states noted before the notes start over (memory stays bounded in a long stretch
/// without a sample).
const MAX_STATES: usize = 10_000;

/// The states met at preemptions since a token was last sampled or a request last rejected.
#[derive(Debug)]
pub(in crate::engine) struct Watch {
    /// Loads (and remote transfers) landed so far.
    pub(in crate::engine) landings: u64,
    /// Tokens sampled by full steps and requests rejected when the notes were taken.
    epoch: (u64, u64),
    /// Each state: how often it was met with a load landed since its last meeting, and the landings
    /// then.
    seen: HashMap<Vec<i64>, (u32, u64)>,
}

impl Default for Watch {
    fn default() -> Self {
        Watch {
            landings: 0,
            epoch: (u64::MAX, u64::MAX),
            seen: HashMap::new(),
        }
    }
}

impl Watch {
    /// Notes `state`, met at a preemption in `epoch`; true if it is its `REPEATS`-th meeting.
    fn note(&mut self, epoch: (u64, u64), state: Vec<i64>) -> bool {
        if epoch != self.epoch || self.seen.len() >= MAX_STATES {
            self.seen.clear();
            self.epoch = epoch;
        }
        let landings = self.landings;
        let entry = self.seen.entry(state).or_insert((0, landings));
        if entry.0 == 0 || landings > entry.1 {
            entry.0 += 1;
        }
        entry.1 = landings;
        entry.0 >= REPEATS
    }
}

impl Engine<'_> {
    /// Before `k`'s preemption for recomputation (a hybrid pool with a CPU tier or a decode replica's
    /// connector): the engine's state (`k` and its computed tokens, the free blocks, each running
    /// request's computed tokens and each held one's and whether its load landed, in order; the
    /// transfers in flight, each one's request, time left and observations to wait, in sorted order;
    /// the time until each link is free; the tier's occupancy) noted; a
    /// livelock stops the run after this step (`stop_after_step`), as the reference raises it.
    #[cold]
    #[inline(never)]
    pub(in crate::engine) fn watch_livelock(&mut self, k: usize) {
        let free = match &self.mem {
            Memory::Paged(pool) => i64::from(pool.num_free_blocks()),
            Memory::Contiguous(_) => unreachable!("a hybrid pool is paged"),
        };
        let (t, observed) = (self.t, self.tier_hot.observed);
        let s = &self.slab[k];
        let mut state = vec![
            s.row as i64,
            s.num_computed as i64,
            free,
            self.running.len() as i64,
        ];
        for &r in &self.running {
            state.extend([self.slab[r].row as i64, self.slab[r].num_computed as i64]);
        }
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        state.push(tier.held.len() as i64);
        for &h in &tier.held {
            let held = &self.slab[h];
            state.extend([
                held.row as i64,
                held.num_computed as i64,
                i64::from(held.loaded),
            ]);
        }
        // What is in flight and when the links free, from now; the tier's occupancy.
        let mut jobs: Vec<[i64; 4]> = (tier.loads.iter().map(|j| (1, j)))
            .chain(tier.stores.iter().map(|j| (0, j)))
            .map(|(load, j)| {
                [
                    load,
                    j.row as i64,
                    (j.end - t).max(0),
                    j.avail as i64 - observed as i64,
                ]
            })
            .collect();
        jobs.sort_unstable();
        state.push(jobs.len() as i64);
        state.extend(jobs.into_iter().flatten());
        state.extend([
            (tier.load_free - t).max(0),
            (tier.store_free - t).max(0),
            (tier.pd_free - t).max(0),
            if tier.has_cpu {
                tier.cpu.used() as i64
            } else {
                0
            },
        ]);
        if tier.watch.note((self.sampled, self.num_rejected), state) {
            self.stop_after_step(format!(
                "the run livelocks at {} ps: requests preempt one another and none samples a token (the engine met the same state at {} preemptions, a load landing between each); vLLM 0.33.0's and 0.34.0's scheduler would loop here forever (a load is admitted with blocks reserved only for the prompts still prefilling, none for a decoding request's next block or a sliding window's, and a held load is not preempted: DESIGN.md §CPU tier)",
                self.t,
                REPEATS
            ));
        }
    }
}
