//! The engine's side of a stepped replica (`crate::cluster::replica`, DESIGN.md §The stepped replica):
//! an engine over owned input columns that grow one row (or fork-cow group) at a time, advanced to a
//! horizon, and the signals a router reads from it.

use std::sync::atomic::AtomicBool;

use super::{Engine, EngineConfig, EngineInput, EngineOutput, MAX_TIME_PS, Memory, Result};
use crate::BlockKey;

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

    /// Whether every step that would start before `horizon` is quiet (lockstep, no event in it, nothing
    /// waiting, swapped or about to join, no time series): then the signals at `horizon` are those of
    /// now, and the replica need not step there (taking the span later, in one piece, is exact and
    /// cheaper than cutting it at every arrival of the fleet). The buckets found empty are remembered
    /// until the next step.
    pub(crate) fn quiet_through(&mut self, horizon: i64) -> bool {
        if !self.lockstep
            || self.t >= horizon
            || self.running.is_empty()
            || !self.nothing_waits()
            || !self.swapped.is_empty()
            || self.swap_blocks_step != 0
            || self.ts_every != 0
            || self.one_free_block_binds()
        {
            return false;
        }
        let i = self.nxt - self.row_base;
        if i < self.inp.len() && self.inp.arrival_ps[i] <= horizon {
            return false; // a row joins before the horizon
        }
        let (dt0, ddt) = self.quiet_step_lengths();
        let start = |j: u64| -> i128 {
            let j = i128::from(j);
            j * dt0 + ddt * (j * (j - 1) / 2)
        };
        // The steps starting before the horizon: 0..k.
        let gap = i128::from(horizon - self.t);
        let mask = self.ring_mask as u64;
        let mut k = 1;
        while k <= mask && start(k) < gap {
            k += 1;
        }
        if k > mask || i128::from(self.t) + start(k) > i128::from(MAX_TIME_PS) {
            return false;
        }
        let step = self.step;
        let mut from = if self.quiet_checked.0 == step {
            self.quiet_checked.1
        } else {
            0
        };
        while from < k {
            if !self.ring[(step + from) as usize & self.ring_mask].is_empty() {
                return false;
            }
            from += 1;
        }
        self.quiet_checked = (step, from);
        true
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
