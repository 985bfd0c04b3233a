//! A model with several KV-cache groups (DESIGN.md §Hybrid attention; the twin of
//! `python/kvsim/reference/engine/hybrid.py`): a sequence's admission (the lookup every group agrees on,
//! the full-prompt check with the windows' caps, the first chunk's room), its growth (blocks leaving a
//! window freed first), its release, and the memory a step weighs. The scheduler's rules (budget, seats,
//! watermark, head-of-line, preemption) are the engine's own, unchanged; such a run takes full steps only.
//! With Mamba groups and prefix caching (vLLM's `mamba_cache_mode="align"`) prefill chunks are cut to
//! block boundaries first (`mamba_split`), and a request whose Mamba hit was keyed in the same step waits.

use super::admission::{GpuHits, NEVER, gate_tokens, over_budget};
use super::{Engine, EngineConfig, Memory, MemoryState, event};
use crate::kv_groups::{GroupKind, GroupSpec, Groups, HybridTables, KeyCache};
use crate::{BlockId, BlockPool};

/// A sequence's state in a hybrid pool (boxed in `Seq::hybrid`, so a model of one group pays 8 bytes).
#[derive(Debug)]
pub(super) struct HybridSeq {
    pub(super) tables: HybridTables,
    pub(super) keys: KeyCache,
    /// With a CPU tier (DESIGN.md §CPU tier, "A hybrid model"): the connector's copy of each group's
    /// table (None until scheduled since its last lookup; stale window blocks zeroed), and each group's
    /// next chunk to offer.
    pub(super) conn: Option<Vec<Vec<BlockId>>>,
    pub(super) next_stores: Vec<u64>,
    /// A landed load's state keys, until the waiting pass first reaches it (DESIGN.md §CPU tier, "A
    /// Mamba group"; `h_resume_loaded`).
    pub(super) landed: Vec<crate::kv_groups::StateKeyed>,
    /// `async_scheduling`: the step that last scheduled it (its index among the steps committed; -1
    /// before any, as the reference's `Seq.flight_step`) and its tokens there (DESIGN.md §Engine,
    /// "Asynchronous scheduling": `Engine::settled`).
    pub(super) flight: (i128, u64),
    /// `async_scheduling`: the steps committed when it last sampled a token (0: never;
    /// `Engine::known_tokens`).
    pub(super) sampled: i128,
}

impl Default for HybridSeq {
    fn default() -> Self {
        HybridSeq {
            tables: HybridTables::default(),
            keys: KeyCache::default(),
            conn: None,
            next_stores: Vec::new(),
            landed: Vec::new(),
            flight: (-1, 0),
            sampled: 0,
        }
    }
}

/// The tokens of a prefill chunk of `n` from `start` (a request of `num_tokens` tokens, prompt
/// `num_prompt`, junction `junction`) in Mamba align mode: vLLM's `Scheduler._mamba_block_aligned_split`
/// (DESIGN.md §Hybrid attention, "Mamba groups"), applied after the budget and before the room checks,
/// to running and waiting requests alike; `n` outside align mode. 0: nothing this step.
pub(super) fn mamba_split(
    cfg: &EngineConfig,
    start: u64,
    n: u64,
    num_tokens: u64,
    num_prompt: u64,
    junction: u64,
) -> u64 {
    match &cfg.groups {
        Some(groups) if groups.align() => groups.split(
            start,
            n,
            num_tokens,
            num_prompt,
            junction,
            cfg.max_num_batched_tokens,
        ),
        _ => n,
    }
}

impl Engine<'_> {
    #[inline]
    fn groups(&self) -> &Groups {
        self.cfg.groups.as_ref().expect("a hybrid pool")
    }

    /// A waiting request's prefix lookup over every group (vLLM's `find_longest_cache_hit`, up to its
    /// tokens but one) into `self.lookup`, its output synced and its hybrid state made; the hit's tokens.
    /// An ordinary admission (`hybrid_try_admit`), a CPU tier's lookup (`h_tier_head`) and a decode
    /// replica's transfer (`h_remote_head`) start alike.
    pub(super) fn hybrid_lookup(&mut self, k: usize) -> u64 {
        let groups = self.cfg.groups.as_ref().expect("a hybrid pool");
        let Memory::Paged(pool) = &self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let s = &mut self.slab[k];
        let total = s.num_tokens();
        s.sync_output();
        let hs = s.hybrid.get_or_insert_with(Box::default);
        groups.lookup(pool, &s.segs, &mut hs.keys, total - 1, &mut self.lookup);
        self.lookup.tokens
    }

    /// `try_admit` for a hybrid pool: 0 if the head cannot start now, `NEVER`, `SKIP`, or its first
    /// chunk's tokens (vLLM's `get_computed_blocks` + `allocate_slots(full_sequence_must_fit=...)`). Its
    /// lookup is run here, or (`GpuHits::Looked`) is in `self.lookup` already.
    pub(super) fn hybrid_try_admit(&mut self, k: usize, budget: u64, found: GpuHits) -> u64 {
        let cfg = self.cfg;
        let groups = cfg.groups.as_ref().expect("a hybrid pool");
        let watermark = self.admission_watermark();
        let hit = match found {
            GpuHits::Ask => self.hybrid_lookup(k),
            GpuHits::Looked => self.lookup.tokens,
            GpuHits::Taken(_) => unreachable!("a single group's hits"),
        };
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let s = &mut self.slab[k];
        let total = s.num_tokens();
        let prompt = s.prompt_len;
        let mut num_new = total - hit;
        if cfg.chunked_prefill {
            num_new = num_new.min(budget);
            num_new = mamba_split(cfg, hit, num_new, total, prompt, self.lookup.junction);
            if num_new == 0 {
                return 0; // a chunk cut to nothing: the waiting phase stops here
            }
        } else if num_new > cfg.max_num_batched_tokens {
            return NEVER;
        } else if num_new > budget {
            return over_budget(cfg);
        }
        let free = u64::from(pool.num_free_blocks());
        let keyed = &self.step_keys;
        if cfg.full_prompt_gate {
            let full = gate_tokens(cfg, total);
            let checkpoint = groups.needs_checkpoint(hit, full, total, prompt);
            let need = groups.need(
                pool,
                None,
                full,
                Some(&self.lookup),
                hit,
                true,
                checkpoint,
                keyed,
            );
            if need + watermark > free {
                return 0;
            }
        }
        let end = hit + num_new;
        let checkpoint = groups.needs_checkpoint(hit, end, total, prompt);
        if groups.need(
            pool,
            None,
            end,
            Some(&self.lookup),
            hit,
            false,
            checkpoint,
            keyed,
        ) + watermark
            > free
        {
            return 0;
        }
        let hs = s.hybrid.as_mut().expect("its lookup made it");
        self.group_new.clear();
        groups.admit(
            pool,
            &mut hs.tables,
            &mut hs.keys,
            &s.segs,
            &self.lookup,
            end,
            end,
            prompt,
            checkpoint,
            &mut self.step_keys,
            &mut self.group_new,
        );
        s.num_computed = end;
        let row = s.row;
        self.take_states(k);
        if self.log.is_some() {
            self.log_hybrid_admission(row, hit);
        }
        self.note_admission(k, hit, total, 0);
        num_new
    }

    /// An admission over a hybrid pool logged: `admit`, the request's hits its windows kept as of `done`
    /// tokens (its hit's at an ordinary admission, the loaded or transferred tokens' when its tables are
    /// held for a transfer: `h_hold_tables`), then its new blocks (`self.group_new`). Under
    /// `kv_offloading_hit_junction` with a CPU tier the `admit` row carries the request's junction in
    /// `count` (0: none; the tier's lookup may have raised it, and the log is where the lab's replay reads
    /// it: DESIGN.md §Event log).
    pub(super) fn log_hybrid_admission(&mut self, row: usize, done: u64) {
        let groups = self.cfg.groups.as_ref().expect("a hybrid pool");
        let junction = if self
            .tier
            .as_deref()
            .is_some_and(super::offload::Tier::hit_junction)
        {
            self.lookup.junction as i64
        } else {
            -1
        };
        self.log_count(event::ADMIT, row, -1, junction);
        for g in 0..groups.len() {
            let spec = &groups.specs()[g];
            let skipped = spec.skipped(done) / spec.block_size;
            for i in skipped as usize..self.lookup.hits[g].len() {
                let b = self.lookup.hits[g][i];
                if b != BlockId::NULL {
                    self.log_count(event::PREFIX_HIT, row, i64::from(b.0), g as i64);
                }
            }
        }
        self.log_group_allocations(row);
    }

    /// Room for `num_new` more tokens of running `k`: blocks that left a window are freed first (whether
    /// or not the rest fits), then every group's new blocks must be free (`hybrid_grow`, no watermark).
    pub(super) fn hybrid_try_grow(&mut self, k: usize, num_new: u64) -> bool {
        if !self.hybrid_grow(k, num_new, 0) {
            return false;
        }
        if let Some(tier) = self.tier.as_deref_mut() {
            // (a CPU tier's stores read what a step allocates: vLLM's flush, the connector's tables)
            tier.touched.extend(self.group_new.iter().map(|&(b, _)| b));
        }
        true
    }

    /// `num_new` more tokens of `k` (a running sequence, or a held one resumed after its load,
    /// `h_resume_loaded`) with `watermark` blocks left free: blocks that left a window by its settled
    /// tokens (`settled`) are freed first
    /// (whether or not the rest fits), then every group's new blocks are allocated (`self.group_new`)
    /// if they fit; false if not.
    pub(super) fn hybrid_grow(&mut self, k: usize, num_new: u64, watermark: u64) -> bool {
        let groups = self.cfg.groups.as_ref().expect("a hybrid pool");
        let settled = self.settled(k);
        let known = self.known_tokens(k); // (the keys' cap)
        self.hybrid_remove_skipped_at(k, settled);
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let s = &mut self.slab[k];
        let row = s.row;
        let end = s.num_computed + num_new;
        let checkpoint = groups.needs_checkpoint(s.num_computed, end, s.num_tokens(), s.prompt_len);
        let tables = &s
            .hybrid
            .as_ref()
            .expect("a growing sequence holds tables")
            .tables;
        if groups.need(
            pool,
            Some(tables),
            end,
            None,
            s.num_computed,
            false,
            checkpoint,
            &self.step_keys,
        ) + watermark
            > u64::from(pool.num_free_blocks())
        {
            return false;
        }
        s.sync_output();
        let hs = s.hybrid.as_mut().expect("a growing sequence holds tables");
        self.group_new.clear();
        groups.grow(
            pool,
            &mut hs.tables,
            &mut hs.keys,
            &s.segs,
            end,
            end.min(known),
            checkpoint,
            &mut self.step_keys,
            &mut self.group_new,
        );
        s.num_computed = end;
        self.take_states(k);
        if self.log.is_some() {
            self.log_group_allocations(row);
        }
        true
    }

    /// The state blocks `k`'s allocation just keyed, handed to the CPU tier (`StepKeys::hand_off`; none
    /// without one).
    pub(super) fn take_states(&mut self, k: usize) {
        self.step_keys.hand_off(k);
    }

    /// The tokens running `k` computes this step out of the `n` the budget gives (`mamba_split`); `n`
    /// unless the pool is in Mamba align mode. 0: `k` is passed over this step.
    pub(super) fn hybrid_split(&self, k: usize, n: u64) -> u64 {
        let cfg = self.cfg;
        let s = &self.slab[k];
        let junction = s.hybrid.as_ref().map_or(0, |hs| hs.tables.junction);
        mamba_split(
            cfg,
            s.num_computed,
            n,
            s.num_tokens(),
            s.prompt_len,
            junction,
        )
    }

    /// A request finished on a replica of a disaggregated fleet (its NIXL connector, either pool): the
    /// blocks its windows left behind at its computed tokens are freed first (vLLM's
    /// `_connector_finished` calls `remove_skipped_blocks` before the connector sees its tables), before
    /// the rest is freed or held for the transfer (DESIGN.md §Prefill/decode disaggregation).
    pub(in crate::engine) fn hybrid_connector_finished(&mut self, k: usize) {
        self.hybrid_remove_skipped(k);
    }

    /// The blocks `k`'s windows left behind at its computed tokens freed (vLLM's `remove_skipped_blocks`)
    /// and logged (`window`), listed in `self.group_new`; nothing for a sequence without tables. A
    /// growth (`hybrid_grow`), a finish on a fleet's replica (`hybrid_connector_finished`) and a finish
    /// handed to a CPU tier (`h_tier_finished`) alike. Its computed tokens but those of a batch just
    /// scheduled and not yet committed (`async_scheduling` with a CPU tier, at the output of the batch in
    /// flight: vLLM's `_connector_finished` frees on `num_computed_tokens − num_in_flight_tokens`, a
    /// discarded token's still in flight).
    pub(super) fn hybrid_remove_skipped(&mut self, k: usize) {
        let s = &self.slab[k];
        let computed = match s.hybrid.as_deref() {
            Some(hs) if hs.flight.0 == self.out.counters.num_steps => s.num_computed - hs.flight.1,
            _ => s.num_computed,
        };
        self.hybrid_remove_skipped_at(k, computed);
    }

    /// `k`'s computed tokens but those of the step in flight (vLLM's `num_computed_tokens −
    /// num_in_flight_tokens`, what `allocate_slots` frees windows on): under `async_scheduling`, while the
    /// step before this schedule runs and it scheduled `k`, its tokens there are not yet settled
    /// (DESIGN.md §Engine, "Asynchronous scheduling"); otherwise all of them.
    pub(super) fn settled(&self, k: usize) -> u64 {
        let s = &self.slab[k];
        match s.hybrid.as_deref() {
            Some(hs) if self.async_prev >= 0 && hs.flight.0 == self.out.counters.num_steps - 1 => {
                s.num_computed - hs.flight.1
            }
            _ => s.num_computed,
        }
    }

    /// `k`'s tokens the scheduler knows (vLLM's `request.num_tokens`, which caps the keys an allocation
    /// sets): under `async_scheduling`, while the step before this schedule runs and it sampled a token of
    /// `k`, all but that one (DESIGN.md §Engine, "Asynchronous scheduling"); otherwise all.
    pub(super) fn known_tokens(&self, k: usize) -> u64 {
        let s = &self.slab[k];
        match s.hybrid.as_deref() {
            Some(hs) if self.async_prev >= 0 && hs.sampled == self.out.counters.num_steps => {
                s.num_tokens() - 1
            }
            _ => s.num_tokens(),
        }
    }

    /// `async_scheduling`, after a step's sampling: the sequences it sampled, with the tokens each has
    /// computed (`flight_sampled`, keyed when its outputs arrive: `settle_keys`).
    #[cold]
    #[inline(never)]
    pub(super) fn note_flight_sampled(&mut self) {
        if !matches!(&self.mem, Memory::Paged(pool) if pool.enable_caching()) {
            return;
        }
        let steps = self.out.counters.num_steps; // (this step's committed)
        let sampling = self.step - 1; // (`finish_step`'s, which `note_token` stamps)
        for i in 0..self.scheduled.len() {
            let k = self.scheduled[i].0;
            let s = &mut self.slab[k];
            let num_computed = s.num_computed;
            let sampled = s.generated > 0 && s.itl_last == sampling;
            let Some(hs) = s.hybrid.as_deref_mut() else {
                continue;
            };
            if sampled {
                hs.sampled = steps;
                self.flight_sampled.push((k, num_computed));
            }
        }
    }

    /// `async_scheduling`: the step in flight's outputs arrive; each sequence it sampled that still holds
    /// its blocks keys them up to the tokens it had computed then (vLLM's `update_from_output`:
    /// `cache_blocks` at `num_computed_tokens − num_in_flight_tokens` for a running request's sampled
    /// token, a finisher's too, before it is freed; a request preempted meanwhile is skipped, its output
    /// stale).
    pub(super) fn settle_keys(&mut self) {
        let groups = self.cfg.groups.as_ref().expect("a hybrid pool");
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("hybrid pools are paged")
        };
        for &(k, computed) in &self.flight_sampled {
            let s = &mut self.slab[k];
            s.sync_output();
            let Some(hs) = s.hybrid.as_deref_mut() else {
                continue;
            };
            if hs.tables.tables.is_empty() {
                continue; // (preempted since: no blocks)
            }
            groups.cache_to(
                pool,
                &mut hs.tables,
                &mut hs.keys,
                &s.segs,
                computed,
                &mut self.step_keys,
            );
        }
        self.flight_sampled.clear();
    }

    /// `hybrid_remove_skipped` at `computed` tokens (a growth's settled ones, `settled`).
    fn hybrid_remove_skipped_at(&mut self, k: usize, computed: u64) {
        let groups = self.cfg.groups.as_ref().expect("a hybrid pool");
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let s = &mut self.slab[k];
        let Some(hs) = s.hybrid.as_mut() else {
            return;
        };
        self.group_new.clear();
        groups.remove_skipped(pool, &mut hs.tables, computed, &mut self.group_new);
        let row = s.row;
        self.log_group_blocks(event::WINDOW, row);
    }

    /// Frees sequence `k`'s tables (finish or recompute preemption).
    pub(super) fn hybrid_release(&mut self, k: usize, at_once: bool) {
        let groups = self.cfg.groups.as_ref().expect("a hybrid pool");
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let s = &mut self.slab[k];
        let Some(hs) = s.hybrid.as_mut() else {
            return;
        };
        self.group_new.clear();
        if at_once {
            groups.free_at_once(pool, &mut hs.tables, &mut self.group_new);
        } else {
            groups.free(pool, &mut hs.tables, &mut self.group_new);
        }
        hs.landed.clear();
        self.step_keys.drop_owner(k); // (its states not offered yet: vLLM's `pop_blocks_for_free`)
        let row = s.row;
        self.log_group_blocks(event::FREE, row);
    }

    /// One `kind` row per block in `self.group_new` (`count`: its group), when a log is kept.
    fn log_group_blocks(&mut self, kind: i64, row: usize) {
        if self.log.is_some() {
            for i in 0..self.group_new.len() {
                let (b, g) = self.group_new[i];
                self.log_count(kind, row, i64::from(b.0), g as i64);
            }
        }
    }

    /// One `allocate` per block in `group_blocks` (`count`: its group), an `evict` first if it lost a key.
    pub(super) fn log_group_allocations(&mut self, row: usize) {
        let Memory::Paged(pool) = &mut self.mem else {
            return;
        };
        let evicted = pool.take_evicted();
        for i in 0..self.group_new.len() {
            let (b, g) = self.group_new[i];
            if evicted.contains(&b) {
                self.log_count(event::EVICT, row, i64::from(b.0), g as i64);
            }
            self.log_count(event::ALLOCATE, row, i64::from(b.0), g as i64);
        }
    }

    /// The step's memory state (after allocation, before finishing), walking the running tables: slots
    /// left in partly filled blocks of every group but a state's, and the blocks the tables hold.
    pub(super) fn hybrid_memory_state(&self, pool: &BlockPool) -> MemoryState {
        let groups = self.groups();
        let mut m = MemoryState {
            held: self.cfg.capacity_blocks() - u64::from(pool.num_free_blocks()),
            logical: self.idle_table_blocks(),
            ..MemoryState::default()
        };
        let bs = self.cfg.block_size;
        // Unequal pages: an attention group's distinct held blocks count B_g slots, not B (§Metrics).
        let wide = |spec: &GroupSpec| spec.kind != GroupKind::Mamba && spec.block_size != bs;
        let any_wide = groups.specs().iter().any(wide);
        let mut distinct: Vec<Vec<BlockId>> =
            vec![Vec::new(); if any_wide { groups.len() } else { 0 }];
        for &k in &self.running {
            let s = &self.slab[k];
            let Some(hs) = s.hybrid.as_ref() else {
                continue;
            };
            for (g, (spec, table)) in groups.specs().iter().zip(&hs.tables.tables).enumerate() {
                m.logical += table.blocks.iter().filter(|&&b| b != BlockId::NULL).count() as u64;
                if any_wide && wide(spec) {
                    distinct[g]
                        .extend(table.blocks.iter().copied().filter(|&b| b != BlockId::NULL));
                }
                if spec.kind != GroupKind::Mamba && !table.blocks.is_empty() {
                    let r = s.num_computed % spec.block_size;
                    m.internal += if r == 0 { 0 } else { spec.block_size - r };
                }
            }
        }
        for (spec, ids) in groups.specs().iter().zip(&mut distinct) {
            if ids.is_empty() {
                continue;
            }
            ids.sort_unstable();
            ids.dedup();
            m.extra += ids.len() as i64 * (spec.block_size as i64 - bs as i64);
        }
        m.allocated = (m.held * bs).saturating_add_signed(m.extra);
        m.stored = m.allocated - m.internal;
        m
    }

    /// Adds a step of `dt` ps of each group's blocks in the running tables to `out.group_blocks`
    /// (time-weighted sum, peak), and to the time series when `recording`.
    pub(super) fn record_group_blocks(&mut self, dt: u64, recording: bool) {
        let groups = self.cfg.groups.as_ref().expect("a hybrid pool");
        let n = groups.len();
        if self.out.counters.group_blocks.len() < n {
            self.out.counters.group_blocks.resize(n, [0, 0]);
        }
        for g in 0..n {
            let mut held = 0u64;
            for &k in &self.running {
                if let Some(hs) = self.slab[k].hybrid.as_ref() {
                    held += hs.tables.tables[g]
                        .blocks
                        .iter()
                        .filter(|&&b| b != BlockId::NULL)
                        .count() as u64;
                }
            }
            let e = &mut self.out.counters.group_blocks[g];
            e[0] += (u128::from(dt) * u128::from(held)) as i128;
            e[1] = e[1].max(i128::from(held));
            if recording {
                self.out.group_timeseries.push(held as i64);
            }
        }
    }

    /// The blocks a sequence of `last` tokens with a slot holds at most in a hybrid pool.
    pub(super) fn hybrid_peak_blocks(&self, last: u64) -> u64 {
        self.groups().peak_blocks(last)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{EngineInput, EngineOutput, run};
    use super::*;
    use crate::kv_groups::GroupSpec;
    use std::sync::atomic::AtomicBool;

    const MS: i64 = 1_000_000_000;

    /// Two requests of one 600-token prompt arriving together, output 2, on a Mamba group and a full
    /// group of block 64 (prefix caching: align mode), budget 1024.
    fn twins(enable_caching: bool) -> EngineOutput {
        let bs = 64;
        let spec = |kind, block_size| GroupSpec {
            kind,
            window: 0,
            block_size,
            cap: (kind == GroupKind::Mamba).then_some(2),
            checkpoint_blocks: 0,
        };
        // Without prefix caching a state is one block of max_model_len tokens.
        let mamba_bs = if enable_caching { bs } else { 1024 };
        let groups = Groups::new(
            vec![spec(GroupKind::Mamba, mamba_bs), spec(GroupKind::Full, bs)],
            if enable_caching { bs } else { 1024 },
            Some(0),
            enable_caching,
        )
        .unwrap();
        let cfg = EngineConfig {
            enable_prefix_caching: enable_caching,
            max_num_batched_tokens: 1024,
            max_model_len: Some(1024),
            groups: Some(groups),
            ..EngineConfig::for_tests(200, bs)
        };
        cfg.validate().unwrap();
        let inp = EngineInput {
            arrival_ps: &[0, 0],
            prompt_len: &[600, 600],
            target: &[2, 2],
            max_gen: &[2, 2],
            fork_parent: &[-1, -1],
            output_seg: &[1 << 63, (1 << 63) + 1],
            seg_offsets: &[0, 1, 2],
            segment_id: &[7, 7],
            segment_len: &[600, 600],
        };
        run(inp, &cfg, 0, true, &AtomicBool::new(false)).unwrap()
    }

    /// A sequence not yet scheduled has no step in flight: -1, never a step's index (the reference's
    /// `Seq.flight_step`), so `settled` cannot take the first step (index 0) for its own.
    #[test]
    fn a_new_sequence_has_no_step_in_flight() {
        assert_eq!(HybridSeq::default().flight, (-1, 0));
    }

    /// Align mode: the first request's prompt runs as [0, 576) then its tail; the second hits the state
    /// at 576, keyed in the first step, so it starts a step later (`cached_blocks_this_step`) and
    /// computes only the tail.
    #[test]
    fn a_mamba_state_keyed_this_step_seeds_the_next() {
        let out = twins(true);
        assert_eq!(out.first_scheduled, [0, MS]);
        assert_eq!(out.cached_tokens, [0, 576]);
        // A: [0, 576), [576, 600) + its first token, its second; B: its tail + first token, second.
        assert_eq!(out.first_token, [2 * MS, 2 * MS]);
        assert_eq!(out.finish, [3 * MS, 3 * MS]);
        let off = twins(false);
        assert_eq!(off.first_scheduled, [0, 0]);
        assert_eq!(off.cached_tokens, [0, 0]);
    }
}
