//! The KV-cache manager: per-request block tables over a [`BlockPool`], prefix lookup and
//! copy-on-write forks. The token layout of one request is pictured in DESIGN.md (§"A request's
//! blocks"); `python/kvsim/reference/kv_cache_manager.py` is the executable spec.

use std::collections::HashMap;

use crate::block_table::{BlockTable, blocks_for};
use crate::hash::validate_segments;
use crate::{BlockId, BlockPool, FreeOrder, KvError, Result, Segment, invalid_arg, invalid_op};

/// Block tables for requests, keyed by request id. A request is known from its first successful
/// `allocate` until `free`; every allocation step is [`BlockTable`]'s.
#[derive(Clone, Debug)]
pub struct KVCacheManager {
    pool: BlockPool,
    block_size: u64,
    requests: HashMap<u64, BlockTable>,
    num_cow_copies: u64,
    scratch: Vec<BlockId>,
}

impl KVCacheManager {
    pub fn new(
        num_blocks: u32,
        block_size: u64,
        enable_caching: bool,
        free_order: FreeOrder,
    ) -> Result<Self> {
        if block_size < 1 {
            invalid_arg!("block_size {block_size} must be at least 1");
        }
        Ok(KVCacheManager {
            pool: BlockPool::new(num_blocks, enable_caching, free_order)?,
            block_size,
            requests: HashMap::new(),
            num_cow_copies: 0,
            scratch: Vec::new(),
        })
    }

    // -- queries ---------------------------------------------------------------------------------------
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }
    pub fn block_size(&self) -> u64 {
        self.block_size
    }
    pub fn num_requests(&self) -> usize {
        self.requests.len()
    }
    pub fn num_cow_copies(&self) -> u64 {
        self.num_cow_copies
    }
    pub fn contains(&self, request_id: u64) -> bool {
        self.requests.contains_key(&request_id)
    }

    fn get(&self, request_id: u64) -> Result<&BlockTable> {
        match self.requests.get(&request_id) {
            Some(r) => Ok(r),
            None => invalid_op!("unknown request {request_id}"),
        }
    }

    pub fn block_table(&self, request_id: u64) -> Result<&[BlockId]> {
        Ok(self.get(request_id)?.blocks())
    }

    pub fn num_computed_tokens(&self, request_id: u64) -> Result<u64> {
        Ok(self.get(request_id)?.num_computed_tokens())
    }

    /// Tokens a new request with this content would find cached; no side effects.
    pub fn lookup(&self, segments: &[Segment]) -> Result<u64> {
        let total = validate_segments(segments)?;
        let mut hits = Vec::new();
        BlockTable::find_hits(&self.pool, self.block_size, segments, total, &mut hits);
        Ok(hits.len() as u64 * self.block_size)
    }

    // -- mutations -------------------------------------------------------------------------------------
    /// `computed + num_new_tokens <= total`, without overflowing (all three may be near `u64::MAX`).
    fn check_room(request_id: u64, computed: u64, num_new_tokens: u64, total: u64) -> Result<()> {
        if computed
            .checked_add(num_new_tokens)
            .is_none_or(|end| end > total)
        {
            invalid_arg!(
                "request {request_id}: num_new_tokens {num_new_tokens} goes beyond the {total} tokens \
                 its segments describe ({computed} already computed)"
            );
        }
        Ok(())
    }

    /// Makes room for `num_new_tokens` more tokens; returns the new block ids in order (a copy-on-write
    /// copy first), or `None` with nothing changed when they do not fit. On a request's first allocation
    /// its cached prefix is taken first and `num_new_tokens` counts from the end of that prefix.
    pub fn allocate(
        &mut self,
        request_id: u64,
        segments: &[Segment],
        num_new_tokens: u64,
    ) -> Result<Option<Vec<BlockId>>> {
        let total = validate_segments(segments)?;
        if num_new_tokens < 1 {
            invalid_arg!("num_new_tokens {num_new_tokens} must be at least 1");
        }
        let bs = self.block_size;
        let mut new = Vec::new();
        let table = if let Some(table) = self.requests.get_mut(&request_id) {
            Self::check_room(
                request_id,
                table.num_computed_tokens(),
                num_new_tokens,
                total,
            )?;
            match table.grow(&mut self.pool, bs, num_new_tokens, &mut new) {
                None => return Ok(None),
                Some(copied) => self.num_cow_copies += u64::from(copied),
            }
            table
        } else {
            let mut hits = std::mem::take(&mut self.scratch);
            hits.clear();
            let last_key = BlockTable::find_hits(&self.pool, bs, segments, total, &mut hits);
            let computed = hits.len() as u64 * bs;
            let room = Self::check_room(request_id, computed, num_new_tokens, total);
            // Only with room checked is `computed + num_new_tokens` (<= total) free of overflow.
            let fits = room.is_ok() && {
                let needed = blocks_for(computed + num_new_tokens, bs) - hits.len() as u64;
                needed.saturating_add(BlockTable::num_evictable(&self.pool, &hits))
                    <= u64::from(self.pool.num_free_blocks())
            };
            let table = fits.then(|| {
                BlockTable::start(
                    &mut self.pool,
                    bs,
                    &hits,
                    last_key,
                    num_new_tokens,
                    &mut new,
                    0,
                    Vec::new(),
                )
            });
            self.scratch = hits;
            room?;
            let Some(table) = table else { return Ok(None) };
            self.requests.entry(request_id).or_insert(table)
        };
        table.register_full_blocks(&mut self.pool, bs, segments);
        Ok(Some(new))
    }

    /// Releases a request's blocks in reverse table order and forgets it; unknown ids are a no-op.
    pub fn free(&mut self, request_id: u64) {
        if let Some(mut table) = self.requests.remove(&request_id) {
            table.release(&mut self.pool);
        }
    }

    /// Makes `child_id` share every block of `parent_id` (`ref_cnt` + 1 each), as a new sample does.
    pub fn fork(&mut self, parent_id: u64, child_id: u64) -> Result<()> {
        self.get(parent_id)?;
        if self.requests.contains_key(&child_id) {
            invalid_op!("cannot fork onto request {child_id}: it already exists");
        }
        let child = self.requests[&parent_id].fork(&mut self.pool);
        self.requests.insert(child_id, child);
        Ok(())
    }

    // -- checking --------------------------------------------------------------------------------------
    /// The pool's invariants, plus: each table covers exactly its tokens, full blocks carry keys, and
    /// every block's `ref_cnt` equals the number of tables holding it.
    pub fn check_invariants(&self) -> Result<()> {
        self.pool.check_invariants()?;
        let fail = |m: String| Err(KvError::Internal(m));
        let bs = self.block_size;
        let mut holders = vec![0u32; self.pool.num_blocks() as usize];
        for (rid, req) in &self.requests {
            if req.blocks.len() as u64 != req.num_computed_tokens.div_ceil(bs) {
                return fail(format!(
                    "request {rid} holds {} blocks for {} tokens",
                    req.blocks.len(),
                    req.num_computed_tokens
                ));
            }
            let expected = if self.pool.enable_caching() {
                req.num_computed_tokens / bs
            } else {
                0
            };
            if req.num_keyed_blocks != expected {
                return fail(format!(
                    "request {rid} has {} keyed blocks",
                    req.num_keyed_blocks
                ));
            }
            for (i, b) in req.blocks.iter().enumerate() {
                holders[b.index()] += 1;
                if (i as u64) < req.num_keyed_blocks
                    && self.pool.block_hash(i64::from(b.0))?.is_none()
                {
                    return fail(format!("request {rid}: full block {b} has no key"));
                }
            }
            if req.num_keyed_blocks > 0 {
                let b = req.blocks[req.num_keyed_blocks as usize - 1];
                if self.pool.block_hash(i64::from(b.0))? != req.last_key {
                    return fail(format!(
                        "request {rid}: chain key differs from its last full block's key"
                    ));
                }
            }
        }
        for b in 1..self.pool.num_blocks() {
            let rc = self.pool.ref_cnt_of(BlockId(b));
            if holders[b as usize] != rc {
                return fail(format!(
                    "block {b}: {} holders but ref_cnt {rc}",
                    holders[b as usize]
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(id: u64, len: u64) -> Segment {
        Segment::new(id, len)
    }

    #[test]
    fn a_block_count_past_u32_does_not_fit_and_changes_nothing() {
        for caching in [true, false] {
            let mut m = KVCacheManager::new(5, 1, caching, FreeOrder::Classic).unwrap();
            assert_eq!(
                m.allocate(3, &[seg(1, 1)], 1).unwrap().unwrap(),
                [BlockId(1)]
            );
            // 2^32 more blocks: once truncated to u32 (0 blocks), a panic with caching, `[]` without.
            assert!(
                m.allocate(3, &[seg(1, (1 << 32) + 1)], 1 << 32)
                    .unwrap()
                    .is_none()
            );
            assert_eq!(m.num_computed_tokens(3).unwrap(), 1);
            m.check_invariants().unwrap();
        }
    }

    #[test]
    fn block_sizes_and_counts_near_u64_max_do_not_wrap() {
        let mut m = KVCacheManager::new(4, u64::MAX, true, FreeOrder::Classic).unwrap();
        assert_eq!(
            m.allocate(1, &[seg(1, 5)], 5).unwrap().unwrap(),
            [BlockId(1)]
        );
        m.check_invariants().unwrap();
        let mut m = KVCacheManager::new(8, 4, true, FreeOrder::Classic).unwrap();
        m.allocate(1, &[seg(1, 5)], 5).unwrap();
        assert!(matches!(
            m.allocate(1, &[seg(1, 5)], u64::MAX),
            Err(KvError::InvalidArgument(_))
        ));
        assert!(matches!(
            m.allocate(2, &[seg(1, 5)], u64::MAX),
            Err(KvError::InvalidArgument(_))
        ));
        assert_eq!(m.pool().num_free_blocks(), 5);
        m.check_invariants().unwrap();
        assert_eq!(crate::block_table::blocks_for(u64::MAX, 1), u64::MAX);
        assert_eq!(crate::block_table::blocks_for(u64::MAX, u64::MAX), 1);
        assert_eq!(crate::block_table::blocks_for(5, u64::MAX), 1);
    }

    #[test]
    fn a_pool_past_the_memory_limit_is_refused_before_allocating() {
        let limit = crate::block_pool::memory_limit();
        let n = crate::block_pool::MAX_BLOCKS;
        if u64::from(n) * crate::block_pool::POOL_BYTES_PER_BLOCK > limit {
            let err = KVCacheManager::new(n, 16, true, FreeOrder::Classic).unwrap_err();
            assert!(err.to_string().contains("of block bookkeeping"), "{err}");
        }
    }
}
