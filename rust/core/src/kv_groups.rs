//! Several KV-cache groups over one pool: vLLM 0.33.0's hybrid KV-cache manager (DESIGN.md §Hybrid
//! attention). A request holds one table per group; a table's position `i` holds the group's block of
//! tokens `[i·B, (i+1)·B)`, the null block where a window's tokens were skipped. `python/kvsim/reference/
//! kv_groups.py` is the executable spec: this module follows it rule for rule.
//!
//! Per allocation of a request (vLLM's `allocate_slots`), the engine calls `need` (the blocks to pop),
//! `remove_skipped` (blocks that left a window, freed whether or not the rest fits), then `admit` (a new
//! request: hits, new blocks, keys) or `grow` (a running one); `free` at the end.

use crate::hash::{BlockKeys, mix64};
use crate::{BlockId, BlockKey, BlockPool, Result, Segment, invalid_arg};

/// What a group's layers keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupKind {
    /// Every token (full attention, MLA).
    Full,
    /// The last `window` tokens.
    SlidingWindow,
    /// The tokens of the current chunk of `window` tokens (Llama 4's local layers).
    ChunkedLocal,
    /// A fixed-size state per request (Mamba, linear attention); never a prefix hit here.
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
    /// The full-prompt check's per-request cap in blocks (vLLM's `max_admission_blocks_per_request`).
    pub cap: Option<u64>,
}

impl GroupSpec {
    /// Tokens the next token no longer attends to after `computed` (vLLM's `get_num_skipped_tokens`).
    #[inline]
    pub fn skipped(&self, computed: u64) -> u64 {
        match self.kind {
            GroupKind::SlidingWindow => (computed + 1).saturating_sub(self.window),
            GroupKind::ChunkedLocal => computed / self.window * self.window,
            GroupKind::Full | GroupKind::Mamba => 0,
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
    /// The groups in vLLM's order, the scheduler's block size (their least common multiple) and the
    /// retention interval.
    pub fn new(
        specs: Vec<GroupSpec>,
        scheduler_block_size: u64,
        retention: Option<u64>,
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
        Ok(Groups {
            specs,
            scheduler_block_size,
            alignment,
            retention,
            lookup_order,
            block_sizes,
            size_of,
        })
    }

    pub fn specs(&self) -> &[GroupSpec] {
        &self.specs
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// The request's first `n` full-block keys at the block size of group `g`.
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

    /// The block cached under `key` in each of `gids`, pushed into `out`; false (and `out` as it was) if
    /// any misses (vLLM's `get_cached_block`).
    fn cached(pool: &BlockPool, key: BlockKey, gids: &[usize], out: &mut Vec<BlockId>) -> bool {
        let start = out.len();
        for &g in gids {
            let Some(b) = pool.lookup(group_key(key, g)) else {
                out.truncate(start);
                return false;
            };
            out.push(b);
        }
        true
    }

    /// The longest prefix of at most `max_tokens` tokens every group can serve (vLLM's
    /// `find_longest_cache_hit`, DESIGN.md §Hybrid attention), into `out`; no side effects on the pool.
    pub fn lookup(
        &self,
        pool: &BlockPool,
        segs: &[Segment],
        cache: &mut KeyCache,
        max_tokens: u64,
        out: &mut Lookup,
    ) {
        let n = self.specs.len();
        out.hits.resize_with(n, Vec::new);
        for h in &mut out.hits {
            h.clear();
        }
        out.tokens = 0;
        out.junction = 0;
        if !pool.enable_caching() {
            return;
        }
        let mut found = vec![false; n];
        let mut lengths = vec![0u64; n];
        let mut hit_length = max_tokens;
        let mut longest = 0u64;
        let simple = self.lookup_order.len() == 2
            && self.specs[self.lookup_order[0][0]].kind == GroupKind::Full;
        let mut scratch: Vec<BlockId> = Vec::new();
        loop {
            let mut curr = hit_length;
            for gids in &self.lookup_order {
                let spec = self.specs[gids[0]];
                if spec.kind == GroupKind::Full && found[gids[0]] {
                    curr = curr.min(lengths[gids[0]]);
                    continue;
                }
                curr = self.find(pool, segs, cache, gids, curr, out, &mut scratch);
                for &g in gids {
                    found[g] = true;
                    lengths[g] = curr;
                }
                longest = longest.max(curr);
            }
            if n == 1 || curr >= hit_length {
                hit_length = hit_length.min(curr);
                break;
            }
            hit_length = curr;
            if simple {
                break;
            }
        }
        for gids in &self.lookup_order {
            let spec = self.specs[gids[0]];
            if spec.kind == GroupKind::Full {
                let keep = cdiv(hit_length, spec.block_size) as usize;
                for &g in gids {
                    out.hits[g].truncate(keep);
                }
            }
        }
        let uncached = if n > 1 { longest - hit_length } else { 0 };
        out.tokens = hit_length;
        out.junction = if uncached > 0 {
            hit_length + uncached
        } else {
            0
        };
    }

    /// One spec's longest hit within `max_len` tokens into `out.hits[g]` for `g` in `gids`; the tokens.
    #[allow(clippy::too_many_arguments)]
    fn find(
        &self,
        pool: &BlockPool,
        segs: &[Segment],
        cache: &mut KeyCache,
        gids: &[usize],
        max_len: u64,
        out: &mut Lookup,
        scratch: &mut Vec<BlockId>,
    ) -> u64 {
        let spec = self.specs[gids[0]];
        let (bs, align) = (spec.block_size, self.alignment);
        let n = max_len / bs;
        let keys = self.keys(cache, segs, gids[0], n);
        for &g in gids {
            out.hits[g].clear();
        }
        match spec.kind {
            GroupKind::Full => {
                for &key in keys {
                    scratch.clear();
                    if !Self::cached(pool, key, gids, scratch) {
                        break;
                    }
                    for (&g, &b) in gids.iter().zip(scratch.iter()) {
                        out.hits[g].push(b);
                    }
                }
                let mut hit = out.hits[gids[0]].len() as u64 * bs;
                hit -= hit % align;
                let keep = cdiv(hit, bs) as usize;
                for &g in gids {
                    out.hits[g].truncate(keep);
                }
                hit
            }
            GroupKind::SlidingWindow => {
                let need = cdiv(spec.window - 1, bs);
                for &g in gids {
                    out.hits[g].resize(n as usize, BlockId::NULL);
                }
                let mut run = 0u64;
                let mut matched = false;
                for i in (0..n).rev() {
                    scratch.clear();
                    if !Self::cached(pool, keys[i as usize], gids, scratch) {
                        run = 0;
                        continue;
                    }
                    if run == 0 && bs != align && (i + 1) * bs % align != 0 {
                        continue;
                    }
                    for (&g, &b) in gids.iter().zip(scratch.iter()) {
                        out.hits[g][i as usize] = b;
                    }
                    run += 1;
                    if run >= need {
                        for &g in gids {
                            out.hits[g].truncate((i + run) as usize);
                        }
                        matched = true;
                        break;
                    }
                }
                if !matched {
                    let mut keep = run;
                    while bs != align && keep * bs % align != 0 {
                        keep -= 1;
                    }
                    for &g in gids {
                        out.hits[g].truncate(keep as usize);
                    }
                }
                out.hits[gids[0]].len() as u64 * bs
            }
            GroupKind::ChunkedLocal => {
                let start = if max_len > 0 {
                    max_len / spec.window * spec.window
                } else {
                    0
                };
                let first = start / bs;
                for &g in gids {
                    out.hits[g].resize(first as usize, BlockId::NULL);
                }
                for &key in &keys[first as usize..] {
                    scratch.clear();
                    if !Self::cached(pool, key, gids, scratch) {
                        break;
                    }
                    for (&g, &b) in gids.iter().zip(scratch.iter()) {
                        out.hits[g].push(b);
                    }
                }
                out.hits[gids[0]].len() as u64 * bs
            }
            GroupKind::Mamba => 0, // refused with prefix caching (SimConfig): nothing cached
        }
    }

    /// Blocks the pool must pop to give a request slots for `num_tokens` tokens (vLLM's
    /// `get_num_blocks_to_allocate`): a running request's (`req` Some) new blocks, or a new one's beyond
    /// its skipped and hit blocks plus its hits that are free; `capped`: the full-prompt check's caps.
    pub fn need(
        &self,
        pool: &BlockPool,
        req: Option<&HybridTables>,
        num_tokens: u64,
        hit: Option<&Lookup>,
        computed: u64,
        capped: bool,
    ) -> u64 {
        let mut total = 0;
        for (g, spec) in self.specs.iter().enumerate() {
            let mut required = cdiv(num_tokens, spec.block_size);
            if capped && let Some(cap) = spec.cap {
                required = required.min(cap);
            }
            if let Some(r) = req {
                total += required.saturating_sub(r.tables[g].blocks.len() as u64);
                continue;
            }
            let hits: &[BlockId] = hit.map_or(&[], |h| &h.hits[g]);
            let skipped = spec.skipped_blocks(computed);
            total += required.saturating_sub(skipped.max(hits.len() as u64));
            let outside = &hits[(skipped as usize).min(hits.len())..];
            total += outside
                .iter()
                .filter(|&&b| b != BlockId::NULL && pool.ref_cnt_of(b) == 0)
                .count() as u64;
        }
        total
    }

    /// Frees the request's blocks that left a window after `computed` tokens, each group's highest first
    /// down to its first null, replaced by the null block; pushes them as (block, group) into `freed`.
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
            for i in (0..skipped).rev() {
                let b = table.blocks[i];
                if b == BlockId::NULL {
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
    /// tokens. The caller checked `need`; `req` is reset (its vectors' buffers kept).
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
        new: &mut Vec<(BlockId, usize)>,
    ) {
        req.tables
            .resize_with(self.specs.len(), GroupTable::default);
        req.num_prompt = num_prompt;
        req.junction = hit.junction;
        for (g, (spec, table)) in self.specs.iter().zip(req.tables.iter_mut()).enumerate() {
            let hits = &hit.hits[g];
            let skipped = (spec.skipped_blocks(hit.tokens) as usize).min(hits.len());
            let taken = &hits[skipped..];
            pool.acquire(taken.iter().copied().filter(|&b| b != BlockId::NULL));
            table.blocks.clear();
            table
                .blocks
                .resize(spec.skipped_blocks(hit.tokens) as usize, BlockId::NULL);
            table.blocks.extend_from_slice(taken);
            table.num_cached = table.blocks.len() as u64;
        }
        self.allocate_and_cache(pool, req, cache, segs, num_tokens, num_cache, new);
    }

    /// A running request's blocks for `num_tokens` tokens, keys up to `num_cache` tokens. The caller
    /// checked `need`.
    #[allow(clippy::too_many_arguments)]
    pub fn grow(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        cache: &mut KeyCache,
        segs: &[Segment],
        num_tokens: u64,
        num_cache: u64,
        new: &mut Vec<(BlockId, usize)>,
    ) {
        self.allocate_and_cache(pool, req, cache, segs, num_tokens, num_cache, new);
    }

    #[allow(clippy::too_many_arguments)]
    fn allocate_and_cache(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        cache: &mut KeyCache,
        segs: &[Segment],
        num_tokens: u64,
        num_cache: u64,
        new: &mut Vec<(BlockId, usize)>,
    ) {
        for (g, (spec, table)) in self.specs.iter().zip(req.tables.iter_mut()).enumerate() {
            let n = cdiv(num_tokens, spec.block_size).saturating_sub(table.blocks.len() as u64);
            for _ in 0..n {
                let b = pool.allocate_one().expect("the caller checked the room");
                table.blocks.push(b);
                new.push((b, g));
            }
        }
        self.cache(pool, req, cache, segs, num_cache);
    }

    /// Keys each group's full blocks up to `num_tokens` tokens (vLLM's `cache_blocks`).
    fn cache(
        &self,
        pool: &mut BlockPool,
        req: &mut HybridTables,
        cache: &mut KeyCache,
        segs: &[Segment],
        num_tokens: u64,
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
            if spec.kind == GroupKind::Mamba {
                continue;
            }
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
                pool.insert_key(b, group_key(keys[i as usize], g));
            }
            table.num_cached = num_full;
        }
    }

    /// Whether block `i` of a group is keyed (vLLM's `reachable_block_mask` without EAGLE): every block
    /// of a dense group; of a sliding-window group those a later request could hit.
    fn keeps(&self, spec: &GroupSpec, num_prompt: u64, junction: u64, i: u64) -> bool {
        if spec.kind != GroupKind::SlidingWindow {
            return true;
        }
        let (bs, align) = (spec.block_size, self.alignment);
        if align % bs != 0 {
            return true;
        }
        let need = cdiv(spec.window - 1, bs);
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
            freed.extend(
                table
                    .blocks
                    .iter()
                    .rev()
                    .filter(|&&b| b != BlockId::NULL)
                    .map(|&b| (b, g)),
            );
            pool.release(freed[start..].iter().map(|&(b, _)| b));
            table.blocks.clear();
            table.num_cached = 0;
        }
        req.tables.clear();
    }

    /// The most blocks of all groups a request of `last` tokens with a slot holds (full attention every
    /// token's, a window or chunk at most its cap, a state its one block): rejection at arrival.
    pub fn peak_blocks(&self, last: u64) -> u64 {
        self.specs
            .iter()
            .map(|s| {
                let n = cdiv(last, s.block_size);
                s.cap.map_or(n, |c| n.min(c))
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FreeOrder;

    fn sw_full(window: u64) -> Groups {
        Groups::new(
            vec![
                GroupSpec {
                    kind: GroupKind::SlidingWindow,
                    window,
                    block_size: 4,
                    cap: None,
                },
                GroupSpec {
                    kind: GroupKind::Full,
                    window: 0,
                    block_size: 4,
                    cap: None,
                },
            ],
            4,
            Some(0),
        )
        .unwrap()
    }

    fn segs(id: u64, n: u64) -> Vec<Segment> {
        vec![Segment::new(id, n)]
    }

    /// vLLM 0.33.0's own decisions for this scenario (recorded by driving its KVCacheManager on CPU):
    /// a 14-token prompt on a sliding window of 5 and a full group, block 4, 20 blocks; decoding frees
    /// the window's blocks at the next allocation, unkeyed ones to the head of the free queue.
    #[test]
    fn window_blocks_leave_at_the_next_allocation() {
        let groups = sw_full(5);
        let mut pool = BlockPool::new(20, true, FreeOrder::LifoUnhashed).unwrap();
        let mut cache = KeyCache::default();
        let mut req = HybridTables::default();
        let mut hit = Lookup::default();
        let s = segs(7, 14);
        groups.lookup(&pool, &s, &mut cache, 13, &mut hit);
        assert_eq!(hit.tokens, 0);
        assert_eq!(groups.need(&pool, None, 14, Some(&hit), 0, false), 8);
        let mut new = Vec::new();
        groups.admit(
            &mut pool, &mut req, &mut cache, &s, &hit, 14, 14, 14, &mut new,
        );
        let ids = |t: &GroupTable| t.blocks.iter().map(|b| b.0).collect::<Vec<_>>();
        assert_eq!(ids(&req.tables[0]), vec![1, 2, 3, 4]);
        assert_eq!(ids(&req.tables[1]), vec![5, 6, 7, 8]);
        let mut freed = Vec::new();
        groups.remove_skipped(&mut pool, &mut req, 14, &mut freed);
        assert_eq!(freed, vec![(BlockId(2), 0), (BlockId(1), 0)]);
        assert_eq!(ids(&req.tables[0]), vec![0, 0, 3, 4]);
        // Unkeyed, so to the head: the next two pops reuse them (vLLM: [2], [1]).
        assert_eq!(pool.free_block_ids()[..2], [BlockId(2), BlockId(1)]);
        let s17 = vec![Segment::new(7, 14), Segment::new(1 << 63, 3)];
        freed.clear();
        groups.remove_skipped(&mut pool, &mut req, 16, &mut freed);
        assert_eq!(freed, vec![(BlockId(3), 0)]);
        assert_eq!(groups.need(&pool, Some(&req), 17, None, 16, false), 2);
        new.clear();
        groups.grow(&mut pool, &mut req, &mut cache, &s17, 17, 17, &mut new);
        assert_eq!(new, vec![(BlockId(2), 0), (BlockId(1), 1)]);
        freed.clear();
        groups.free(&mut pool, &mut req, &mut freed);
        assert_eq!(
            freed.iter().map(|&(b, _)| b.0).collect::<Vec<_>>(),
            vec![2, 4, 1, 8, 7, 6, 5]
        );
        pool.check_invariants().unwrap();
    }

    #[test]
    fn a_second_request_hits_the_window_at_the_prompts_end() {
        let groups = sw_full(5);
        let mut pool = BlockPool::new(20, true, FreeOrder::LifoUnhashed).unwrap();
        let (mut cache, mut req, mut hit, mut new) = (
            KeyCache::default(),
            HybridTables::default(),
            Lookup::default(),
            Vec::new(),
        );
        let s = segs(7, 14);
        groups.lookup(&pool, &s, &mut cache, 13, &mut hit);
        groups.admit(
            &mut pool, &mut req, &mut cache, &s, &hit, 14, 14, 14, &mut new,
        );
        // Only the window's block ending at the replay boundary (12 tokens) is keyed in group 0.
        let s2 = vec![Segment::new(7, 14), Segment::new(9, 2)];
        let mut cache2 = KeyCache::default();
        groups.lookup(&pool, &s2, &mut cache2, 15, &mut hit);
        assert_eq!(hit.tokens, 12);
        assert_eq!(hit.hits[0], vec![BlockId(0), BlockId(0), BlockId(3)]);
        assert_eq!(hit.hits[1], vec![BlockId(5), BlockId(6), BlockId(7)]);
        assert_eq!(hit.junction, 0);
    }
}
