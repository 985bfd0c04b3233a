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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlockPool, FreeOrder};

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
