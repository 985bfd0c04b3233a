//! The memory backends (paged pool or contiguous space) and what a step weighs by time (DESIGN.md
//! §Memory, §Metrics): region sizes, peak blocks, releasing a sequence's memory, the memory state of a
//! step and `record`, which adds it to the time-weighted counters.

use super::contiguous::Space;
use super::timing::clock_overflow_message;
use super::{Engine, EngineConfig, MAX_TIME_PS, Policy, Seq, event};
use crate::block_table::{blocks_for, rem_bs};
use crate::{BlockId, BlockPool};

/// The region a contiguous policy reserves for a sequence, in token slots.
pub(super) fn region_size(cfg: &EngineConfig, s: &Seq) -> u64 {
    region_size_of(cfg, s.prompt_len, s.target, s.max_gen)
}

/// `region_size` of a sequence of prompt `prompt`, target `target` and output cap `max_gen`.
#[inline]
pub(super) fn region_size_of(cfg: &EngineConfig, prompt: u64, target: u64, max_gen: u64) -> u64 {
    match cfg.policy {
        Policy::Static => cfg.max_model_len.unwrap_or(0),
        Policy::OrcaMax => prompt + max_gen,
        Policy::OrcaPow2 => prompt + target.max(1).next_power_of_two(),
        _ => prompt + target, // orca-oracle: exactly what it will generate
    }
}

/// Blocks held at the sequence's largest (its last token's K/V is never computed); `reserve` promises
/// room for every token it may generate.
pub(super) fn peak_blocks(cfg: &EngineConfig, s: &Seq) -> u64 {
    peak_blocks_of(cfg, s.prompt_len, s.target, s.max_gen)
}

/// `peak_blocks` of a sequence of prompt `prompt`, target `target` (at least 1) and output cap `max_gen`.
#[inline]
pub(super) fn peak_blocks_of(cfg: &EngineConfig, prompt: u64, target: u64, max_gen: u64) -> u64 {
    if cfg.policy == Policy::Reserve {
        blocks_for(prompt + max_gen, cfg.block_size)
    } else {
        blocks_for(prompt + target - 1, cfg.block_size)
    }
}

/// What `record` weighs by time: token slots stored, allocated, wasted inside blocks or regions,
/// promised for later, stranded between regions; blocks held and blocks the tables cover.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct MemoryState {
    pub(super) stored: u64,
    pub(super) allocated: u64,
    pub(super) internal: u64,
    pub(super) reserved: u64,
    pub(super) external: u64,
    pub(super) held: u64,
    pub(super) logical: u64,
    /// A hybrid pool of unequal pages: the slots its attention groups' distinct held blocks hold beyond
    /// `held x block size` (B_g - B each); zero otherwise.
    pub(super) extra: i64,
}

pub(super) enum Memory {
    Paged(BlockPool),
    Contiguous(Space),
}

/// Sums over running sequences of what `measure` needs, kept incrementally in lockstep mode.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Aggregates {
    /// Tokens computed (after the current step's allocation).
    pub(super) c: u64,
    /// Paged: unused slots in partially filled last blocks.
    pub(super) internal: i64,
    /// Paged: blocks the sequences' tables cover (shared blocks counted per holder).
    pub(super) logical: u64,
    /// Contiguous: prompt + target tokens, and region sizes.
    pub(super) fin: u64,
    pub(super) size: u64,
}

impl Engine<'_> {
    pub(super) fn release(&mut self, k: usize) {
        if self.cfg.groups.is_some() {
            self.hybrid_release(k, false);
            return;
        }
        if self.log.is_some() {
            let row = self.slab[k].row;
            for i in (0..self.slab[k].table.blocks().len()).rev() {
                let b = i64::from(self.slab[k].table.blocks()[i].0);
                self.log(event::FREE, row, b);
            }
        }
        let s = &mut self.slab[k];
        match &mut self.mem {
            Memory::Paged(pool) => {
                s.table.release(pool);
                self.outstanding -= u64::from(s.reserved_blocks);
                s.reserved_blocks = 0;
            }
            Memory::Contiguous(space) => {
                let (start, size) = s.region.take().expect("a running sequence holds a region");
                space.free(start, size);
            }
        }
    }

    /// `release` of a finisher whose free waited for the batch computing its discarded token
    /// (`defer_block_free`, `offload/async_tier.rs`): a hybrid pool's groups are freed in one release, as
    /// vLLM's `_drain_deferred_frees` does (`Groups::free_at_once`).
    pub(super) fn release_deferred(&mut self, k: usize) {
        if self.cfg.groups.is_some() {
            self.hybrid_release(k, true);
        } else {
            self.release(k);
        }
    }

    /// Blocks in the tables of requests that hold them outside the running list (DESIGN.md §Metrics,
    /// `blocks_saved_by_sharing`): a prefill replica's finished requests until their transfer ends
    /// (`sending`) and the held requests, whose loads (a CPU tier's, a decode replica's transfers) land in
    /// them (and under `async_scheduling` with a tier the finishers whose blocks wait for the batch in
    /// flight: `offload/async_tier.rs` adds them). Their blocks are held, so they count among the blocks
    /// the tables cover (they read as negative savings before).
    #[inline]
    pub(super) fn idle_table_blocks(&self) -> u64 {
        // (most runs: no prefill sends and no held request; `held_empty` is set by the waiting phase,
        // the only place `held` changes, and true without a tier)
        if self.sends.is_none() && self.tier_hot.held_empty {
            return 0;
        }
        self.idle_table_blocks_now()
    }

    #[inline(never)]
    fn idle_table_blocks_now(&self) -> u64 {
        let mut n = 0;
        if let Some(sends) = self.sends.as_deref() {
            n += sends
                .sending
                .values()
                .map(|&k| self.table_blocks(k))
                .sum::<u64>();
        }
        if let Some(tier) = self.tier.as_deref() {
            n += tier.held.iter().map(|&k| self.table_blocks(k)).sum::<u64>();
        }
        n
    }

    /// The blocks sequence `k`'s tables hold (a hybrid model's groups' non-null ones).
    pub(super) fn table_blocks(&self, k: usize) -> u64 {
        let s = &self.slab[k];
        match s.hybrid.as_ref() {
            Some(hs) => hs
                .tables
                .tables
                .iter()
                .map(|t| t.blocks.iter().filter(|&&b| b != BlockId::NULL).count() as u64)
                .sum(),
            None => s.table.blocks().len() as u64,
        }
    }

    /// Memory state during the step (after allocation, before finishing), by walking the running list.
    pub(super) fn memory_state(&self) -> MemoryState {
        let bs = self.cfg.block_size;
        let mut m = MemoryState::default();
        match &self.mem {
            Memory::Paged(pool) if self.cfg.groups.is_some() => {
                return self.hybrid_memory_state(pool);
            }
            Memory::Paged(pool) => {
                m.held = self.cfg.capacity_blocks() - u64::from(pool.num_free_blocks());
                m.logical = self.idle_table_blocks();
                // A partial block shared by forked samples (until their first write) counts once.
                let mut shared_partial: Vec<BlockId> = Vec::new();
                for &k in &self.running {
                    let s = &self.slab[k];
                    let c = s.num_computed;
                    m.logical += blocks_for(c, bs);
                    if rem_bs(c, bs) == 0 {
                        continue;
                    }
                    let last = *s.table.blocks().last().expect("a partial block");
                    if pool.ref_cnt_of(last) > 1 {
                        if shared_partial.contains(&last) {
                            continue;
                        }
                        shared_partial.push(last);
                    }
                    m.internal += bs - rem_bs(c, bs);
                }
                m.allocated = m.held * bs;
                m.stored = m.allocated - m.internal;
                m.reserved = self.outstanding * bs;
            }
            Memory::Contiguous(space) => {
                for &k in &self.running {
                    let s = &self.slab[k];
                    let size = s.region.expect("running holds a region").1;
                    let fin = s.prompt_len + s.target;
                    m.allocated += size;
                    m.stored += s.num_computed;
                    m.reserved += fin - s.num_computed;
                    m.internal += size - fin;
                }
                m.external = space.external_fragmentation();
            }
        }
        m
    }

    /// Adds one step of `dt` picoseconds to the counters.
    #[inline]
    pub(super) fn record(&mut self, dt: u64, batch: u64, tokens: u64, m: MemoryState) {
        if (self.t as u64).saturating_add(dt) > MAX_TIME_PS {
            self.stop_after_step(clock_overflow_message(self.step, self.t));
            return;
        }
        if self.ts_every > 0 && self.step % self.ts_every == 0 {
            let free = self.cfg.capacity_tokens() - m.allocated;
            self.out.timeseries.push([
                self.step as i64,
                self.t,
                batch as i64,
                tokens as i64,
                free as i64,
                m.stored as i64,
                m.allocated as i64,
                m.internal as i64,
                m.reserved as i64,
                m.external as i64,
            ]);
        }
        // One 64x64->128 multiply each (the products fit: both factors are below 2^64).
        if self.cfg.groups.is_some() {
            let recording = self.ts_every > 0 && self.step % self.ts_every == 0;
            self.record_group_blocks(dt, recording);
        }
        let w = |x: u64| (u128::from(dt) * u128::from(x)) as i128;
        let c = &mut self.out.counters;
        c.w_batch += w(batch);
        c.w_internal += w(m.internal);
        if m.reserved != 0 {
            c.w_reserved += w(m.reserved);
        }
        if matches!(self.mem, Memory::Paged(_)) {
            // Allocated = held x block size and stored = allocated - internal: summed once at the end.
            c.w_held_blocks += w(m.held);
            c.w_logical_blocks += w(m.logical);
            self.peak_held = self.peak_held.max(m.held);
            if m.extra != 0 {
                self.w_extra_slots += i128::from(dt) * i128::from(m.extra);
                self.peak_allocated_extra = self.peak_allocated_extra.max(i128::from(m.allocated));
            }
        } else {
            c.w_stored += w(m.stored);
            c.w_allocated += w(m.allocated);
            c.peak_allocated_tokens = c.peak_allocated_tokens.max(i128::from(m.allocated));
            if m.external != 0 {
                c.w_external += w(m.external);
            }
        }
        c.num_steps += 1;
        c.busy_ps += i128::from(dt);
        c.sum_batch += i128::from(batch);
        c.sum_batched_tokens += i128::from(tokens);
        c.peak_batch = c.peak_batch.max(i128::from(batch));
        self.out.itl_steps.push(dt as i64);
        self.t += dt as i64;
        self.step += 1;
    }
}
