//! Several KV-cache groups over one pool: vLLM 0.33.0's hybrid KV-cache manager (DESIGN.md §Hybrid
//! attention). A request holds one table per group; a table's position `i` holds the group's block of
//! tokens `[i·B, (i+1)·B)`, the null block where a window's tokens were skipped. `python/kvsim/reference/
//! kv_groups.py` is the executable spec: this module follows it rule for rule.
//!
//! Per allocation of a request (vLLM's `allocate_slots`), the engine calls `need` (the blocks to pop),
//! `remove_skipped` (blocks that left a window, freed whether or not the rest fits), then `admit` (a new
//! request: hits, new blocks, keys) or `grow` (a running one); `free` at the end.
//!
//! The groups' layout, derived once from their specs (`Groups::new`: the lookup order, the block sizes,
//! the hits' alignment), a request's state and its key chains are here; `lookup` holds the prefix lookup
//! (vLLM's `find_longest_cache_hit`), `tables` the arithmetic of a request's tables (`need`,
//! `remove_skipped`, `admit`, `grow`, the keys of full blocks, `free`, `peak_blocks`).

mod lookup;
mod tables;

#[cfg(test)]
use tables::DEFERRED;

use crate::hash::{BlockKeys, mix64};
use crate::{BlockId, BlockKey, Result, Segment, invalid_arg};

/// What a group's layers keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupKind {
    /// Every token (full attention, MLA).
    Full,
    /// The last `window` tokens.
    SlidingWindow,
    /// The tokens of the current chunk of `window` tokens (Llama 4's local layers).
    ChunkedLocal,
    /// A fixed-size state per request (Mamba, linear attention): one block of `max_model_len` tokens
    /// without prefix caching; with it, vLLM's `mamba_cache_mode="align"` (block-aligned state
    /// checkpoints, DESIGN.md §Hybrid attention, "Mamba groups").
    Mamba,
}

impl GroupKind {
    /// The kind of code `i` (`kvsim.reference.kv_groups.KINDS`' order).
    pub fn from_code(i: i64) -> Result<Self> {
        Ok(match i {
            0 => GroupKind::Full,
            1 => GroupKind::SlidingWindow,
            2 => GroupKind::ChunkedLocal,
            3 => GroupKind::Mamba,
            _ => invalid_arg!(
                "group kind {i} is not one of 0 (full), 1 (sliding window), 2 (chunked local), 3 (mamba)"
            ),
        })
    }
}

/// One group as the engine sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupSpec {
    pub kind: GroupKind,
    /// The sliding window or the chunk, in tokens (0 otherwise).
    pub window: u64,
    pub block_size: u64,
    /// The full-prompt check's per-request cap in blocks (vLLM's `max_admission_blocks_per_request`); a
    /// Mamba group's is read only at arrival (`peak_blocks`: 2 + `checkpoint_blocks` with prefix caching).
    pub cap: Option<u64>,
    /// A Mamba group's prefill-checkpoint blocks (vLLM's `MambaSpec.num_prefill_checkpoint_blocks`: 0 or
    /// 1); 0 for every other kind.
    pub checkpoint_blocks: u64,
}

impl GroupSpec {
    /// Tokens the next token no longer attends to after `computed` (vLLM's `get_num_skipped_tokens`; a
    /// Mamba group's `MambaManager.get_num_skipped_tokens`: the state after the last computed token is
    /// all a step reads, and without prefix caching its one block of `max_model_len` is never skipped).
    #[inline]
    pub fn skipped(&self, computed: u64) -> u64 {
        match self.kind {
            GroupKind::SlidingWindow => (computed + 1).saturating_sub(self.window),
            GroupKind::ChunkedLocal => computed / self.window * self.window,
            GroupKind::Mamba => computed.saturating_sub(1),
            GroupKind::Full => 0,
        }
    }

    /// Consecutive blocks a sparse group's hit needs (and its keys keep before a boundary): a window's
    /// `ceil((W - 1) / B)`, a state's one (vLLM's `MambaManager.find_longest_cache_hit`).
    #[inline]
    fn run_blocks(&self) -> u64 {
        if self.kind == GroupKind::Mamba {
            1
        } else {
            cdiv(self.window - 1, self.block_size)
        }
    }

    #[inline]
    fn skipped_blocks(&self, computed: u64) -> u64 {
        self.skipped(computed) / self.block_size
    }

    fn same_spec(&self, other: &GroupSpec) -> bool {
        self.kind == other.kind
            && self.window == other.window
            && self.block_size == other.block_size
    }
}

/// A content key tagged with its group (vLLM's `BlockHashWithGroupId`): one content is cached once per
/// group (`kvsim.reference.kv_groups.group_key`).
#[inline]
pub fn group_key(key: BlockKey, group: usize) -> BlockKey {
    let g = group as u64 + 1;
    let lo = mix64((key.0 as u64) ^ g);
    let hi = mix64(((key.0 >> 64) as u64).wrapping_add(g));
    BlockKey(u128::from(hi) << 64 | u128::from(lo))
}

/// The groups of a pool and the rules that read them.
#[derive(Clone, Debug)]
pub struct Groups {
    specs: Vec<GroupSpec>,
    scheduler_block_size: u64,
    /// Hits are cut to this: one group's own block size, else the scheduler's.
    alignment: u64,
    /// vLLM's `prefix_cache_retention_interval` for sparse groups (None: every block keyed).
    retention: Option<u64>,
    /// Groups of one spec, looked up together, full attention first (vLLM's `attention_groups`).
    lookup_order: Vec<Vec<usize>>,
    /// The distinct block sizes, and which one each group uses (keys are cached per block size).
    block_sizes: Vec<u64>,
    size_of: Vec<usize>,
    /// Mamba states with prefix caching: vLLM's `mamba_cache_mode="align"` (DESIGN.md §Hybrid attention,
    /// "Mamba groups").
    align: bool,
    /// The Mamba groups' block size (one for all of them in align mode; 0 without Mamba groups).
    mamba_block_size: u64,
    /// Align mode and every Mamba group exports a prefill checkpoint (vLLM's
    /// `Scheduler.mamba_has_prefill_checkpoint_blocks`).
    checkpoints: bool,
}

/// The keys Mamba groups set in the current step (vLLM's `MambaManager.cached_blocks_this_step`): a state
/// keyed in a step is computed by that step's forward pass, so no request of the same step starts from it.
/// Held by the engine (the groups are read-only configuration) and cleared at each step's start
/// (`clear`, vLLM's `new_step_starts`).
///
/// With a CPU tier it also lists the state blocks a call keys (`fresh`: DESIGN.md §CPU tier, "A Mamba
/// group"; vLLM's `_pending_boundary_state_offloads`), which the engine hands off after each call that
/// keys (`hand_off`, naming the request its own way) until the step's offer takes them (`take_handed`);
/// nothing is listed without one (`record` false).
#[derive(Clone, Debug, Default)]
pub struct StepKeys {
    keys: Vec<BlockKey>,
    record: bool,
    fresh: Vec<StateKeyed>,
    handed: Vec<(usize, StateKeyed)>,
}

/// A state block keyed: its group, block, boundary (the tokens its state follows) and key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateKeyed {
    pub group: usize,
    pub block: BlockId,
    pub boundary: u64,
    pub key: BlockKey,
}

impl StepKeys {
    pub fn clear(&mut self) {
        self.keys.clear();
    }

    #[inline]
    fn contains(&self, key: BlockKey) -> bool {
        self.keys.contains(&key)
    }

    /// No keys yet; `record`: the state blocks keyed are listed (a CPU tier's hand-offs).
    pub fn new(record: bool) -> Self {
        StepKeys {
            record,
            ..StepKeys::default()
        }
    }

    /// The state blocks listed since the last take, taken.
    pub fn take_fresh(&mut self) -> std::vec::Drain<'_, StateKeyed> {
        self.fresh.drain(..)
    }

    /// The state blocks listed since the last take handed off as request `owner`'s (the caller's name).
    pub fn hand_off(&mut self, owner: usize) {
        if self.record {
            self.handed
                .extend(self.fresh.drain(..).map(|st| (owner, st)));
        }
    }

    /// A landed load's state `st`, of request `owner`: its key counts as keyed in this step and it is
    /// handed off (when the waiting pass first reaches the request).
    pub fn adopt(&mut self, owner: usize, st: StateKeyed) {
        self.keys.push(st.key);
        self.handed.push((owner, st));
    }

    /// Request `owner`'s hand-offs not taken yet are dropped (its tables are freed: vLLM's
    /// `pop_blocks_for_free`).
    pub fn drop_owner(&mut self, owner: usize) {
        if !self.handed.is_empty() {
            self.handed.retain(|&(j, _)| j != owner);
        }
    }

    /// The hand-offs since the last take, in order, moved to `out` (emptied first).
    pub fn take_handed(&mut self, out: &mut Vec<(usize, StateKeyed)>) {
        out.clear();
        std::mem::swap(out, &mut self.handed);
    }
}

/// A request's table in one group and how many of its blocks were considered for keys.
#[derive(Clone, Debug, Default)]
pub struct GroupTable {
    pub blocks: Vec<BlockId>,
    pub num_cached: u64,
}

/// A request's keys so far, one chain per block size (extended as its content grows).
#[derive(Clone, Debug, Default)]
pub struct KeyCache {
    chains: Vec<Vec<BlockKey>>,
}

impl KeyCache {
    pub fn clear(&mut self) {
        for c in &mut self.chains {
            c.clear();
        }
    }
}

/// One prompt's key chains shared by the lookups of several pools (a router reading every replica's hit,
/// DESIGN.md §Clusters): a chain depends only on the prompt's segments and its block size, so pools whose
/// groups have the same block sizes read the same chains; a pool of other sizes starts them afresh.
/// `reset` with each new prompt.
#[derive(Clone, Debug, Default)]
pub struct SharedKeys {
    cache: KeyCache,
    sizes: Vec<u64>,
}

impl SharedKeys {
    /// A new prompt: its chains are made again as lookups read them.
    pub fn reset(&mut self) {
        self.cache.clear();
    }

    /// The chains for a pool of `groups`.
    pub fn for_groups(&mut self, groups: &Groups) -> &mut KeyCache {
        if self.sizes != groups.block_sizes {
            self.sizes.clone_from(&groups.block_sizes);
            self.cache.clear();
        }
        &mut self.cache
    }
}

/// A request's state in a hybrid pool.
#[derive(Clone, Debug, Default)]
pub struct HybridTables {
    pub tables: Vec<GroupTable>,
    pub num_prompt: u64,
    pub junction: u64,
}

impl HybridTables {
    /// Blocks held (null entries excluded).
    pub fn held(&self) -> u64 {
        self.tables
            .iter()
            .map(|t| t.blocks.iter().filter(|b| **b != BlockId::NULL).count() as u64)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }
}

/// A prefix lookup's answer: per group the blocks hit (null blocks for skipped positions), the tokens
/// hit, and the junction (end of a prefix a sparse group did not cache, 0 if none).
#[derive(Clone, Debug, Default)]
pub struct Lookup {
    pub hits: Vec<Vec<BlockId>>,
    pub tokens: u64,
    pub junction: u64,
}

#[inline]
fn cdiv(a: u64, b: u64) -> u64 {
    a / b + u64::from(a % b != 0)
}

impl Groups {
    /// The groups in vLLM's order, the scheduler's block size (their least common multiple), the
    /// retention interval and whether the pool caches prefixes (with a Mamba group: align mode).
    pub fn new(
        specs: Vec<GroupSpec>,
        scheduler_block_size: u64,
        retention: Option<u64>,
        enable_caching: bool,
    ) -> Result<Self> {
        if specs.is_empty() {
            invalid_arg!("a hybrid pool needs at least one KV-cache group");
        }
        for (g, s) in specs.iter().enumerate() {
            if s.block_size < 1 {
                invalid_arg!("group {g}: block_size {} must be at least 1", s.block_size);
            }
            if matches!(s.kind, GroupKind::SlidingWindow | GroupKind::ChunkedLocal) && s.window < 1
            {
                invalid_arg!(
                    "group {g}: a window of {} tokens must be at least 1",
                    s.window
                );
            }
            if s.checkpoint_blocks > 1 || (s.checkpoint_blocks > 0 && s.kind != GroupKind::Mamba) {
                invalid_arg!(
                    "group {g}: checkpoint_blocks {} must be 0, or 1 for a Mamba group",
                    s.checkpoint_blocks
                );
            }
            if scheduler_block_size == 0 || scheduler_block_size % s.block_size != 0 {
                invalid_arg!(
                    "scheduler_block_size {scheduler_block_size} must be a multiple of group {g}'s block_size {}",
                    s.block_size
                );
            }
        }
        let mut lookup_order: Vec<Vec<usize>> = Vec::new();
        for (g, s) in specs.iter().enumerate() {
            match lookup_order
                .iter_mut()
                .find(|ids| specs[ids[0]].same_spec(s))
            {
                Some(ids) => ids.push(g),
                None => lookup_order.push(vec![g]),
            }
        }
        lookup_order.sort_by_key(|ids| specs[ids[0]].kind != GroupKind::Full); // stable
        let mut block_sizes: Vec<u64> = Vec::new();
        let mut size_of = Vec::with_capacity(specs.len());
        for s in &specs {
            let i = block_sizes
                .iter()
                .position(|&b| b == s.block_size)
                .unwrap_or_else(|| {
                    block_sizes.push(s.block_size);
                    block_sizes.len() - 1
                });
            size_of.push(i);
        }
        let alignment = if specs.len() == 1 {
            specs[0].block_size
        } else {
            scheduler_block_size
        };
        let mut mamba = specs.iter().filter(|s| s.kind == GroupKind::Mamba);
        let mamba_block_size = mamba.clone().next().map_or(0, |s| s.block_size);
        let align = enable_caching && mamba_block_size > 0;
        if align && mamba.clone().any(|s| s.block_size != mamba_block_size) {
            invalid_arg!("Mamba groups with prefix caching must share one block size");
        }
        let checkpoints = align && mamba.all(|s| s.checkpoint_blocks > 0);
        Ok(Groups {
            specs,
            scheduler_block_size,
            alignment,
            retention,
            lookup_order,
            block_sizes,
            size_of,
            align,
            mamba_block_size,
            checkpoints,
        })
    }

    /// Mamba states with prefix caching (vLLM's `mamba_cache_mode="align"`): the scheduler cuts prefill
    /// chunks to block boundaries (`split`) and chunked prefill is required.
    pub fn align(&self) -> bool {
        self.align
    }

    /// Whether a group holds Mamba states (with prefix caching or without).
    pub fn has_mamba(&self) -> bool {
        self.mamba_block_size > 0
    }

    /// Where a decode replica's transfer of a prompt of `total` tokens ends (DESIGN.md §Prefill/decode
    /// disaggregation, "A hybrid model"): the scheduler's last full block of it; with a Mamba group the
    /// prompt but its last token, which the decode side computes from the loaded state (vLLM's
    /// `_get_remote_prefill_token_count`; a one-token prompt whole).
    pub fn remote_end(&self, total: u64) -> u64 {
        if self.has_mamba() {
            if total > 1 { total - 1 } else { total }
        } else {
            total / self.scheduler_block_size() * self.scheduler_block_size()
        }
    }

    /// Whether an allocation of `[start, end)` for a request of `num_tokens` tokens (prompt
    /// `num_prompt`) reserves a prefill checkpoint block in every Mamba group (vLLM 0.33.0's
    /// `MambaManager.get_num_blocks_to_allocate` and `_needs_internal_checkpoint`, with
    /// `get_mamba_prefill_checkpoint_position` of the allocation's end and
    /// `is_mamba_prefill_checkpoint_valid`, the hash and checkpoint grids at the block): it reaches the
    /// prefill's end (`max(num_prompt, num_tokens - 1)`; any chunk unless the retention interval is 0:
    /// the coordinator passes 0 for a positive interval and for None, dense retention), starts on a boundary and covers the last boundary before `end` with a
    /// block to spare before it. `end` is a chunk's end, or the whole sequence for the full-prompt gate.
    pub fn needs_checkpoint(&self, start: u64, end: u64, num_tokens: u64, num_prompt: u64) -> bool {
        if !self.checkpoints {
            return false;
        }
        // (vLLM's `KVCacheCoordinator.get_num_blocks_to_allocate`: 0 if `retention_interval != 0`)
        let prefill_end = if self.retention == Some(0) {
            num_prompt.max(num_tokens.saturating_sub(1))
        } else {
            0
        };
        end >= prefill_end && self.checkpoint_valid(start, end, end)
    }

    /// vLLM's `is_mamba_prefill_checkpoint_valid` for a query `[start, end)` and the checkpoint
    /// position of `upto` tokens (the last boundary before `upto`).
    fn checkpoint_valid(&self, start: u64, end: u64, upto: u64) -> bool {
        let bs = self.mamba_block_size;
        let ckpt = upto.saturating_sub(1) / bs * bs;
        start % bs == 0 && start + bs <= ckpt && ckpt < end
    }

    /// The tokens of a chunk of `n` from `start` (a request of `num_tokens` tokens, prompt `num_prompt`,
    /// junction `junction`) after vLLM's `Scheduler._mamba_block_aligned_split` (DESIGN.md §Hybrid
    /// attention, "Mamba groups"): a chunk that does not finish the prefill ends on a block boundary
    /// (unless a block exceeds `max_batched`), the prompt's tail is a step of its own (unless a checkpoint
    /// is reserved) and a chunk stops at the junction. 0: nothing this step. `n` as it is outside align
    /// mode and in decode.
    pub fn split(
        &self,
        start: u64,
        n: u64,
        num_tokens: u64,
        num_prompt: u64,
        junction: u64,
        max_batched: u64,
    ) -> u64 {
        if !self.align {
            return n;
        }
        let bs = self.mamba_block_size;
        let prefill_end = num_prompt.max(num_tokens.saturating_sub(1));
        if start >= prefill_end {
            return n;
        }
        let mut end = start + n;
        // (the scheduler's split places the checkpoint from the prefill's end, whatever the chunk's)
        let use_ckpt = self.checkpoints
            && end >= prefill_end
            && self.checkpoint_valid(start, end, prefill_end);
        if end < prefill_end {
            let aligned = end / bs * bs;
            if aligned > start || bs <= max_batched {
                end = aligned;
            }
        }
        let mut stop_at = |stop: u64| {
            if start < stop && stop < end {
                end = stop;
            }
        };
        if !use_ckpt {
            if start % bs != 0 {
                stop_at((start / bs + 1) * bs);
            }
            stop_at(num_tokens.saturating_sub(1) / bs * bs);
        }
        if junction > start {
            stop_at(start + (junction - start) / bs * bs);
        }
        end.saturating_sub(start)
    }

    /// vLLM's `prefix_cache_retention_interval` (None: every block of a sparse group keyed).
    pub fn retention(&self) -> Option<u64> {
        self.retention
    }

    pub fn specs(&self) -> &[GroupSpec] {
        &self.specs
    }

    /// The scheduler's block size: the groups' block sizes' least common multiple.
    pub fn scheduler_block_size(&self) -> u64 {
        self.scheduler_block_size
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// The request's first `n` full-block keys at the block size of group `g`.
    /// The content keys of the first `n` blocks of group `g`'s block size (`cache` extended as needed).
    pub fn content_keys<'k>(
        &self,
        cache: &'k mut KeyCache,
        segs: &[Segment],
        g: usize,
        n: u64,
    ) -> &'k [BlockKey] {
        self.keys(cache, segs, g, n)
    }

    fn keys<'k>(
        &self,
        cache: &'k mut KeyCache,
        segs: &[Segment],
        g: usize,
        n: u64,
    ) -> &'k [BlockKey] {
        let i = self.size_of[g];
        if cache.chains.len() < self.block_sizes.len() {
            cache.chains.resize_with(self.block_sizes.len(), Vec::new);
        }
        let chain = &mut cache.chains[i];
        let have = chain.len() as u64;
        if have < n {
            let parent = chain.last().copied();
            chain.extend(BlockKeys::new(
                segs,
                self.block_sizes[i],
                have,
                parent,
                n - have,
            ));
        }
        &chain[..n as usize]
    }
}

#[cfg(test)]
mod tests;
