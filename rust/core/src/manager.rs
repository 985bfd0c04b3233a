//! The KV-cache manager: per-request block tables over a [`BlockPool`], prefix lookup and
//! copy-on-write forks. The token layout of one request is pictured in DESIGN.md (§"A request's
//! blocks"); `python/kvsim/reference/kv_cache_manager.py` is the executable spec.

use std::collections::HashMap;

use crate::hash::{BlockKeys, validate_segments};
use crate::{
    BlockId, BlockKey, BlockPool, FreeOrder, KvError, Result, Segment, invalid_arg, invalid_op,
};

#[derive(Clone, Debug, Default)]
struct RequestState {
    blocks: Vec<BlockId>,
    num_computed_tokens: u64,
    /// Blocks `[0, num_keyed_blocks)` carry keys; `last_key` is the key of the last of them.
    num_keyed_blocks: u64,
    last_key: Option<BlockKey>,
}

/// Block tables for requests. A request is known from its first successful `allocate` until `free`; its
/// table always holds exactly `ceil(num_computed_tokens / block_size)` blocks, and with caching on its
/// first `num_computed_tokens / block_size` blocks carry their keys (registered at allocation time, so a
/// request admitted later in the same step can hit them).
#[derive(Clone, Debug)]
pub struct KVCacheManager {
    pool: BlockPool,
    block_size: u64,
    requests: HashMap<u64, RequestState>,
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

    fn get(&self, request_id: u64) -> Result<&RequestState> {
        match self.requests.get(&request_id) {
            Some(r) => Ok(r),
            None => invalid_op!("unknown request {request_id}"),
        }
    }

    pub fn block_table(&self, request_id: u64) -> Result<&[BlockId]> {
        Ok(&self.get(request_id)?.blocks)
    }

    pub fn num_computed_tokens(&self, request_id: u64) -> Result<u64> {
        Ok(self.get(request_id)?.num_computed_tokens)
    }

    /// Cached blocks of the longest prefix, in whole blocks, covering at most `total - 1` tokens; pushed
    /// into `hits`. Returns the key of the last hit.
    fn find_hits(
        &self,
        segments: &[Segment],
        total: u64,
        hits: &mut Vec<BlockId>,
    ) -> Option<BlockKey> {
        let mut last = None;
        if !self.pool.enable_caching() {
            return last;
        }
        let max_blocks = (total - 1) / self.block_size;
        for key in BlockKeys::new(segments, self.block_size, 0, None, max_blocks) {
            let Some(b) = self.pool.lookup(key) else {
                break;
            };
            hits.push(b);
            last = Some(key);
        }
        last
    }

    /// Tokens a new request with this content would find cached; no side effects.
    pub fn lookup(&self, segments: &[Segment]) -> Result<u64> {
        let total = validate_segments(segments)?;
        let mut hits = Vec::new();
        self.find_hits(segments, total, &mut hits);
        Ok(hits.len() as u64 * self.block_size)
    }

    // -- mutations -------------------------------------------------------------------------------------
    fn check_room(request_id: u64, computed: u64, num_new_tokens: u64, total: u64) -> Result<()> {
        if computed + num_new_tokens > total {
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
        if let Some(req) = self.requests.get(&request_id) {
            let computed = req.num_computed_tokens;
            Self::check_room(request_id, computed, num_new_tokens, total)?;
            let last = *req.blocks.last().expect("a known request holds a block");
            let copy = computed % bs != 0 && self.pool.ref_cnt_of(last) > 1;
            let num_new_blocks = (computed + num_new_tokens).div_ceil(bs) - req.blocks.len() as u64;
            if !self
                .pool
                .allocate_into((num_new_blocks + u64::from(copy)) as u32, &mut new)
            {
                return Ok(None);
            }
            if copy {
                self.pool.release([last]);
                self.num_cow_copies += 1;
            }
            let req = self.requests.get_mut(&request_id).expect("checked above");
            if copy {
                *req.blocks.last_mut().expect("non-empty") = new[0];
                req.blocks.extend_from_slice(&new[1..]);
            } else {
                req.blocks.extend_from_slice(&new);
            }
            req.num_computed_tokens = computed + num_new_tokens;
        } else {
            let mut hits = std::mem::take(&mut self.scratch);
            hits.clear();
            let admitted = self.admit_new(
                request_id,
                segments,
                total,
                num_new_tokens,
                &mut hits,
                &mut new,
            );
            self.scratch = hits;
            if !admitted? {
                return Ok(None);
            }
        }
        self.register_full_blocks(request_id, segments);
        Ok(Some(new))
    }

    /// First allocation of a request: take its cached prefix, then `num_new_tokens` more slots, or
    /// change nothing and return false. Hits on free blocks count against the free blocks.
    fn admit_new(
        &mut self,
        request_id: u64,
        segments: &[Segment],
        total: u64,
        num_new_tokens: u64,
        hits: &mut Vec<BlockId>,
        new: &mut Vec<BlockId>,
    ) -> Result<bool> {
        let bs = self.block_size;
        let last_key = self.find_hits(segments, total, hits);
        let computed = hits.len() as u64 * bs;
        Self::check_room(request_id, computed, num_new_tokens, total)?;
        let num_new_blocks = (computed + num_new_tokens).div_ceil(bs) - hits.len() as u64;
        let num_evictable = hits
            .iter()
            .filter(|&&b| self.pool.ref_cnt_of(b) == 0)
            .count() as u64;
        if num_new_blocks + num_evictable > u64::from(self.pool.num_free_blocks()) {
            return Ok(false);
        }
        self.pool.acquire(hits.iter().copied());
        let allocated = self.pool.allocate_into(num_new_blocks as u32, new);
        debug_assert!(allocated, "capacity was checked");
        let mut blocks = Vec::with_capacity(hits.len() + new.len());
        blocks.extend_from_slice(hits);
        blocks.extend_from_slice(new);
        let state = RequestState {
            blocks,
            num_computed_tokens: computed + num_new_tokens,
            num_keyed_blocks: hits.len() as u64,
            last_key,
        };
        self.requests.insert(request_id, state);
        Ok(true)
    }

    fn register_full_blocks(&mut self, request_id: u64, segments: &[Segment]) {
        if !self.pool.enable_caching() {
            return;
        }
        let req = self.requests.get_mut(&request_id).expect("just allocated");
        let num_full = req.num_computed_tokens / self.block_size;
        let start = req.num_keyed_blocks;
        let keys = BlockKeys::new(
            segments,
            self.block_size,
            start,
            req.last_key,
            num_full - start,
        );
        for (i, key) in (start..).zip(keys) {
            self.pool.insert_key(req.blocks[i as usize], key);
            req.last_key = Some(key);
        }
        req.num_keyed_blocks = num_full;
    }

    /// Releases a request's blocks in reverse table order and forgets it; unknown ids are a no-op.
    pub fn free(&mut self, request_id: u64) {
        if let Some(req) = self.requests.remove(&request_id) {
            self.pool.release(req.blocks.iter().rev().copied());
        }
    }

    /// Makes `child_id` share every block of `parent_id` (`ref_cnt` + 1 each), as a new sample does.
    pub fn fork(&mut self, parent_id: u64, child_id: u64) -> Result<()> {
        let parent = self.get(parent_id)?.clone();
        if self.requests.contains_key(&child_id) {
            invalid_op!("cannot fork onto request {child_id}: it already exists");
        }
        self.pool.acquire(parent.blocks.iter().copied());
        self.requests.insert(child_id, parent);
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
