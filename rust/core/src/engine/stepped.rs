//! The engine's side of a stepped replica (`crate::cluster::replica`, DESIGN.md §The stepped replica):
//! an engine over owned input columns that grow one row (or fork-cow group) at a time, advanced to a
//! horizon, and the signals a router reads from it.

use std::sync::atomic::AtomicBool;

use super::{
    Engine, EngineConfig, EngineInput, EngineOutput, MAX_TIME_PS, Memory, Result, TimeModel,
};
use crate::BlockKey;
use crate::block_table::div_bs;

/// What a router reads of a replica besides its load (waiting + running + in flight), which every
/// router that reads state reads: the KV counts (`kv_used`), the prefix map (leading hits). Decides
/// which events leave its view unchanged (`Engine::quiet_through`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterReads {
    pub kv: bool,
    pub keys: bool,
}

/// `quiet_through`'s findings at one step, kept until the next advance: the `k` steps from `step` on
/// leave what a router reading `reads` sees as it is but for the sequences finishing in them, at the
/// steps `finishes` (sorted; ticks only, where steps last the same whatever the batch), and every
/// horizon up to `until` (the start of step `step + k`) is reached by steps among them.
#[derive(Debug)]
pub(crate) struct QuietMemo {
    step: u64,
    reads: RouterReads,
    k: u64,
    until: i64,
    finishes: Vec<u64>,
}

/// Steps `quiet_through` tries to vouch for past the horizon asked (a fleet's next arrivals come soon
/// after it); the most it looks at.
const QUIET_AHEAD: u64 = 32;
const QUIET_MAX: u64 = 1 << 12;

impl QuietMemo {
    pub(crate) fn new() -> Self {
        QuietMemo {
            step: u64::MAX,
            reads: RouterReads::default(),
            k: 0,
            until: i64::MIN,
            finishes: Vec::new(),
        }
    }
}

impl<'a> Engine<'a> {
    /// An engine with no rows yet over `view` (empty), taking `defer_keys` (no prompt of the whole
    /// workload quotes an output) and `forks` (the workload holds fork-cow samples) from its driver,
    /// which also hands each row's `private_from` (`push_private_from`).
    pub(crate) fn new_stepped(
        view: EngineInput<'a>,
        cfg: &'a EngineConfig,
        defer_keys: bool,
        forks: bool,
        cancel: Option<&AtomicBool>,
    ) -> Result<Self> {
        let mut e = Self::new_cancellable(view, cfg, cancel)?;
        e.defer_keys = defer_keys;
        e.private_from = Vec::new();
        e.fill_events = cfg.policy.is_paged() && cfg.enable_prefix_caching && !defer_keys;
        e.forks = forks;
        e.final_input = true;
        Ok(e)
    }

    /// Whether rows carry a `private_from` (deferred keys, paged, caching on), as in `new`.
    pub(crate) fn reads_private_from(&self) -> bool {
        self.defer_keys && self.cfg.enable_prefix_caching && self.cfg.policy.is_paged()
    }

    /// The rows' `private_from`, one per row of the input view (from `row_base` on).
    pub(crate) fn private_from_mut(&mut self) -> &mut Vec<u64> {
        &mut self.private_from
    }

    /// Points the engine at its owner's columns again (after they grew or were compacted): `inp`
    /// holds the rows from `row_base` on.
    pub(crate) fn set_input(&mut self, inp: EngineInput<'a>, row_base: usize) {
        self.inp = inp;
        self.row_base = row_base;
    }

    /// Adds `n` rows to the output columns (rows just pushed).
    pub(crate) fn add_output_rows(&mut self, n: usize) {
        self.out.extend_rows(n);
    }

    /// Runs every step that starts strictly before `horizon` (and nothing else), reading `cancel`.
    pub(crate) fn advance_until(&mut self, horizon: i64, cancel: &'a AtomicBool) -> Result<()> {
        self.quiet.step = u64::MAX;
        self.cancel = Some(cancel);
        self.horizon = horizon;
        let result = self.advance();
        self.horizon = i64::MAX;
        self.cancel = None;
        result
    }

    /// Runs to the end and sums the counters.
    pub(crate) fn finish_stepped(&mut self, cancel: &'a AtomicBool) -> Result<()> {
        self.cancel = Some(cancel);
        self.horizon = i64::MAX;
        let result = self.advance();
        self.cancel = None;
        result?;
        self.finish_counters();
        Ok(())
    }

    /// The output columns (every row pushed) and counters, once finished.
    pub(crate) fn take_output(&mut self) -> EngineOutput {
        std::mem::take(&mut self.out)
    }

    /// Whether the signals `reads` names and the load (every router that reads state reads it) can be
    /// read at `horizon` without stepping there: `Some((until, running))` when the replica's waiting
    /// count, in-flight rows (none), KV counts (where read) and prefix map (where read) at every
    /// horizon from `horizon` up to `until` are those of now, and its running count there is `running`;
    /// `None` when it must step. Taking those steps later, in one piece, is exact and cheaper than
    /// cutting the lockstep run at every arrival of the fleet. Valid while no row arriving at or
    /// before `until` is pushed.
    ///
    /// In lockstep, with nothing waiting, swapped out or joining before `horizon`, every running
    /// sequence's state at a later step follows from its base (`Seq::base_step`) until something
    /// happens that is not a plain decode: so `quiet_scan` reads, in closed form, what each sequence
    /// does in the steps before the horizon (and a few past it): the blocks it pops, whether it fills a
    /// block that would get a mapped key, and the step it finishes. Those steps are *neutral* when no
    /// block pop can fail (the free blocks cover them all: no preemption; `one_free_block` keeps a
    /// margin), the popped blocks (the free queue's first ones, frees of finishing sequences joining at
    /// the head or the tail only) carry no mapped key and no mapped key is registered (where the
    /// router reads the prefix map), nothing is popped nor freed (where it reads the KV counts), and
    /// finishes, which lower the running count, come only where steps last the same whatever the
    /// batch (ticks), so the steps' start times stay known.
    pub(crate) fn quiet_through(&mut self, horizon: i64, reads: RouterReads) -> Option<(i64, u64)> {
        let running = self.running.len() as u64;
        let i = self.nxt - self.row_base;
        let next_row = self.inp.arrival_ps.get(i).copied().unwrap_or(i64::MAX);
        if self.t >= horizon {
            // `advance_until` would do nothing up to the clock (and the rows in flight stay so up
            // to the next one's arrival).
            return Some((self.t.min(next_row - 1).max(horizon), running));
        }
        if next_row <= horizon {
            return None; // a row joins before the horizon
        }
        let m = &self.quiet;
        let known = m.step == self.step && m.reads == reads && horizon <= m.until;
        if !known && !self.quiet_scan(horizon, reads) {
            return None;
        }
        let m = &self.quiet;
        let mut until = m.until;
        let mut gone = 0;
        if !m.finishes.is_empty() {
            // Ticks: step j from now starts at t + j dt; the steps starting before the horizon are
            // the first ceil((horizon - t) / dt).
            let (dt, _) = self.quiet_step_lengths();
            let k = ((i128::from(horizon - self.t) + dt - 1) / dt) as u64;
            gone = m.finishes.partition_point(|&f| f < self.step + k);
            if let Some(&f) = m.finishes.get(gone) {
                until = until.min(self.t + ((f - self.step) as i128 * dt) as i64);
            }
        }
        Some((until.min(next_row - 1), running - gone as u64))
    }

    /// `quiet_through`'s look at the running sequences: vouches for the steps before `horizon` and up
    /// to `QUIET_AHEAD` past them, or else those before it only; false if not even those are neutral.
    #[inline(never)]
    fn quiet_scan(&mut self, horizon: i64, reads: RouterReads) -> bool {
        if !self.lockstep
            || self.running.is_empty()
            || !self.nothing_waits()
            || !self.swapped.is_empty()
            || self.swap_blocks_step != 0
            || self.ts_every != 0
            || self.outstanding != 0
            || self.forks
            || self.one_free_block_binds()
        {
            return false;
        }
        // The steps starting before the horizon: 0..need. Neutral steps keep the batch (but for
        // finishes, under ticks), so step j lasts `dt0 + ddt j` and starts at `j dt0 + ddt j (j-1)/2`.
        let (dt0, ddt) = self.quiet_step_lengths();
        let gap = i128::from(horizon - self.t);
        let start = |j: u64| -> i128 {
            let j = i128::from(j);
            j * dt0 + ddt * ((j * (j - 1)) >> 1)
        };
        let need = if ddt == 0 {
            if dt0 <= 0 {
                return false;
            }
            u64::try_from((gap + dt0 - 1) / dt0).unwrap_or(u64::MAX)
        } else {
            let (mut lo, mut hi) = (1u64, QUIET_MAX + 1); // start(lo - 1) < gap; the answer <= hi
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if start(mid) >= gap {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            lo
        };
        if need > QUIET_MAX {
            return false;
        }
        for k in [need + QUIET_AHEAD, need] {
            let end = i128::from(self.t) + start(k);
            if end <= i128::from(MAX_TIME_PS) && self.quiet_steps(k, reads) {
                let m = &mut self.quiet;
                (m.step, m.reads, m.k, m.until) = (self.step, reads, k, end as i64);
                return true;
            }
        }
        false
    }

    /// Whether the `k` steps from now are neutral for a router reading `reads` (see `quiet_through`),
    /// writing the steps at which sequences finish into `self.quiet.finishes` (sorted).
    fn quiet_steps(&mut self, span: u64, reads: RouterReads) -> bool {
        let (step, bs) = (self.step, self.cfg.block_size);
        let may_finish = matches!(self.cfg.time, TimeModel::Ticks { .. }) && !reads.kv;
        let paged = self.cfg.policy.is_paged();
        let keys = reads.keys && paged && self.cfg.enable_prefix_caching;
        let mut finishes = std::mem::take(&mut self.quiet.finishes);
        finishes.clear();
        let mut pops = 0u64;
        let mut neutral = true;
        for &slot in &self.running {
            let seq = &self.slab[slot];
            if !seq.lazy {
                neutral = false;
                break;
            }
            let since = step - seq.base_step;
            let (c, generated) = (seq.base_c + since, seq.base_g + since); // computed and generated now
            // It samples its last token in step `step + left - 1` (and frees its blocks after it).
            let left = seq.target - generated;
            let steps = if left <= span {
                if !may_finish {
                    neutral = false;
                    break;
                }
                finishes.push(step + left - 1);
                left
            } else {
                span
            };
            if !paged {
                continue;
            }
            // Its steps compute tokens c .. c + steps; one at a block boundary pops a block.
            let popped = div_bs(c + steps - 1, bs) + 1 - div_bs(c + bs - 1, bs);
            if popped > 0 && reads.kv {
                neutral = false;
                break;
            }
            pops += popped;
            if keys {
                // Blocks full by then beyond the keyed ones get keys at its events: phantom ones only
                // past its real keys or (deferred keys) from its private content on.
                let table = &seq.table;
                let phantom_only = table.num_keyed_blocks > table.num_real_keys
                    || (self.defer_keys && table.num_keyed_blocks >= div_bs(seq.private_from, bs));
                if div_bs(c + steps, bs) > table.num_keyed_blocks && !phantom_only {
                    neutral = false;
                    break;
                }
            }
        }
        if neutral && pops > 0 {
            let Memory::Paged(pool) = &self.mem else {
                unreachable!("only paged sequences pop blocks");
            };
            let free = u64::from(pool.num_free_blocks());
            if pops > free || (self.cfg.one_free_block && free - pops <= self.running.len() as u64)
            {
                neutral = false; // a block might not be there: preemption, or a full step
            } else if keys && pool.maps_keys() {
                // The blocks popped are the free queue's first ones (blocks freed meanwhile join at
                // the head, taken first, or at the tail, not reached): none may lose a mapped key.
                let mut block = None;
                for _ in 0..pops {
                    block = pool.next_free(block);
                    if pool.is_mapped(block.expect("enough free blocks")) {
                        neutral = false;
                        break;
                    }
                }
            }
        }
        finishes.sort_unstable();
        self.quiet.finishes = finishes;
        neutral
    }

    /// Whether `row` is finished or rejected.
    #[inline]
    pub(crate) fn row_done(&self, row: usize) -> bool {
        self.out.status[row - self.out_base] >= 0
    }

    /// The next row to join (rows before it joined, or are fork-cow samples).
    #[inline]
    pub(crate) fn next_row(&self) -> usize {
        self.nxt
    }

    /// Sequences waiting to be (re)admitted: the waiting queue, rows joined but not built yet, and the
    /// sequences of the swapped-out units (each sample of a swapped group).
    pub(crate) fn num_waiting(&self) -> u64 {
        let swapped: usize = self
            .swapped
            .iter()
            .map(|&k| self.slab[k].members.len().max(1))
            .sum();
        (self.waiting.len() + self.fresh.len() + swapped) as u64
    }

    /// Sequences in the running list.
    pub(crate) fn num_running(&self) -> u64 {
        self.running.len() as u64
    }

    /// Rows pushed with arrival at or before `t` that have not joined yet (a group: its parent only).
    pub(crate) fn num_in_flight(&self, t: i64) -> u64 {
        let base = self.row_base;
        let mut n = 0;
        let mut row = self.nxt;
        while row - base < self.inp.len() && self.inp.arrival_ps[row - base] <= t {
            if self.inp.fork_parent(row - base) < 0 {
                n += 1;
            }
            row += 1;
        }
        n
    }

    /// KV memory in use and in all: paged, blocks with a reference (the null block excluded) and the
    /// usable blocks; contiguous, the reserved regions' token slots and the capacity in tokens.
    pub(crate) fn kv_used_total(&self) -> (u64, u64) {
        match &self.mem {
            Memory::Paged(pool) => {
                let total = self.cfg.capacity_blocks();
                (total - u64::from(pool.num_free_blocks()), total)
            }
            Memory::Contiguous(_) => {
                let used = self
                    .running
                    .iter()
                    .map(|&k| self.slab[k].region.map_or(0, |r| r.1))
                    .sum();
                (used, self.cfg.capacity_tokens())
            }
        }
    }

    /// Whether the prefix map can hold keys (paged, caching on).
    pub(crate) fn caches_prefixes(&self) -> bool {
        self.cfg.policy.is_paged() && self.cfg.enable_prefix_caching
    }

    /// How many of `keys`, from the first, the prefix map holds (in use or evictable).
    pub(crate) fn leading_hits(&self, keys: &[BlockKey]) -> u64 {
        match &self.mem {
            Memory::Paged(pool) if pool.enable_caching() => keys
                .iter()
                .take_while(|&&k| pool.lookup(k).is_some())
                .count() as u64,
            _ => 0,
        }
    }

    /// Every key in the prefix map (empty unless paged with caching on).
    pub(crate) fn cached_keys(&self) -> Vec<BlockKey> {
        match &self.mem {
            Memory::Paged(pool) if pool.enable_caching() => pool.cached_keys().collect(),
            _ => Vec::new(),
        }
    }
}
