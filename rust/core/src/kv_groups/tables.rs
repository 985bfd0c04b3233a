//! A request's tables in a hybrid pool (vLLM 0.33.0's `single_type_kv_cache_manager.py` and
//! `kv_cache_coordinator.py`, DESIGN.md §Hybrid attention, "A request's tables"): the blocks an
//! allocation pops (`need`), the blocks that left a window (`remove_skipped`), hits taken and blocks
//! popped (`admit`, `grow`), full blocks keyed by sparse retention (`cache`, `keeps`), `free`, and the
//! most blocks a request holds (`peak_blocks`). `python/kvsim/reference/kv_groups.py` is the spec.

use super::{
    GroupKind, GroupSpec, GroupTable, Groups, HybridTables, KeyCache, Lookup, StateKeyed, StepKeys,
    cdiv, group_key,
};
use crate::{BlockId, BlockPool, Segment};

/// A need no pool meets (a Mamba hit keyed in this step), with room to add a watermark.
pub(super) const DEFERRED: u64 = u64::MAX / 4;

impl Groups {
    /// Blocks the pool must pop to give a request slots for `num_tokens` tokens (vLLM's
    /// `get_num_blocks_to_allocate`): a running request's (`req` Some) new blocks, or a new one's beyond
    /// its skipped and hit blocks plus its hits that are free; `capped`: the full-prompt check's caps.
    /// A Mamba group in align mode pops at most one block, two with a checkpoint (`checkpoint`:
    /// `needs_checkpoint` of the chunk); a new request whose Mamba hit was keyed in this step (`keyed`)
    /// needs more than any pool (vLLM's `MambaManager.get_num_blocks_to_allocate`).
    #[allow(clippy::too_many_arguments)]
    pub fn need(
        &self,
        pool: &BlockPool,
        req: Option<&HybridTables>,
        num_tokens: u64,
        hit: Option<&Lookup>,
        computed: u64,
        capped: bool,
        checkpoint: bool,
        keyed: &StepKeys,
    ) -> u64 {
        let mut total = 0;
        for (g, spec) in self.specs.iter().enumerate() {
            let mamba = spec.kind == GroupKind::Mamba;
            let mut required = cdiv(num_tokens, spec.block_size);
            if capped
                && !mamba
                && let Some(cap) = spec.cap
            {
                required = required.min(cap);
            }
            let most = if mamba {
                1 + u64::from(checkpoint)
            } else {
                u64::MAX
            };
            if let Some(r) = req {
                total += required
                    .saturating_sub(r.tables[g].blocks.len() as u64)
                    .min(most);
                continue;
            }
            let hits: &[BlockId] = hit.map_or(&[], |h| &h.hits[g]);
            if mamba
                && let Some(&last) = hits.last()
                && last != BlockId::NULL
                && pool
                    .block_hash(i64::from(last.0))
                    .ok()
                    .flatten()
                    .is_some_and(|key| keyed.contains(key))
            {
                return DEFERRED;
            }
            // (a state group's table is its hit, whatever a load skips: vLLM's `MambaManager` counts
            // every hit block that is free, taken or not)
            let skipped = if mamba {
                0
            } else {
                spec.skipped_blocks(computed)
            };
            total += required
                .saturating_sub(skipped.max(hits.len() as u64))
                .min(most);
            let outside = &hits[(skipped as usize).min(hits.len())..];
            total += outside
                .iter()
                .filter(|&&b| b != BlockId::NULL && pool.ref_cnt_of(b) == 0)
                .count() as u64;
        }
        total
    }

    /// Frees the request's blocks that left a window after `computed` tokens, each group's highest first
    /// down to its first null, replaced by the null block; pushes them as (block, group) into `freed`. A
    /// Mamba group's table has nulls inside it: its walk skips them down to position 0 (vLLM's
    /// `MambaManager._remove_blocks_in_range` in align mode).
    pub fn remove_skipped(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        computed: u64,
        freed: &mut Vec<(BlockId, usize)>,
    ) {
        for (g, (spec, table)) in self.specs.iter().zip(req.tables.iter_mut()).enumerate() {
            let skipped = (spec.skipped_blocks(computed) as usize).min(table.blocks.len());
            let start = freed.len();
            let mamba = spec.kind == GroupKind::Mamba;
            for i in (0..skipped).rev() {
                let b = table.blocks[i];
                if b == BlockId::NULL {
                    if mamba {
                        continue;
                    }
                    break;
                }
                freed.push((b, g));
                table.blocks[i] = BlockId::NULL;
            }
            if freed.len() > start {
                pool.release(freed[start..].iter().map(|&(b, _)| b));
            }
        }
    }

    /// A new request takes its hits (skipped ones as null blocks), then blocks for `num_tokens` tokens
    /// group by group (pushed into `new` as (block, group)), and keys its full blocks up to `num_cache`
    /// tokens (`checkpoint`, `keyed`: as `grow`). The caller checked `need`; `req` is reset (its vectors'
    /// buffers kept).
    #[allow(clippy::too_many_arguments)]
    pub fn admit(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        cache: &mut KeyCache,
        segs: &[Segment],
        hit: &Lookup,
        num_tokens: u64,
        num_cache: u64,
        num_prompt: u64,
        checkpoint: bool,
        keyed: &mut StepKeys,
        new: &mut Vec<(BlockId, usize)>,
    ) {
        self.take_hits(pool, req, hit, hit.tokens, num_prompt);
        self.grow(
            pool, req, cache, segs, num_tokens, num_cache, checkpoint, keyed, new,
        );
    }

    /// A new request admitted with a CPU-tier load (DESIGN.md §CPU tier, "A hybrid model"): its hits
    /// taken and its windows skipped as of `computed` tokens (its hits and the loaded ones: vLLM's
    /// `allocate_new_computed_blocks` with external tokens), then blocks for `computed` tokens, none of
    /// them keyed past the hits (they are keyed when the load lands: `cache_loaded`). The caller checked
    /// `need`.
    #[allow(clippy::too_many_arguments)]
    pub fn admit_loading(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        cache: &mut KeyCache,
        segs: &[Segment],
        hit: &Lookup,
        computed: u64,
        num_prompt: u64,
        keyed: &mut StepKeys,
        new: &mut Vec<(BlockId, usize)>,
    ) {
        self.take_hits(pool, req, hit, computed, num_prompt);
        self.grow(
            pool, req, cache, segs, computed, hit.tokens, false, keyed, new,
        );
    }

    /// A CPU-tier load landed: the request's blocks up to `num_tokens` take their keys (vLLM's
    /// `cache_blocks` in `_update_waiting_for_remote_kv`). The state blocks keyed are listed in `keyed`
    /// (`take_fresh`), neither marked keyed in this step nor anything else: vLLM keys them when its
    /// waiting pass first reaches the request, where the engine hands them off (`StepKeys::adopt`).
    pub fn cache_loaded(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        cache: &mut KeyCache,
        segs: &[Segment],
        num_tokens: u64,
        keyed: &mut StepKeys,
    ) {
        self.cache(pool, req, cache, segs, num_tokens, keyed, true);
    }

    /// The request's blocks up to `num_tokens` take their keys (vLLM's `cache_blocks` in
    /// `update_from_output` under asynchronous scheduling, when a step's sampled tokens arrive).
    pub fn cache_to(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        cache: &mut KeyCache,
        segs: &[Segment],
        num_tokens: u64,
        keyed: &mut StepKeys,
    ) {
        self.cache(pool, req, cache, segs, num_tokens, keyed, false);
    }

    /// A new request's tables: its hits, those a window skipped as of `done` tokens as null blocks
    /// (`req` reset, its vectors' buffers kept).
    fn take_hits(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        hit: &Lookup,
        done: u64,
        num_prompt: u64,
    ) {
        req.tables
            .resize_with(self.specs.len(), GroupTable::default);
        req.num_prompt = num_prompt;
        req.junction = hit.junction;
        for (g, (spec, table)) in self.specs.iter().zip(req.tables.iter_mut()).enumerate() {
            let hits = &hit.hits[g];
            let skipped = (spec.skipped_blocks(done) as usize).min(hits.len());
            let taken = &hits[skipped..];
            pool.acquire(taken.iter().copied().filter(|&b| b != BlockId::NULL));
            table.blocks.clear();
            table
                .blocks
                .resize(spec.skipped_blocks(done) as usize, BlockId::NULL);
            table.blocks.extend_from_slice(taken);
            table.num_cached = table.blocks.len() as u64;
        }
    }

    /// A request's blocks for `num_tokens` tokens group by group (pushed into `new` as (block, group)),
    /// then its keys up to `num_cache` tokens (the keys its Mamba groups set added to `keyed`):
    /// a running request's growth, and a new one's after its hits (`admit`, `admit_loading`);
    /// `checkpoint`: the chunk reserves a Mamba prefill checkpoint (`needs_checkpoint`). A Mamba group
    /// pops at most one block, two with a checkpoint (the checkpoint's at position `ceil(end / B) - 2`,
    /// then the running one), the positions before them padded with null blocks (vLLM's
    /// `MambaManager.allocate_new_blocks` in align mode). The caller checked `need`.
    #[allow(clippy::too_many_arguments)]
    pub fn grow(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        cache: &mut KeyCache,
        segs: &[Segment],
        num_tokens: u64,
        num_cache: u64,
        checkpoint: bool,
        keyed: &mut StepKeys,
        new: &mut Vec<(BlockId, usize)>,
    ) {
        for (g, (spec, table)) in self.specs.iter().zip(req.tables.iter_mut()).enumerate() {
            let required = cdiv(num_tokens, spec.block_size);
            let mut n = required.saturating_sub(table.blocks.len() as u64);
            if spec.kind == GroupKind::Mamba && n > 0 {
                n = n.min(1 + u64::from(checkpoint));
                table.blocks.resize((required - n) as usize, BlockId::NULL);
            }
            for _ in 0..n {
                let b = pool.allocate_one().expect("the caller checked the room");
                table.blocks.push(b);
                new.push((b, g));
            }
        }
        self.cache(pool, req, cache, segs, num_cache, keyed, false);
    }

    /// Keys each group's full blocks up to `num_tokens` tokens (vLLM's `cache_blocks`); the keys of
    /// Mamba groups go into `keyed` too (vLLM's `MambaManager.cached_blocks_this_step`), their blocks
    /// listed when it records them (a CPU tier's hand-offs). `landed`: a landed load's, whose state
    /// blocks are listed only (`cache_loaded`).
    #[allow(clippy::too_many_arguments)]
    fn cache(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        cache: &mut KeyCache,
        segs: &[Segment],
        num_tokens: u64,
        keyed: &mut StepKeys,
        landed: bool,
    ) {
        if !pool.enable_caching() {
            return;
        }
        let cacheable = if self.specs.len() == 1 {
            num_tokens
        } else {
            num_tokens / self.scheduler_block_size * self.scheduler_block_size
        };
        let (num_prompt, junction) = (req.num_prompt, req.junction);
        for g in 0..self.specs.len() {
            let spec = self.specs[g];
            let num_full = cacheable / spec.block_size;
            let start = req.tables[g].num_cached;
            if start >= num_full {
                continue;
            }
            let keys = self.keys(cache, segs, g, num_full);
            let table = &mut req.tables[g];
            for i in start..num_full {
                let b = table.blocks[i as usize];
                if b == BlockId::NULL || !self.keeps(&spec, num_prompt, junction, i) {
                    continue;
                }
                let key = group_key(keys[i as usize], g);
                pool.insert_key(b, key);
                if spec.kind == GroupKind::Mamba {
                    if !landed {
                        keyed.keys.push(key);
                    }
                    if landed || keyed.record {
                        keyed.fresh.push(StateKeyed {
                            group: g,
                            block: b,
                            boundary: (i + 1) * spec.block_size,
                            key,
                        });
                    }
                }
            }
            table.num_cached = num_full;
        }
    }

    /// Whether block `i` of a group is keyed (vLLM's `reachable_block_mask` without EAGLE): every block
    /// of a dense group; of a sliding-window group those a later request could hit; of a Mamba group the
    /// same as a window needing one block (`MambaManager.reachable_block_mask`).
    fn keeps(&self, spec: &GroupSpec, num_prompt: u64, junction: u64, i: u64) -> bool {
        if !matches!(spec.kind, GroupKind::SlidingWindow | GroupKind::Mamba) {
            return true;
        }
        let (bs, align) = (spec.block_size, self.alignment);
        if align % bs != 0 {
            return true;
        }
        let need = spec.run_blocks();
        let segment = match self.retention {
            None => Some(align),
            Some(0) => None,
            Some(r) => Some(r),
        };
        if let Some(seg) = segment {
            let per = seg / bs;
            if need >= per {
                return true;
            }
            if i % per >= per - need {
                return true;
            }
        }
        if self.retention.is_some() {
            let ends = [num_prompt.saturating_sub(1), junction];
            for (k, &boundary) in ends.iter().enumerate() {
                if k == 1 && junction == 0 {
                    continue;
                }
                let stop = boundary / align * align / bs;
                if i < stop && i + need >= stop {
                    return true;
                }
            }
        }
        false
    }

    /// Frees the request's tables group by group, each in reverse without its leading null blocks;
    /// pushes (block, group) into `freed` in that order. The request's tables are emptied.
    pub fn free(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        freed: &mut Vec<(BlockId, usize)>,
    ) {
        for (g, table) in req.tables.iter_mut().enumerate() {
            let start = freed.len();
            take_table(table, g, freed);
            pool.release(freed[start..].iter().map(|&(b, _)| b));
        }
        req.tables.clear();
    }

    /// `free` as vLLM's deferred free of a request's blocks (`defer_block_free`: the coordinator's
    /// `pop_blocks_for_free`, every group's table in group order without its leading null blocks, then one
    /// `free_blocks` of them reversed in `_drain_deferred_frees`): one release of all groups, the last
    /// group's last block first, so the blocks without a key go to the queue's head and the keyed ones to
    /// its tail in that one order (`free` releases group by group, the first group first).
    pub fn free_at_once(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        freed: &mut Vec<(BlockId, usize)>,
    ) {
        let start = freed.len();
        for (g, table) in req.tables.iter_mut().enumerate().rev() {
            take_table(table, g, freed);
        }
        pool.release(freed[start..].iter().map(|&(b, _)| b));
        req.tables.clear();
    }

    /// The most blocks of all groups a request of `last` tokens with a slot holds (full attention every
    /// token's, a window at most its cap, local chunks too (one block more where a chunk is no multiple of
    /// the block), a state its one block): rejection at arrival.
    pub fn peak_blocks(&self, last: u64) -> u64 {
        self.specs
            .iter()
            .map(|s| {
                let n = cdiv(last, s.block_size);
                // (local chunks that are no multiple of the block one block more than vLLM's cap: a chunk
                // starting inside a block takes it, and a request needing it would preempt itself and be
                // readmitted forever)
                let extra =
                    u64::from(s.kind == GroupKind::ChunkedLocal && s.window % s.block_size != 0);
                s.cap.map_or(n, |c| n.min(c + extra))
            })
            .sum()
    }
}

/// Group `g`'s table taken for a free: its blocks pushed into `freed` as (block, group), last first,
/// without its null blocks, and the table emptied (`Groups::free` releases each group's at once,
/// `Groups::free_at_once` all groups' together).
fn take_table(table: &mut GroupTable, g: usize, freed: &mut Vec<(BlockId, usize)>) {
    freed.extend(
        table
            .blocks
            .iter()
            .rev()
            .filter(|&&b| b != BlockId::NULL)
            .map(|&b| (b, g)),
    );
    table.blocks.clear();
    table.num_cached = 0;
}
