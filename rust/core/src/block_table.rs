//! One request's blocks and the steps of vLLM's `get_computed_blocks` + `allocate_slots` on it.
//!
//! Shared by the Python-facing [`crate::KVCacheManager`] and the engine, so that both allocate, register
//! and free through the same code. The token layout is pictured in DESIGN.md (§"A request's blocks").

use crate::hash::BlockKeys;
use crate::{BlockId, BlockKey, BlockPool, Segment};

/// `x / block_size`, a shift when the block size is a power of two (the usual case: no division on the
/// hot path; the test is a couple of instructions and always predicted).
#[inline]
pub fn div_bs(x: u64, block_size: u64) -> u64 {
    if block_size.is_power_of_two() {
        x >> block_size.trailing_zeros()
    } else {
        x / block_size
    }
}

/// `x % block_size`, a mask when the block size is a power of two.
#[inline]
pub fn rem_bs(x: u64, block_size: u64) -> u64 {
    if block_size.is_power_of_two() {
        x & (block_size - 1)
    } else {
        x % block_size
    }
}

/// `ceil(x / block_size)`: the blocks that hold `x` tokens. Never overflows (`x + block_size - 1`
/// would wrap for counts or block sizes near `u64::MAX`).
#[inline]
pub fn blocks_for(x: u64, block_size: u64) -> u64 {
    div_bs(x, block_size) + u64::from(rem_bs(x, block_size) != 0)
}

/// A request's block table. Invariant: `blocks.len() == ceil(num_computed_tokens / block_size)`, and with
/// caching on, blocks `[0, num_keyed_blocks)` (all full ones) carry keys, the last of them `last_key`.
/// `repr(C)`: the fields a decode step touches come first, in one cache line (the engine's `Seq` relies on
/// it).
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct BlockTable {
    pub(crate) blocks: Vec<BlockId>,
    pub(crate) num_computed_tokens: u64,
    pub(crate) num_keyed_blocks: u64,
    /// Blocks `[num_real_keys, num_keyed_blocks)` are phantom-keyed (engine only, see
    /// `BlockPool::insert_phantom`); `last_key` is the key of block `num_real_keys - 1`.
    pub(crate) num_real_keys: u64,
    pub(crate) last_key: Option<BlockKey>,
}

impl BlockTable {
    #[inline]
    pub fn blocks(&self) -> &[BlockId] {
        &self.blocks
    }

    #[inline]
    pub fn num_computed_tokens(&self) -> u64 {
        self.num_computed_tokens
    }

    #[inline]
    pub fn num_keyed_blocks(&self) -> u64 {
        self.num_keyed_blocks
    }

    #[inline]
    pub fn last_key(&self) -> Option<BlockKey> {
        self.last_key
    }

    /// Cached blocks of the longest prefix, in whole blocks, covering at most `total - 1` tokens, pushed
    /// into `hits`; returns the key of the last hit. Walks keys from the left, stops at the first miss.
    pub fn find_hits(
        pool: &BlockPool,
        block_size: u64,
        segments: &[Segment],
        total: u64,
        hits: &mut Vec<BlockId>,
    ) -> Option<BlockKey> {
        let mut last = None;
        if !pool.enable_caching() || total == 0 {
            return last;
        }
        for key in BlockKeys::new(segments, block_size, 0, None, (total - 1) / block_size) {
            let Some(b) = pool.lookup(key) else { break };
            hits.push(b);
            last = Some(key);
        }
        last
    }

    /// `find_hits` with the request's block keys already computed (the lookup range, in order).
    pub fn find_hits_cached(
        pool: &BlockPool,
        keys: &[BlockKey],
        hits: &mut Vec<BlockId>,
    ) -> Option<BlockKey> {
        let mut last = None;
        if !pool.enable_caching() {
            return last;
        }
        for &key in keys {
            let Some(b) = pool.lookup(key) else { break };
            hits.push(b);
            last = Some(key);
        }
        last
    }

    /// Keys of the blocks a lookup may hit: the full blocks among the first `total - 1` tokens, at most
    /// `max_blocks` of them (a caller that knows no later block can be cached stops early).
    pub fn lookup_keys(
        block_size: u64,
        segments: &[Segment],
        total: u64,
        max_blocks: u64,
        out: &mut Vec<BlockKey>,
    ) {
        out.clear();
        let count = div_bs(total.saturating_sub(1), block_size).min(max_blocks);
        out.extend(BlockKeys::new(segments, block_size, 0, None, count));
    }

    /// How many of `hits` are free (evictable): taking them uses free blocks.
    pub fn num_evictable(pool: &BlockPool, hits: &[BlockId]) -> u64 {
        hits.iter().filter(|&&b| pool.ref_cnt_of(b) == 0).count() as u64
    }

    /// A new table holding the cached prefix `hits` plus blocks for `num_new_tokens` more tokens, popped
    /// into `new`. The caller has checked that `new_blocks + evictable hits` fit in the free blocks.
    /// The table's blocks go into `buffer` (cleared; a recycled one keeps its allocation), with room
    /// reserved for `capacity` blocks (what the table will grow to; 0: just what it holds).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        pool: &mut BlockPool,
        block_size: u64,
        hits: &[BlockId],
        last_key: Option<BlockKey>,
        num_new_tokens: u64,
        new: &mut Vec<BlockId>,
        capacity: usize,
        buffer: Vec<BlockId>,
    ) -> Self {
        let computed = hits.len() as u64 * block_size + num_new_tokens;
        let num_new_blocks = blocks_for(computed, block_size) - hits.len() as u64;
        pool.acquire(hits.iter().copied());
        let first = new.len();
        let ok = pool.allocate_into(num_new_blocks, new);
        debug_assert!(ok, "capacity was checked by the caller");
        let mut blocks = buffer;
        blocks.clear();
        blocks.reserve(capacity.max(hits.len() + (new.len() - first)));
        blocks.extend_from_slice(hits);
        blocks.extend_from_slice(&new[first..]);
        BlockTable {
            blocks,
            num_computed_tokens: computed,
            num_keyed_blocks: hits.len() as u64,
            last_key,
            num_real_keys: hits.len() as u64,
        }
    }

    /// Blocks `grow(num_new_tokens)` would pop: new blocks, plus one copy when the last block is partial
    /// and shared (copy-on-write after a fork).
    pub fn blocks_needed(
        &self,
        pool: &BlockPool,
        block_size: u64,
        num_new_tokens: u64,
    ) -> (u64, bool) {
        let c = self.num_computed_tokens;
        let copy = rem_bs(c, block_size) != 0
            && self.blocks.last().is_some_and(|&b| pool.ref_cnt_of(b) > 1);
        let new = blocks_for(c + num_new_tokens, block_size) - self.blocks.len() as u64;
        (new, copy)
    }

    /// Room for `num_new_tokens` more tokens: pops the copy (if any) then the new blocks into `new`.
    /// Returns `None`, changing nothing, when they do not fit; else whether a copy was made.
    pub fn grow(
        &mut self,
        pool: &mut BlockPool,
        block_size: u64,
        num_new_tokens: u64,
        new: &mut Vec<BlockId>,
    ) -> Option<bool> {
        let (num_new_blocks, copy) = self.blocks_needed(pool, block_size, num_new_tokens);
        if !copy && num_new_blocks <= 1 {
            // The decode step's case: at most one new block, nothing shared to copy.
            if num_new_blocks == 1 {
                let b = pool.allocate_one()?;
                self.blocks.push(b);
                new.push(b);
            }
            self.num_computed_tokens += num_new_tokens;
            return Some(false);
        }
        let first = new.len();
        if !pool.allocate_into(num_new_blocks.saturating_add(u64::from(copy)), new) {
            return None;
        }
        let mut fresh = &new[first..];
        if copy {
            let last = self.blocks.last_mut().expect("a partial block exists");
            pool.release([*last]);
            *last = fresh[0];
            fresh = &fresh[1..];
        }
        self.blocks.extend_from_slice(fresh);
        self.num_computed_tokens += num_new_tokens;
        Some(copy)
    }

    /// Registers the key of every block that became full since the last call (caching on only).
    pub fn register_full_blocks(
        &mut self,
        pool: &mut BlockPool,
        block_size: u64,
        segments: &[Segment],
    ) {
        self.register_full_blocks_cached(pool, block_size, segments, &[], None);
    }

    /// `register_full_blocks`, taking block `i`'s key from `cached[i]` where given (keys computed for a
    /// lookup just before) and hashing only the rest. With `phantom_from = Some(p)`, blocks reaching past
    /// token `p` (they hold generated tokens) are phantom-keyed instead (engine only).
    #[inline]
    pub fn register_full_blocks_cached(
        &mut self,
        pool: &mut BlockPool,
        block_size: u64,
        segments: &[Segment],
        cached: &[BlockKey],
        phantom_from: Option<u64>,
    ) {
        if !pool.enable_caching() {
            return;
        }
        let num_full = div_bs(self.num_computed_tokens, block_size);
        if num_full <= self.num_keyed_blocks {
            return; // nothing filled since the last call
        }
        if self.num_keyed_blocks > self.num_real_keys
            || phantom_from.is_some_and(|p| self.num_keyed_blocks >= div_bs(p, block_size))
        {
            // Past the real keys: only phantom keys from here (the decode step's case).
            for j in self.num_keyed_blocks..num_full {
                pool.insert_phantom(self.blocks[j as usize]);
            }
            self.num_keyed_blocks = num_full;
            return;
        }
        self.register_keys(pool, block_size, segments, cached, phantom_from, num_full);
    }

    #[inline(never)]
    fn register_keys(
        &mut self,
        pool: &mut BlockPool,
        block_size: u64,
        segments: &[Segment],
        cached: &[BlockKey],
        phantom_from: Option<u64>,
        num_full: u64,
    ) {
        let real_end = phantom_from.map_or(num_full, |p| num_full.min(div_bs(p, block_size)));
        let mut i = self.num_keyed_blocks;
        if i == self.num_real_keys {
            while i < real_end && (i as usize) < cached.len() {
                let key = cached[i as usize];
                pool.insert_key(self.blocks[i as usize], key);
                self.last_key = Some(key);
                i += 1;
            }
            if i < real_end {
                let keys = BlockKeys::new(segments, block_size, i, self.last_key, real_end - i);
                for (j, key) in (i..).zip(keys) {
                    pool.insert_key(self.blocks[j as usize], key);
                    self.last_key = Some(key);
                }
                i = real_end;
            }
            self.num_real_keys = i;
        }
        for j in i..num_full {
            pool.insert_phantom(self.blocks[j as usize]);
        }
        self.num_keyed_blocks = num_full.max(self.num_keyed_blocks);
    }

    /// Gives every phantom-keyed block its real key (before the request frees them and may look its own
    /// content up again).
    pub fn materialize(&mut self, pool: &mut BlockPool, block_size: u64, segments: &[Segment]) {
        let (start, end) = (self.num_real_keys, self.num_keyed_blocks);
        if start == end {
            return;
        }
        for (j, key) in (start..).zip(BlockKeys::new(
            segments,
            block_size,
            start,
            self.last_key,
            end - start,
        )) {
            pool.materialize(self.blocks[j as usize], key);
            self.last_key = Some(key);
        }
        self.num_real_keys = end;
    }

    /// Releases every block in reverse table order (the deepest is evicted first) and empties the table.
    pub fn release(&mut self, pool: &mut BlockPool) {
        pool.release(self.blocks.iter().rev().copied());
        self.blocks.clear();
        self.num_computed_tokens = 0;
        self.num_keyed_blocks = 0;
        self.last_key = None;
        self.num_real_keys = 0;
    }

    /// A second holder of every block (a new sample after the prompt): each `ref_cnt` + 1.
    #[must_use]
    pub fn fork(&self, pool: &mut BlockPool) -> Self {
        pool.acquire(self.blocks.iter().copied());
        self.clone()
    }
}
