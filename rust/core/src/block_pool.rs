//! The block pool: reference counts, the free queue (an LRU of evictable blocks) and the prefix map.
//!
//! Each block is in exactly one state: *null* (block 0, never handed out); *in use* (`ref_cnt > 0`, not
//! queued); or *free* (`ref_cnt == 0`, queued), where a free block may still carry a content key and be
//! found by `lookup` (it is *evictable*). `allocate` pops from the queue's head and drops the popped
//! block's key (lazy eviction). The prefix map `key -> blocks` does not de-duplicate: blocks sharing a
//! key are chained in insertion order through `dup_next`, and `lookup` returns the first. See
//! `python/kvsim/reference/block_pool.py` for the executable spec.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::free_queue::{FreeQueue, SETUP_CHUNK};
use crate::{BlockId, BlockKey, KvError, Result, invalid_arg, invalid_op};
use std::sync::atomic::{AtomicBool, Ordering};

const NONE: u32 = u32::MAX;
/// The largest pool: ids must leave room for the free queue's two sentinels and `NONE`.
pub const MAX_BLOCKS: u32 = u32::MAX - 2;
/// The most references a block can hold (a `u32` count: `touch` past it is refused, not wrapped).
pub const MAX_REF_CNT: u32 = u32::MAX;

/// Where blocks whose count drops to zero join the free queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeOrder {
    /// Every freed block to the tail (vLLM v1 up to 0.20).
    Classic,
    /// Freed blocks without a key to the head, keyed ones to the tail (newer vLLM).
    LifoUnhashed,
}

impl FreeOrder {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "classic" => Ok(FreeOrder::Classic),
            "lifo_unhashed" => Ok(FreeOrder::LifoUnhashed),
            _ => invalid_arg!("free_order '{s}' is not one of 'classic', 'lifo_unhashed'"),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FreeOrder::Classic => "classic",
            FreeOrder::LifoUnhashed => "lifo_unhashed",
        }
    }
}

/// Hasher for ids that are already well mixed (block keys, segment ids) or small distinct integers:
/// take the value as it is (128-bit keys fold their two lanes) and spread it with one multiply.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.0 = v as u64;
    }
    #[inline]
    fn write_u128(&mut self, v: u128) {
        self.0 ^= (v as u64) ^ ((v >> 64) as u64);
    }
}

type KeyMap = HashMap<BlockKey, u32, BuildHasherDefault<IdHasher>>;

/// A map keyed by row index (small distinct integers: `IdHasher` takes them as they are, where the
/// default SipHash cost a disaggregated fleet's drive 25 M instructions on 100,000 requests; callgrind,
/// results/README.md §Disaggregated fleet speed). Never iterated where its order could matter.
pub(crate) type RowMap<V> = HashMap<usize, V, BuildHasherDefault<IdHasher>>;

/// What a block carries: the state a release and an allocation read, one byte per block so that a pool's
/// tags stay in cache while its keys (16 bytes each) are read only for keyed blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Tag {
    /// No key.
    Unkeyed,
    /// Its key (in `key`) is in the prefix map.
    Keyed,
    /// Keyed without a key in the map (engine-only, see `insert_phantom`): counts as keyed for the free
    /// order and for evictions, but no lookup can find it.
    Phantom,
}

/// Bytes a pool keeps per block at most: its arrays (reference count, key, duplicate chain, tag,
/// free-queue links) and, when every block carries a key, the prefix map's entry and control byte.
pub const POOL_BYTES_PER_BLOCK: u64 = (size_of::<u32>()
    + size_of::<BlockKey>()
    + size_of::<u32>()
    + size_of::<Tag>()
    + FreeQueue::BYTES_PER_BLOCK
    + size_of::<(BlockKey, u32)>()
    + 1) as u64;

/// The environment variable that overrides [`memory_limit`] (a number of bytes).
pub const MEMORY_LIMIT_ENV: &str = "KVSIM_MEMORY_LIMIT";

/// The most memory a pool's bookkeeping may take: `KVSIM_MEMORY_LIMIT` (bytes) if set, else the
/// machine's physical memory (`MemTotal` of `/proc/meminfo`), else no limit (`u64::MAX`).
pub fn memory_limit() -> u64 {
    if let Some(v) = std::env::var(MEMORY_LIMIT_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        return v;
    }
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        })
        .unwrap_or(u64::MAX)
}

/// Refuses, before anything is allocated, a pool whose bookkeeping (`num_blocks` ×
/// [`POOL_BYTES_PER_BLOCK`]) exceeds [`memory_limit`]. The one place this rule lives: the pool's and
/// the manager's constructors and the engine all build their pool through [`BlockPool::new`].
pub fn check_pool_memory(num_blocks: u32) -> Result<()> {
    let needed = u64::from(num_blocks) * POOL_BYTES_PER_BLOCK;
    let limit = memory_limit();
    if needed > limit {
        invalid_arg!(
            "num_blocks {num_blocks} needs {needed} bytes ({} MiB) of block bookkeeping \
             ({POOL_BYTES_PER_BLOCK} bytes per block), more than the memory limit of {limit} bytes \
             ({} MiB: this machine's physical memory, or {MEMORY_LIMIT_ENV} if set)",
            needed >> 20,
            limit >> 20
        );
    }
    Ok(())
}

fn out_of_memory(num_blocks: u32) -> KvError {
    KvError::InvalidArgument(format!(
        "num_blocks {num_blocks}: the memory for the pool's bookkeeping ({} bytes) cannot be allocated",
        u64::from(num_blocks) * POOL_BYTES_PER_BLOCK
    ))
}

/// `vec![value; n]` that reports an allocation failure instead of aborting the process, asking `stop` every `SETUP_CHUNK` elements:
/// `(vector, complete)`.
fn filled_until<T: Clone>(
    n: usize,
    value: T,
    num_blocks: u32,
    stop: &dyn Fn() -> bool,
) -> Result<(Vec<T>, bool)> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| out_of_memory(num_blocks))?;
    while v.len() < n {
        if stop() {
            return Ok((v, false));
        }
        v.resize((v.len() + SETUP_CHUNK).min(n), value.clone());
    }
    Ok((v, true))
}

/// Frees `x` on a thread of its own (returning a gigabyte to the system takes a noticeable fraction of a
/// second, which Ctrl-C should not wait for); if no thread can be had, here.
pub fn drop_elsewhere<T: Send + 'static>(x: T) {
    let _ = std::thread::Builder::new().spawn(move || drop(x));
}

#[derive(Clone, Debug)]
pub struct BlockPool {
    num_blocks: u32,
    enable_caching: bool,
    free_order: FreeOrder,
    ref_cnt: Vec<u32>,
    /// A block's key, meaningful only while its tag is `Keyed`.
    key: Vec<BlockKey>,
    /// Next block carrying the same key, in insertion order (`NONE` ends the chain).
    dup_next: Vec<u32>,
    tag: Vec<Tag>,
    queue: FreeQueue,
    /// First block inserted under each key that still carries it.
    map: KeyMap,
    num_evictions: u64,
    num_allocated: u64,
    /// When recording (the engine's event log), every evicted block in order.
    evicted: Option<Vec<BlockId>>,
}

impl BlockPool {
    pub fn new(num_blocks: u32, enable_caching: bool, free_order: FreeOrder) -> Result<Self> {
        Self::new_cancellable(num_blocks, enable_caching, free_order, None)
    }

    /// `new` that reads `cancel` (Ctrl-C) every `SETUP_CHUNK` blocks while it fills its arrays (a 2**26-block
    /// pool takes seconds): once set, what was built is freed on another thread and the call returns
    /// `InvalidOperation("interrupted")`, as a cancelled run does.
    pub fn new_cancellable(
        num_blocks: u32,
        enable_caching: bool,
        free_order: FreeOrder,
        cancel: Option<&AtomicBool>,
    ) -> Result<Self> {
        if !(2..=MAX_BLOCKS).contains(&num_blocks) {
            invalid_arg!(
                "num_blocks {num_blocks} must be between 2 and {MAX_BLOCKS} (block 0 is the null block)"
            );
        }
        check_pool_memory(num_blocks)?;
        let n = num_blocks as usize;
        let stop = || cancel.is_some_and(|c| c.load(Ordering::Relaxed));
        let interrupted = || KvError::InvalidOperation("interrupted".into());
        let (ref_cnt, done) = filled_until(n, 0, num_blocks, &stop)?;
        if !done {
            drop_elsewhere(ref_cnt);
            return Err(interrupted());
        }
        let (key, done) = filled_until(n, BlockKey(0), num_blocks, &stop)?;
        if !done {
            drop_elsewhere((ref_cnt, key));
            return Err(interrupted());
        }
        let (dup_next, done) = filled_until(n, NONE, num_blocks, &stop)?;
        if !done {
            drop_elsewhere((ref_cnt, key, dup_next));
            return Err(interrupted());
        }
        let (tag, done) = filled_until(n, Tag::Unkeyed, num_blocks, &stop)?;
        if !done {
            drop_elsewhere((ref_cnt, key, dup_next, tag));
            return Err(interrupted());
        }
        let (queue, done) = FreeQueue::try_new_until(num_blocks, 1, &stop)
            .ok_or_else(|| out_of_memory(num_blocks))?;
        if !done {
            drop_elsewhere((ref_cnt, key, dup_next, tag, queue));
            return Err(interrupted());
        }
        Ok(BlockPool {
            num_blocks,
            enable_caching,
            free_order,
            ref_cnt,
            key,
            dup_next,
            tag,
            queue,
            map: KeyMap::default(),
            num_evictions: 0,
            num_allocated: 0,
            evicted: None,
        })
    }

    // -- queries ---------------------------------------------------------------------------------------
    #[inline]
    pub fn num_blocks(&self) -> u32 {
        self.num_blocks
    }
    #[inline]
    pub fn capacity(&self) -> u32 {
        self.num_blocks - 1
    }
    #[inline]
    pub fn num_free_blocks(&self) -> u32 {
        self.queue.len()
    }
    #[inline]
    pub fn enable_caching(&self) -> bool {
        self.enable_caching
    }
    #[inline]
    pub fn free_order(&self) -> FreeOrder {
        self.free_order
    }
    #[inline]
    pub fn num_evictions(&self) -> u64 {
        self.num_evictions
    }
    /// Blocks handed out by `allocate` so far.
    #[inline]
    pub fn num_allocated(&self) -> u64 {
        self.num_allocated
    }

    /// Checked public entry points take ids as `i64` so that a caller's negative id gets this message.
    fn check_block(&self, b: i64) -> Result<BlockId> {
        if b < 0 || b >= i64::from(self.num_blocks) {
            invalid_arg!("block id {b} is out of range 0..{}", self.num_blocks - 1);
        }
        Ok(BlockId(b as u32))
    }

    fn check_usable(&self, b: i64) -> Result<BlockId> {
        let id = self.check_block(b)?;
        if id == BlockId::NULL {
            invalid_op!("block 0 is the null block and is never allocated or freed");
        }
        Ok(id)
    }

    pub fn ref_cnt(&self, b: i64) -> Result<u32> {
        Ok(self.ref_cnt[self.check_block(b)?.index()])
    }

    pub fn block_hash(&self, b: i64) -> Result<Option<BlockKey>> {
        Ok(self.key_of(self.check_block(b)?))
    }

    /// The key of `b` when it is in the prefix map.
    #[inline]
    fn key_of(&self, b: BlockId) -> Option<BlockKey> {
        (self.tag[b.index()] == Tag::Keyed).then(|| self.key[b.index()])
    }

    /// The count of a block known to be valid (engine-internal fast path).
    #[inline]
    pub fn ref_cnt_of(&self, b: BlockId) -> u32 {
        self.ref_cnt[b.index()]
    }

    /// The free block after `b` (the first when `b` is `None`), in the order allocations pop them.
    #[inline]
    pub fn next_free(&self, b: Option<BlockId>) -> Option<BlockId> {
        self.queue.next_after(b)
    }

    /// Whether the prefix map holds any key.
    #[inline]
    pub fn maps_keys(&self) -> bool {
        !self.map.is_empty()
    }

    /// Whether `b` carries a key of the prefix map (a phantom key is in no map).
    #[inline]
    pub fn is_mapped(&self, b: BlockId) -> bool {
        self.tag[b.index()] == Tag::Keyed
    }

    /// Head first.
    pub fn free_block_ids(&self) -> Vec<BlockId> {
        self.queue.iter().collect()
    }

    /// Ascending ids of every block that carries a key (in use or evictable).
    pub fn cached_block_ids(&self) -> Vec<BlockId> {
        (0..self.num_blocks)
            .filter(|&b| self.tag[b as usize] == Tag::Keyed)
            .map(BlockId)
            .collect()
    }

    /// Every key the prefix map holds (blocks in use or evictable; phantom keys are not in it).
    pub fn cached_keys(&self) -> impl Iterator<Item = BlockKey> + '_ {
        self.map.keys().copied()
    }

    #[inline]
    pub fn lookup(&self, key: BlockKey) -> Option<BlockId> {
        self.map.get(&key).map(|&b| BlockId(b))
    }

    // -- mutations -------------------------------------------------------------------------------------
    /// Pops `num` blocks from the head into `out` (each with `ref_cnt` 1, its old key evicted), or returns
    /// false and changes nothing.
    pub fn allocate_into(&mut self, num: u64, out: &mut Vec<BlockId>) -> bool {
        if num > u64::from(self.queue.len()) {
            return false;
        }
        for _ in 0..num {
            let b = self.allocate_one().expect("queue length was checked");
            out.push(b);
        }
        true
    }

    /// Pops one block from the head (`ref_cnt` 1, its old key evicted), or `None` if none is free.
    #[inline(always)]
    #[allow(clippy::inline_always)] // the hot path of every decode step: measured, not assumed
    pub fn allocate_one(&mut self) -> Option<BlockId> {
        let b = self.queue.pop_front()?;
        self.num_allocated += 1;
        self.evict(b);
        self.ref_cnt[b.index()] = 1;
        self.debug_check();
        Some(b)
    }

    /// `allocate_into` a new vector (sized only once the count is known to fit).
    pub fn allocate(&mut self, num: u64) -> Option<Vec<BlockId>> {
        if num > u64::from(self.queue.len()) {
            return None;
        }
        let mut out = Vec::with_capacity(num as usize);
        self.allocate_into(num, &mut out).then_some(out)
    }

    #[inline]
    fn evict(&mut self, b: BlockId) {
        match std::mem::replace(&mut self.tag[b.index()], Tag::Unkeyed) {
            Tag::Unkeyed => return,
            Tag::Phantom => {}
            Tag::Keyed => self.unmap(self.key[b.index()], b),
        }
        self.num_evictions += 1;
        if let Some(log) = &mut self.evicted {
            log.push(b);
        }
    }

    /// Starts recording evicted blocks (read with `take_evicted`).
    pub fn record_evictions(&mut self) {
        self.evicted = Some(Vec::new());
    }

    /// The blocks evicted since the last call, in order (empty when not recording).
    pub fn take_evicted(&mut self) -> Vec<BlockId> {
        self.evicted
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn unmap(&mut self, key: BlockKey, b: BlockId) {
        let after = std::mem::replace(&mut self.dup_next[b.index()], NONE);
        // One probe in the common case: the block is the key's only holder.
        let first = self.map.remove(&key).expect("a keyed block is mapped");
        if first == b.0 {
            if after != NONE {
                self.map.insert(key, after);
            }
            return;
        }
        self.map.insert(key, first);
        let mut cur = first;
        while self.dup_next[cur as usize] != b.0 {
            cur = self.dup_next[cur as usize];
        }
        self.dup_next[cur as usize] = after;
    }

    /// Validates a public `free` list: every id usable, none freed more often than held.
    fn check_free_list(&self, blocks: &[i64]) -> Result<()> {
        let mut seen: HashMap<i64, u32> = HashMap::new();
        for &b in blocks {
            let id = self.check_usable(b)?;
            let times = seen.entry(b).or_insert(0);
            *times += 1;
            if *times > self.ref_cnt[id.index()] {
                invalid_op!(
                    "block {b} freed {times} times but has ref_cnt {}",
                    self.ref_cnt[id.index()]
                );
            }
        }
        Ok(())
    }

    /// Drops one reference per listed block, in order; blocks reaching zero join the queue (checked).
    pub fn free(&mut self, blocks: &[i64]) -> Result<()> {
        self.check_free_list(blocks)?;
        self.release(blocks.iter().map(|&b| BlockId(b as u32)));
        Ok(())
    }

    /// `free` for callers that hold the references by construction (the manager, the engine).
    pub fn release(&mut self, blocks: impl IntoIterator<Item = BlockId>) {
        let mut last_at_head: Option<BlockId> = None;
        for b in blocks {
            let rc = &mut self.ref_cnt[b.index()];
            debug_assert!(*rc > 0, "block {b} released with ref_cnt 0");
            *rc -= 1;
            if *rc == 0 {
                if self.free_order == FreeOrder::LifoUnhashed && self.tag[b.index()] == Tag::Unkeyed
                {
                    self.queue.insert_after(last_at_head, b);
                    last_at_head = Some(b);
                } else {
                    self.queue.push_back(b);
                }
            }
        }
        self.debug_check();
    }

    /// Takes one more reference on each block, taking free ones out of the queue (checked).
    pub fn touch(&mut self, blocks: &[i64]) -> Result<()> {
        let n = blocks.len() as u64;
        let mut counts: Option<HashMap<i64, u64>> = None;
        for &b in blocks {
            let id = self.check_usable(b)?;
            let held = u64::from(self.ref_cnt[id.index()]);
            if held + n > u64::from(MAX_REF_CNT) {
                // (near the count's range: count this block's references in the call, once for all)
                let times = counts.get_or_insert_with(|| {
                    let mut c = HashMap::new();
                    for &x in blocks {
                        *c.entry(x).or_insert(0) += 1;
                    }
                    c
                })[&b];
                if held + times > u64::from(MAX_REF_CNT) {
                    invalid_op!(
                        "block {b}: {times} more references would pass the {MAX_REF_CNT} a block can hold (it has {held})"
                    );
                }
            }
        }
        self.acquire(blocks.iter().map(|&b| BlockId(b as u32)));
        Ok(())
    }

    /// `touch` for callers that pass valid ids by construction.
    pub fn acquire(&mut self, blocks: impl IntoIterator<Item = BlockId>) {
        for b in blocks {
            if self.ref_cnt[b.index()] == 0 {
                self.queue.remove(b);
            }
            self.ref_cnt[b.index()] += 1;
        }
        self.debug_check();
    }

    /// Gives an in-use block its content key, making it findable by `lookup` (checked).
    pub fn register(&mut self, b: i64, key: BlockKey) -> Result<()> {
        let id = self.check_usable(b)?;
        if !self.enable_caching {
            invalid_op!("cannot register a key: prefix caching is disabled");
        }
        if self.ref_cnt[id.index()] == 0 {
            invalid_op!("block {b} is free and cannot be registered");
        }
        if self.tag[id.index()] == Tag::Keyed {
            invalid_op!("block {b} already has a key");
        }
        self.insert_key(id, key);
        Ok(())
    }

    /// `register` for callers that know the block is in use and unkeyed.
    #[inline]
    pub fn insert_key(&mut self, b: BlockId, key: BlockKey) {
        debug_assert!(self.tag[b.index()] != Tag::Keyed && self.ref_cnt[b.index()] > 0);
        self.tag[b.index()] = Tag::Keyed;
        self.key[b.index()] = key;
        match self.map.entry(key) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(b.0);
            }
            std::collections::hash_map::Entry::Occupied(e) => {
                let mut cur = *e.get();
                while self.dup_next[cur as usize] != NONE {
                    cur = self.dup_next[cur as usize];
                }
                self.dup_next[cur as usize] = b.0;
            }
        }
        self.debug_check();
    }

    /// Marks an in-use block as keyed without computing or mapping its key: for blocks no lookup can
    /// ever hit (generated tokens when no prompt quotes an output). Behaves as keyed in the free order
    /// and is counted as an eviction when reused; `materialize` gives it its real key later if needed.
    #[inline]
    pub fn insert_phantom(&mut self, b: BlockId) {
        debug_assert!(self.tag[b.index()] == Tag::Unkeyed && self.ref_cnt[b.index()] > 0);
        self.tag[b.index()] = Tag::Phantom;
    }

    /// Replaces a phantom key by the real one, now findable by `lookup`.
    pub fn materialize(&mut self, b: BlockId, key: BlockKey) {
        debug_assert!(self.tag[b.index()] == Tag::Phantom);
        self.insert_key(b, key); // the tag: phantom -> keyed
    }

    // -- checking --------------------------------------------------------------------------------------
    /// The invariants checked after every mutation in debug builds (`cfg!`, not `#[cfg]`: the release
    /// body is the same code, folded away, so `self` stays used and both builds pass clippy's `unused_self`).
    #[inline]
    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            if let Err(e) = self.check_invariants() {
                panic!("{e}");
            }
        }
    }

    /// Every block in exactly one state; queue links and counter agree; map entries point at blocks
    /// carrying their key and every keyed block is reachable from its key's chain.
    pub fn check_invariants(&self) -> Result<()> {
        let fail = |m: String| {
            Err(KvError::Internal(format!(
                "block pool invariant broken: {m}"
            )))
        };
        if let Err(m) = self.queue.check() {
            return fail(m);
        }
        if self.ref_cnt[0] != 0 || self.queue.contains(BlockId::NULL) || self.tag[0] != Tag::Unkeyed
        {
            return fail("the null block is in use, free or keyed".into());
        }
        let mut reachable = 0usize;
        for (&key, &first) in &self.map {
            let mut cur = first;
            while cur != NONE {
                if self.key_of(BlockId(cur)) != Some(key) {
                    return fail(format!(
                        "map lists block {cur} under a key it does not carry"
                    ));
                }
                reachable += 1;
                if reachable > self.num_blocks as usize {
                    return fail("a duplicate chain has a cycle".into());
                }
                cur = self.dup_next[cur as usize];
            }
        }
        let mut keyed = 0usize;
        for b in 1..self.num_blocks {
            let id = BlockId(b);
            let queued = self.queue.contains(id);
            if (self.ref_cnt[id.index()] == 0) != queued {
                return fail(format!(
                    "block {b} has ref_cnt {} but in-queue is {queued}",
                    self.ref_cnt[id.index()]
                ));
            }
            keyed += usize::from(self.tag[id.index()] == Tag::Keyed);
        }
        if keyed != reachable {
            return fail(format!(
                "{keyed} keyed blocks but {reachable} reachable from the map"
            ));
        }
        if !self.enable_caching && keyed > 0 {
            return fail("keys exist with caching disabled".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancelled_setup_is_interrupted_and_an_unset_flag_builds_the_same_pool() {
        let n = 3 * SETUP_CHUNK as u32 + 5;
        let set = AtomicBool::new(true);
        let err = BlockPool::new_cancellable(n, true, FreeOrder::Classic, Some(&set)).unwrap_err();
        assert!(matches!(err, KvError::InvalidOperation(m) if m == "interrupted"));
        let unset = AtomicBool::new(false);
        let p = BlockPool::new_cancellable(n, true, FreeOrder::Classic, Some(&unset)).unwrap();
        p.check_invariants().unwrap();
        assert_eq!(p.num_free_blocks(), n - 1);
        assert_eq!(
            p.free_block_ids(),
            BlockPool::new(n, true, FreeOrder::Classic)
                .unwrap()
                .free_block_ids()
        );
    }

    fn ids(v: &[BlockId]) -> Vec<u32> {
        v.iter().map(|b| b.0).collect()
    }

    #[test]
    fn allocates_from_the_head_in_ascending_order_and_skips_the_null_block() {
        let mut p = BlockPool::new(5, true, FreeOrder::Classic).unwrap();
        assert_eq!(ids(&p.allocate(3).unwrap()), [1, 2, 3]);
        assert_eq!(p.num_free_blocks(), 1);
        assert!(p.allocate(2).is_none(), "atomic: 2 > 1 free");
        assert_eq!(p.num_free_blocks(), 1);
    }

    #[test]
    fn free_appends_in_the_given_order_and_rejects_double_free() {
        let mut p = BlockPool::new(5, true, FreeOrder::Classic).unwrap();
        p.allocate(4).unwrap();
        p.free(&[3, 1]).unwrap();
        assert_eq!(ids(&p.free_block_ids()), [3, 1]);
        let err = p.free(&[2, 2]).unwrap_err();
        assert!(matches!(err, KvError::InvalidOperation(_)), "{err}");
        assert_eq!(p.ref_cnt(2).unwrap(), 1, "nothing changed");
        assert!(matches!(p.free(&[0]), Err(KvError::InvalidOperation(_))));
        assert!(matches!(p.free(&[9]), Err(KvError::InvalidArgument(_))));
    }

    #[test]
    fn lifo_rule_puts_unhashed_blocks_at_the_head_in_order() {
        let mut p = BlockPool::new(6, true, FreeOrder::LifoUnhashed).unwrap();
        p.allocate(5).unwrap();
        p.register(4, BlockKey(44)).unwrap();
        p.free(&[5]).unwrap();
        p.free(&[4, 3, 2]).unwrap();
        assert_eq!(ids(&p.free_block_ids()), [3, 2, 5, 4]);
    }

    #[test]
    fn duplicate_keys_coexist_and_lookup_returns_the_first_still_holding_it() {
        let mut p = BlockPool::new(6, true, FreeOrder::Classic).unwrap();
        p.allocate(3).unwrap();
        let k = BlockKey(7);
        p.register(2, k).unwrap();
        p.register(1, k).unwrap();
        p.register(3, k).unwrap();
        assert_eq!(p.lookup(k), Some(BlockId(2)));
        p.free(&[2, 3]).unwrap();
        // Pop 4, 5 (unkeyed), then 2: its key goes, block 1 becomes the first holder.
        p.allocate(3).unwrap();
        assert_eq!(p.num_evictions(), 1);
        assert_eq!(p.lookup(k), Some(BlockId(1)));
        p.allocate(1).unwrap();
        assert_eq!(p.lookup(k), Some(BlockId(1)));
        p.check_invariants().unwrap();
    }

    #[test]
    fn touch_past_a_blocks_reference_count_is_refused_and_changes_nothing() {
        // (2^32 references wrapped the u32 count to 0, and the next touch unlinked a block not queued)
        let mut p = BlockPool::new(4, true, FreeOrder::Classic).unwrap();
        p.allocate(2).unwrap();
        p.ref_cnt[1] = MAX_REF_CNT - 2;
        let err = p.touch(&[2, 1, 1, 1]).unwrap_err();
        assert!(
            matches!(&err, KvError::InvalidOperation(m) if m == "block 1: 3 more references would pass the 4294967295 a block can hold (it has 4294967293)"),
            "{err:?}"
        );
        assert_eq!(
            (p.ref_cnt(1).unwrap(), p.ref_cnt(2).unwrap()),
            (MAX_REF_CNT - 2, 1)
        );
        p.touch(&[1, 2, 1]).unwrap();
        assert_eq!(
            (p.ref_cnt(1).unwrap(), p.ref_cnt(2).unwrap()),
            (MAX_REF_CNT, 2)
        );
        assert!(p.touch(&[1]).is_err());
    }

    #[test]
    fn touch_takes_an_evictable_block_out_of_the_queue() {
        let mut p = BlockPool::new(4, true, FreeOrder::Classic).unwrap();
        p.allocate(1).unwrap();
        p.register(1, BlockKey(1)).unwrap();
        p.free(&[1]).unwrap();
        assert_eq!(ids(&p.free_block_ids()), [2, 3, 1]);
        p.touch(&[1]).unwrap();
        assert_eq!(ids(&p.free_block_ids()), [2, 3]);
        assert_eq!(p.ref_cnt(1).unwrap(), 1);
        assert_eq!(p.lookup(BlockKey(1)), Some(BlockId(1)));
    }

    #[test]
    fn bad_sizes_and_register_misuse_are_errors() {
        assert!(BlockPool::new(1, true, FreeOrder::Classic).is_err());
        assert!(FreeOrder::parse("fifo").is_err());
        let mut p = BlockPool::new(4, false, FreeOrder::Classic).unwrap();
        p.allocate(1).unwrap();
        assert!(matches!(
            p.register(1, BlockKey(1)),
            Err(KvError::InvalidOperation(_))
        ));
        let mut p = BlockPool::new(4, true, FreeOrder::Classic).unwrap();
        assert!(matches!(
            p.register(1, BlockKey(1)),
            Err(KvError::InvalidOperation(_))
        ));
    }
}
