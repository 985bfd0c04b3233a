//! The CPU tier: the chunks vLLM's native offloading keeps in host memory and the policy that evicts
//! them (vLLM 0.33.0's `vllm/v1/kv_offload/cpu/manager.py`, `policies/lru.py`, `policies/arc.py`).
//!
//! `python/kvsim/reference/cpu_tier.py` is the executable spec: every decision here (what is stored,
//! which chunk is evicted, the ARC target) equals the spec's, and `tests/test_cpu_tier.py` drives both
//! side by side. A chunk is named by its content key; it is *pending* while its store is in flight
//! (neither readable nor evictable), else *ready*, and *pinned* while loads read it. A request's accesses
//! (stores offered, loads) are recorded once per key with the key's position in the request (its chunk
//! index), which the eviction policies rank by.
//!
//! Memory is O(chunks held + live requests' accesses + the store-threshold tracker (at most `tracker`
//! keys)), never O(capacity) (a row's vector of slots may keep empty ones between held chunks: at most
//! its request's chunks for a row with one held): a request's record is dropped at `finish`, ARC's
//! ghost lists stay within
//! `capacity`, and the LRU heap of lazily deleted entries is rebuilt from the live ones when it doubles
//! (vLLM's `_maybe_compact_heap`; the spec never compacts, which changes no decision: see `lru_evict`).
//! The LRU heap is built only at the first eviction (a tier that never fills orders nothing), from the
//! chunks' ranks, which live in the chunks' slots (`Chunks`: a row's private chunks share one hash-table
//! entry and one vector of slots).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, hash_map};
use std::hash::BuildHasherDefault;

use crate::block_pool::IdHasher;
use crate::{BlockKey, KvError, Result, invalid_arg, invalid_op};

/// `lookup`: the tier does not hold the key.
pub const MISS: u8 = 0;
/// `lookup`: the chunk is held and ready (a load may read it).
pub const HIT: u8 = 1;
/// `lookup`: the chunk is held but its store is still in flight.
pub const PENDING: u8 = 2;

/// The largest position a key may have (a chunk's index in its request: kept in 32 bits).
pub const MAX_POSITION: u64 = u32::MAX as u64;

/// The most loads that may pin one chunk at once (the engine pins a chunk once at a time).
pub const MAX_PINS: u64 = u16::MAX as u64;

/// The store-threshold tracker's size when none is given (vLLM's `max_tracker_size`).
pub const DEFAULT_TRACKER: usize = 64_000;

/// Which chunk the tier gives up when it needs room (vLLM's `cache_policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// Least recently used by request rank (`policies/lru.py`).
    Lru,
    /// Adaptive replacement: T1/T2, ghosts B1/B2, an adaptive T1 target (`policies/arc.py`).
    Arc,
}

impl Eviction {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "lru" => Ok(Eviction::Lru),
            "arc" => Ok(Eviction::Arc),
            _ => invalid_arg!("eviction '{s}' is not one of 'lru', 'arc'"),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Eviction::Lru => "lru",
            Eviction::Arc => "arc",
        }
    }
}

type Hasher = BuildHasherDefault<IdHasher>;
type KeyMap<V> = HashMap<BlockKey, V, Hasher>;
type KeySet = HashSet<BlockKey, Hasher>;
/// A record's run of keys `(hi, lo..lo + n)` at positions `pos..pos + n`: `(hi, lo, n, pos)` (`Access::span`).
type Span = (u64, u64, u64, u64);

mod access;
mod chunks;
#[cfg(test)]
mod tests;

use access::{Access, INSERTED, REUSED, Recency, SEEN, STORE_MISS};
use chunks::{Chunk, Chunks, Rank, run_in_order, run_key, run_of};

/// A tier's policy state in the spec's terms ([`CpuTier::internals`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Internals {
    /// LRU: `(key, request rank, -position)` of every chunk, evicted first first.
    pub ranks: Vec<(BlockKey, u64, i128)>,
    /// ARC: T1, T2, B1, B2, least recent first.
    pub arc: [Vec<BlockKey>; 4],
    /// The threshold tracker: `(key, offers)`, least recent first.
    pub tracker: Vec<(BlockKey, u64)>,
}

/// `capacity` chunks of host memory and the policy that evicts them.
///
/// Invariants (`check_invariants`): `num_evictable` counts the ready, unpinned chunks; under LRU, once
/// the heap is live (built at the first eviction: a tier that never fills never orders its chunks),
/// each evictable chunk has a heap entry carrying its current rank, and before that the heap is empty; under ARC the chunks are T1 ∪ T2 (disjoint), the ghosts B1, B2 hold no chunk, are
/// disjoint and within `capacity` keys; the tracker holds at most `tracker` keys.
#[derive(Clone, Debug)]
pub struct CpuTier {
    capacity: u64,
    eviction: Eviction,
    chunks: Chunks,
    num_evictable: u64,
    accesses: HashMap<u64, Access, Hasher>,
    /// Records that are one run of keys and nothing else (LRU, no threshold; a request's private chunks
    /// offered, the usual record of a rarely hit tier): the request's rank and its `Access::span`,
    /// apart from `accesses` (a fifth of an `Access`'s bytes). A request is in one of the two maps at
    /// most; anything else done to its record moves it to `accesses` first (`promote`).
    spans: HashMap<u64, (u64, Span), Hasher>,
    /// Offers a key needs before a store admits it; 0: no threshold (vLLM's `store_threshold` < 2).
    threshold: u64,
    tracker: usize,
    counts: Recency<u64>,
    // LRU.
    next_rank: u64,
    heap: BinaryHeap<Reverse<(Rank, BlockKey)>>,
    /// Whether `heap` is kept (from the first eviction on): before, pushes are skipped.
    heap_live: bool,
    // ARC: T1/T2 least recent first, their ghosts, the adaptive T1 target.
    t1: Recency<()>,
    t2: Recency<()>,
    b1: Recency<()>,
    b2: Recency<()>,
    target: f64,
    num_evicted: u64,
    num_stores_skipped: u64,
    /// `prepare_store`'s scratch.
    scratch_store: Vec<(BlockKey, u64)>,
    scratch_ready: Vec<BlockKey>,
    scratch_accessed: Vec<(BlockKey, u64)>,
    scratch_absent: Vec<bool>,
    /// Finished requests' `Access::order` vectors, for later requests' records (at most as many as
    /// requests had records at once).
    spare_orders: Vec<Vec<(BlockKey, u64)>>,
}

impl CpuTier {
    /// A tier of `capacity` chunks. With `store_threshold` >= 2 a new key is stored only once it has
    /// been offered that many times (offers counted in a tracker of [`DEFAULT_TRACKER`] keys); below 2
    /// every offer may store.
    pub fn new(capacity: u64, eviction: Eviction, store_threshold: u64) -> Self {
        Self::with_tracker(capacity, eviction, store_threshold, DEFAULT_TRACKER)
    }

    /// [`CpuTier::new`] with a tracker of `tracker` keys.
    pub fn with_tracker(
        capacity: u64,
        eviction: Eviction,
        store_threshold: u64,
        tracker: usize,
    ) -> Self {
        Self {
            capacity,
            eviction,
            chunks: Chunks::default(),
            num_evictable: 0,
            accesses: HashMap::default(),
            spans: HashMap::default(),
            threshold: if store_threshold >= 2 {
                store_threshold
            } else {
                0
            },
            tracker,
            counts: Recency::default(),
            next_rank: 0,
            heap: BinaryHeap::new(),
            heap_live: false,
            t1: Recency::default(),
            t2: Recency::default(),
            b1: Recency::default(),
            b2: Recency::default(),
            target: 0.0,
            num_evicted: 0,
            num_stores_skipped: 0,
            scratch_store: Vec::new(),
            scratch_ready: Vec::new(),
            scratch_accessed: Vec::new(),
            scratch_absent: Vec::new(),
            spare_orders: Vec::new(),
        }
    }

    // -- queries -----------------------------------------------------------------------------------
    /// [`MISS`], [`HIT`] (ready) or [`PENDING`] (its store in flight).
    #[inline]
    pub fn lookup(&self, key: BlockKey) -> u8 {
        self.chunks.state(key)
    }

    /// Chunks held, pending ones included.
    pub fn used(&self) -> u64 {
        self.chunks.len() as u64
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn eviction(&self) -> Eviction {
        self.eviction
    }

    /// Chunks evicted so far to make room for stores.
    pub fn num_evicted(&self) -> u64 {
        self.num_evicted
    }

    /// New chunks offered but not stored because their key had too few offers (the store threshold).
    pub fn num_stores_skipped(&self) -> u64 {
        self.num_stores_skipped
    }

    /// Chunks that may be evicted now: ready and pinned by no load.
    pub fn num_evictable(&self) -> u64 {
        self.num_evictable
    }

    /// ARC's adaptive target for T1's size (0 under LRU).
    pub fn target(&self) -> f64 {
        self.target
    }

    /// The policy's order, for tests that compare it with the spec's: under LRU every chunk with its
    /// rank as the spec writes it, `(key, request rank, -position)`, smallest (evicted first) first;
    /// under ARC T1, T2, B1, B2, least recent first; and the tracker's `(key, offers)`, least recent
    /// first.
    pub fn internals(&self) -> Internals {
        let mut ranks: Vec<(BlockKey, u64, i128)> = if self.eviction == Eviction::Lru {
            self.chunks
                .iter()
                .map(|(k, c)| (k, c.req, -i128::from(c.pos)))
                .collect()
        } else {
            Vec::new()
        };
        ranks.sort_by_key(|&(k, r, neg_pos)| (r, neg_pos, k));
        Internals {
            ranks,
            arc: [&self.t1, &self.t2, &self.b1, &self.b2].map(|l| l.keys().collect()),
            tracker: self
                .counts
                .keys()
                .map(|k| (k, self.counts.get(k).copied().unwrap_or(0)))
                .collect(),
        }
    }

    // -- preconditions ------------------------------------------------------------------------------
    /// Whether `prepare_load(keys)` is allowed: every key held and ready, and pinned by fewer than
    /// [`MAX_PINS`] loads with these. Nothing changes.
    pub fn check_prepare_load(&self, keys: &[(BlockKey, u64)]) -> Result<()> {
        let mut uses: KeyMap<u64> = KeyMap::default();
        for &(key, _) in keys {
            match self.lookup(key) {
                MISS => invalid_op!("cannot load chunk {}: the CPU tier does not hold it", key.0),
                PENDING => invalid_op!(
                    "cannot load chunk {}: its store has not completed (pending)",
                    key.0
                ),
                _ => {}
            }
            let n = uses.entry(key).or_insert(0);
            *n += 1;
            let pins = u64::from(self.chunks.get(key).expect("held").pins);
            if pins + *n > MAX_PINS {
                invalid_op!("cannot load chunk {}: {pins} loads pin it already", key.0);
            }
        }
        Ok(())
    }

    /// Whether `complete_load(keys)` is allowed: every key held and pinned by at least as many loads as
    /// it appears in `keys`. Nothing changes.
    pub fn check_complete_load(&self, keys: &[BlockKey]) -> Result<()> {
        let mut uses: KeyMap<u64> = KeyMap::default();
        for &key in keys {
            let n = uses.entry(key).or_insert(0);
            *n += 1;
            let pins = match self.chunks.get(key) {
                None => invalid_op!(
                    "cannot complete a load of chunk {}: the CPU tier does not hold it",
                    key.0
                ),
                Some(c) => u64::from(c.pins),
            };
            if *n > pins {
                invalid_op!(
                    "cannot complete {n} loads of chunk {}: only {pins} loads pin it",
                    key.0
                );
            }
        }
        Ok(())
    }

    // -- access bookkeeping -------------------------------------------------------------------------
    /// Records `rid`'s first access to each key (vLLM's `_record_request_cache_access`): under LRU a
    /// held chunk moves up to `(request rank, -position)` if that is newer; `reused` keys count as reuses
    /// unless this request inserted them.
    /// `absent[i]` (when given) says that `keys[i]` is not held: no rank to move up.
    fn record(
        &mut self,
        rid: u64,
        keys: &[(BlockKey, u64)],
        absent: Option<&[bool]>,
        reused: &[BlockKey],
    ) {
        let arc = self.eviction == Eviction::Arc;
        self.promote(rid);
        let spare = &mut self.spare_orders;
        let a = self.accesses.entry(rid).or_insert_with(|| {
            let mut a = Access::new(arc);
            a.order = spare.pop().unwrap_or_default();
            a
        });
        a.unspan();
        if a.order.is_empty() {
            a.order.reserve(keys.len());
        }
        for (i, &(key, pos)) in keys.iter().enumerate() {
            if !arc && absent.is_some_and(|absent| absent[i]) {
                // LRU, a key not held: no rank moves; recorded unchecked (a repeat of an earlier
                // access is dropped when checked), and the request takes its rank.
                a.push_unchecked(key, pos);
                if a.rank == 0 {
                    self.next_rank += 1;
                    a.rank = self.next_rank;
                }
                continue;
            }
            if !a.first_seen(key, pos) || arc {
                continue;
            }
            // LRU: a held chunk moves up to this request's rank and its position, if newer.
            if a.rank == 0 {
                self.next_rank += 1;
                a.rank = self.next_rank;
            }
            let Some(c) = self.chunks.get_mut(key) else {
                continue;
            };
            let rank = (a.rank, Reverse(pos));
            if c.rank() >= rank {
                continue;
            }
            c.set_rank(rank);
            if self.heap_live && c.evictable() {
                self.heap.push(Reverse((rank, key)));
            }
        }
        if self.eviction == Eviction::Arc {
            // Only ARC reads the reuses (and the inserts and store misses that decide them).
            for &key in reused {
                if !a.has(key, INSERTED) {
                    a.set(key, REUSED);
                }
            }
        }
        self.compact_heap();
    }

    /// Request `rid`'s record under LRU (made on its first access, with a spare vector), ranked: a request
    /// takes the next rank at its first recorded access.
    fn lru_access(&mut self, rid: u64) -> &mut Access {
        self.promote(rid);
        let spare = &mut self.spare_orders;
        let a = self.accesses.entry(rid).or_insert_with(|| {
            let mut a = Access::new(false);
            a.order = spare.pop().unwrap_or_default();
            a
        });
        if a.rank == 0 {
            self.next_rank += 1;
            a.rank = self.next_rank;
        }
        a
    }

    /// Moves `rid`'s record from `spans` to `accesses` (a span kept as the `Access`'s), if it is there.
    #[inline]
    fn promote(&mut self, rid: u64) {
        if !self.spans.is_empty()
            && let Some((rank, span)) = self.spans.remove(&rid)
        {
            let a = self.span_access(rank, span);
            self.accesses.insert(rid, a);
        }
    }

    /// An LRU record of rank `rank` that is the run `span`.
    fn span_access(&mut self, rank: u64, span: Span) -> Access {
        let mut a = Access::new(false);
        a.order = self.spare_orders.pop().unwrap_or_default();
        a.rank = rank;
        a.span = Some(span);
        a
    }

    /// `lru_access(rid)` then `extend_key_run(hi, lo, n, pos)` (its preconditions), kept in `spans` while
    /// the record is that one run; returns the request's rank.
    #[inline]
    fn record_key_run(&mut self, rid: u64, (hi, lo, n, pos): Span) -> u64 {
        if self.accesses.is_empty() || !self.accesses.contains_key(&rid) {
            match self.spans.entry(rid) {
                hash_map::Entry::Vacant(e) => {
                    self.next_rank += 1;
                    e.insert((self.next_rank, (hi, lo, n, pos)));
                    return self.next_rank;
                }
                hash_map::Entry::Occupied(mut e) => {
                    let (rank, (span_hi, span_lo, span_n, span_pos)) = e.get_mut();
                    if *span_hi == hi
                        && span_lo.checked_add(*span_n) == Some(lo)
                        && *span_pos + *span_n == pos
                    {
                        *span_n += n;
                        return *rank;
                    }
                }
            }
        }
        let a = self.lru_access(rid);
        a.extend_key_run(hi, lo, n, pos);
        a.rank
    }

    /// `record` under LRU of keys none of which is held: recorded unchecked, the request ranked.
    fn record_absent(&mut self, rid: u64, keys: &[(BlockKey, u64)]) {
        if keys.is_empty() {
            return;
        }
        self.lru_access(rid).extend_unchecked(keys);
    }

    // -- evictability -------------------------------------------------------------------------------
    /// Chunk `key` (held, of rank `rank`) has become evictable.
    fn mark_evictable(&mut self, key: BlockKey, rank: Rank) {
        self.num_evictable += 1;
        if self.heap_live {
            self.heap.push(Reverse((rank, key)));
            self.compact_heap();
        }
    }

    fn mark_pinned(&mut self) {
        self.num_evictable -= 1;
    }

    /// Rebuilds the LRU heap from the evictable chunks once stale entries make up half of it (vLLM's
    /// `_maybe_compact_heap`), so that it stays O(chunks held).
    fn compact_heap(&mut self) {
        if self.heap.len() < 64.max(2 * self.num_evictable as usize) {
            return;
        }
        self.rebuild_heap();
    }

    /// The heap of the evictable chunks' current entries, each once.
    fn rebuild_heap(&mut self) {
        let live: Vec<_> = self
            .chunks
            .iter()
            .filter(|(_, c)| c.evictable())
            .map(|(key, c)| Reverse((c.rank(), key)))
            .collect();
        self.heap = BinaryHeap::from(live);
    }

    /// Removes `n` evictable chunks not in `protected`, appending their keys to `out` in eviction order;
    /// false (nothing changed) if there are fewer.
    fn evict(&mut self, n: usize, protected: &KeySet, out: &mut Vec<BlockKey>) -> bool {
        match self.eviction {
            Eviction::Lru => self.lru_evict(n, protected, out),
            Eviction::Arc => self.arc_evict(n, protected, out),
        }
    }

    /// The `n` smallest `(rank, key)` among evictable chunks not protected. The heap's entries may be
    /// stale (the key no longer evictable or re-ranked since) or repeated; only the live ones are
    /// taken, each once, so what is chosen depends on the set of live entries alone, not on the heap's
    /// shape (hence compacting it changes no decision).
    fn lru_evict(&mut self, n: usize, protected: &KeySet, out: &mut Vec<BlockKey>) -> bool {
        if !self.heap_live {
            // The first eviction: the heap is built from the live entries, which alone decide.
            self.heap_live = true;
            self.rebuild_heap();
        }
        let mut selected: Vec<(Rank, BlockKey)> = Vec::with_capacity(n);
        let mut deferred = Vec::new();
        let mut chosen = KeySet::default();
        while selected.len() < n {
            let Some(Reverse(entry)) = self.heap.pop() else {
                break;
            };
            let (rank, key) = entry;
            if !self
                .chunks
                .get(key)
                .is_some_and(|c| c.evictable() && c.rank() == rank)
                || chosen.contains(&key)
            {
                continue;
            }
            if protected.contains(&key) {
                deferred.push(entry);
                continue;
            }
            selected.push(entry);
            chosen.insert(key);
        }
        self.heap.extend(deferred.into_iter().map(Reverse));
        if selected.len() < n {
            self.heap.extend(selected.into_iter().map(Reverse));
            return false;
        }
        for (_, key) in selected {
            self.chunks.remove(key);
            out.push(key);
        }
        self.compact_heap();
        true
    }

    /// ARC's choice of `n` victims: from T1 while its (virtual) size is at least the target's integer
    /// part, else from T2, else from T1; then each victim becomes a ghost (T1 -> B1, T2 -> B2) and the
    /// ghost lists are trimmed to `capacity` from their least recent end.
    fn arc_evict(&mut self, n: usize, protected: &KeySet, out: &mut Vec<BlockKey>) -> bool {
        // Python's int(target): the target is never negative, so truncation is the floor.
        let target = self.target as u64;
        let mut t1_size = self.t1.len() as u64;
        // Where each list's scan resumes (None: exhausted). A scan passes over chunks that stay
        // unevictable for the whole call (not ready, pinned, protected) and the ones already taken,
        // so resuming after the last pick finds what the spec's scan from the head finds.
        let mut from1 = Some(0);
        let mut from2 = Some(0);
        let mut picks: Vec<(BlockKey, bool)> = Vec::with_capacity(n);
        for _ in 0..n {
            let mut pick = None;
            if t1_size >= target {
                pick = self.arc_pick(true, protected, &mut from1);
            }
            if pick.is_none() {
                pick = self
                    .arc_pick(false, protected, &mut from2)
                    .or_else(|| self.arc_pick(true, protected, &mut from1));
            }
            let Some(pick) = pick else {
                return false;
            };
            t1_size -= u64::from(pick.1);
            picks.push(pick);
        }
        for (key, from_t1) in picks {
            if from_t1 {
                self.t1.remove(key);
                self.b1.set(key, ());
            } else {
                self.t2.remove(key);
                self.b2.set(key, ());
            }
            self.chunks.remove(key);
            out.push(key);
        }
        for ghost in [&mut self.b1, &mut self.b2] {
            while ghost.len() as u64 > self.capacity {
                ghost.pop_front();
            }
        }
        true
    }

    /// The least recent evictable, unprotected chunk of T1 (`in_t1`) or T2 at or after stamp `*from`;
    /// moves `*from` past it, or to None when there is none.
    fn arc_pick(
        &self,
        in_t1: bool,
        protected: &KeySet,
        from: &mut Option<u64>,
    ) -> Option<(BlockKey, bool)> {
        let list = if in_t1 { &self.t1 } else { &self.t2 };
        let start = (*from)?;
        for (stamp, key) in list.since(start) {
            if self.chunks.get(key).is_some_and(Chunk::evictable) && !protected.contains(&key) {
                *from = Some(stamp + 1);
                return Some((key, in_t1));
            }
        }
        *from = None;
        None
    }

    /// ARC learns from its ghosts before a store inserts (`on_store_miss`), tail to head: a B1 hit
    /// raises the target by max(1, |B2|/|B1|) up to `capacity`, a B2 hit lowers it by max(1, |B1|/|B2|)
    /// down to 0; the ghost moves to its list's most recent end.
    fn arc_store_misses(&mut self, keys: &[BlockKey]) {
        for &key in keys.iter().rev() {
            if self.b1.contains(key) {
                let delta = f64::max(1.0, self.b2.len() as f64 / self.b1.len() as f64);
                self.target = f64::min(self.target + delta, self.capacity as f64);
                self.b1.move_to_end(key);
            } else if self.b2.contains(key) {
                let delta = f64::max(1.0, self.b1.len() as f64 / self.b2.len() as f64);
                self.target = f64::max(self.target - delta, 0.0);
                self.b2.move_to_end(key);
            }
        }
    }

    // -- loads and stores ---------------------------------------------------------------------------
    /// Pins ready chunks for a load (`prepare_load`) and records the accesses; `keys` are
    /// `(key, position)` pairs, the position the chunk's index in request `rid`.
    ///
    /// # Panics
    /// If a key is not held or is pending ([`CpuTier::check_prepare_load`] says so first).
    pub fn prepare_load(&mut self, rid: u64, keys: &[(BlockKey, u64)]) {
        for &(key, _) in keys {
            let c = self
                .chunks
                .get_mut(key)
                .expect("prepare_load of a chunk the CPU tier does not hold");
            assert!(c.ready, "prepare_load of a pending chunk");
            c.pins = c
                .pins
                .checked_add(1)
                .expect("fewer than 2^16 loads pin a chunk");
            if c.pins == 1 {
                self.mark_pinned();
            }
        }
        let reused: Vec<BlockKey> = keys.iter().map(|&(k, _)| k).collect();
        self.record(rid, keys, None, &reused);
        self.debug_check();
    }

    /// A load of `keys` is done: each unpinned once; a chunk no load pins any more is evictable again.
    ///
    /// # Panics
    /// If a key is not held or not pinned ([`CpuTier::check_complete_load`] says so first).
    pub fn complete_load(&mut self, keys: &[BlockKey]) {
        for &key in keys {
            let c = self
                .chunks
                .get_mut(key)
                .expect("complete_load of a chunk the CPU tier does not hold");
            assert!(c.pins > 0, "complete_load of a chunk no load pins");
            c.pins -= 1;
            if c.pins == 0 {
                let rank = c.rank();
                self.mark_evictable(key, rank);
            }
        }
        self.debug_check();
    }

    /// Offers request `rid`'s chunks (`prepare_store`; `(key, position)` pairs). Keys the tier lacks
    /// (and, with a threshold, has seen offered often enough) are stored as pending chunks, evicting
    /// others if needed, never one offered here. `Some(())`: `stored` holds the keys stored now, in offer
    /// order, and `evicted` the keys evicted for them, in eviction order (both are cleared first).
    /// `None` when the tier cannot make room: nothing is stored or evicted, but the offers are counted
    /// and the accesses recorded, as in vLLM.
    pub fn prepare_store(
        &mut self,
        rid: u64,
        keys: &[(BlockKey, u64)],
        stored: &mut Vec<BlockKey>,
        evicted: &mut Vec<BlockKey>,
    ) -> Option<()> {
        stored.clear();
        evicted.clear();
        if self.threshold > 0 {
            self.count_offers(keys);
        }
        // Scratch kept between calls: the keys to store, the ready ones offered again, the accesses.
        let mut to_store = std::mem::take(&mut self.scratch_store);
        let mut ready_existing = std::mem::take(&mut self.scratch_ready);
        let mut accessed = std::mem::take(&mut self.scratch_accessed);
        let mut absent = std::mem::take(&mut self.scratch_absent);
        to_store.clear();
        ready_existing.clear();
        accessed.clear();
        absent.clear();
        if self.eviction == Eviction::Lru
            && self.threshold == 0
            && let Some((hi, lo, n)) = run_of(keys.iter().map(|&(k, _)| k))
            && self.chunks.none_held(hi, lo, n as u64)
        {
            // One run of keys none of which is held (a request's private chunks): all to store.
            self.scratch_store = to_store;
            self.scratch_ready = ready_existing;
            self.scratch_accessed = accessed;
            self.scratch_absent = absent;
            let result = self.store_new_run(rid, keys, (hi, lo), stored, evicted);
            self.debug_check();
            return result;
        }
        let mut skipped = 0;
        let (threshold, counts) = (self.threshold, &self.counts);
        self.chunks
            .visit(keys.iter().map(|&(key, _)| key), |i, key, found| {
                let pos = keys[i].1;
                match found {
                    None => {
                        if threshold > 0 && counts.get(key).copied().unwrap_or(0) < threshold {
                            skipped += 1;
                            return;
                        }
                        to_store.push((key, pos));
                        if !ready_existing.is_empty() {
                            absent.push(true);
                            accessed.push((key, pos));
                        }
                    }
                    Some(c) if c.ready => {
                        if ready_existing.is_empty() {
                            // The accesses so far were all keys to store.
                            absent.resize(to_store.len(), true);
                            accessed.extend_from_slice(&to_store);
                        }
                        ready_existing.push(key);
                        absent.push(false);
                        accessed.push((key, pos));
                    }
                    Some(_) => {}
                }
                // Stored or reused: an access (a repeated key has the same fate each time); while
                // every access is a key to store, `to_store` holds them (`accessed` stays empty).
            });
        self.num_stores_skipped += skipped;
        if self.eviction == Eviction::Arc {
            // Only ARC learns from store misses.
            let a = self
                .accesses
                .entry(rid)
                .or_insert_with(|| Access::new(true));
            let misses: Vec<BlockKey> = to_store
                .iter()
                .map(|&(k, _)| k)
                .filter(|&k| !a.has(k, STORE_MISS))
                .collect();
            for &(key, _) in &to_store {
                a.set(key, STORE_MISS);
            }
            if !misses.is_empty() {
                self.arc_store_misses(&misses);
            }
        }
        if ready_existing.is_empty() {
            // Every access a key to store (none held): under LRU nothing is re-ranked.
            if self.eviction == Eviction::Lru {
                self.record_absent(rid, &to_store);
            } else {
                absent.resize(to_store.len(), true);
                self.record(rid, &to_store, Some(&absent), &ready_existing);
            }
        } else {
            self.record(rid, &accessed, Some(&absent), &ready_existing);
        }
        let result = self.insert_stored(rid, keys, &to_store, stored, evicted);
        self.scratch_store = to_store;
        self.scratch_ready = ready_existing;
        self.scratch_accessed = accessed;
        self.scratch_absent = absent;
        self.debug_check();
        result
    }

    /// `prepare_store` of the `n` >= 1 keys `(hi, lo..lo + n)` at positions `pos..pos + n` (a request's
    /// private chunks), the same decisions: `Some(true)` when all of them were stored (as a run:
    /// `stored` left empty), `Some(false)` when `prepare_store` decided (`offer` then holds the keys
    /// offered and `stored` those stored), None when there is no room.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_store_run(
        &mut self,
        rid: u64,
        (hi, lo, n): (u64, u64, u64),
        pos: u64,
        offer: &mut Vec<(BlockKey, u64)>,
        stored: &mut Vec<BlockKey>,
        evicted: &mut Vec<BlockKey>,
    ) -> Option<bool> {
        stored.clear();
        evicted.clear();
        if self.eviction == Eviction::Lru
            && self.threshold == 0
            && n >= 1
            && n <= self.capacity - self.chunks.len() as u64
            && lo.checked_add(n - 1).is_some()
            && let (Ok(n32), Ok(pos32)) = (u32::try_from(n), u32::try_from(pos))
            && pos32.checked_add(n32).is_some()
            && self.chunks.none_held(hi, lo, n)
        {
            // `store_new_run`'s case (one run of keys none held, room for them), its keys unlisted.
            let req = self.record_key_run(rid, (hi, lo, n, pos));
            self.chunks.insert_pending_run(hi, lo, n32, req, pos32);
            self.debug_check();
            return Some(true);
        }
        offer.clear();
        offer.extend((0..n).map(|i| (run_key(hi, lo.wrapping_add(i)), pos + i)));
        self.prepare_store(rid, offer, stored, evicted)
            .map(|()| false)
    }

    /// `prepare_store` of `keys`, a run of keys starting at `(hi, lo)` none of which is held: recorded,
    /// and stored if there is room without evicting (else as `insert_stored` does).
    fn store_new_run(
        &mut self,
        rid: u64,
        keys: &[(BlockKey, u64)],
        (hi, lo): (u64, u64),
        stored: &mut Vec<BlockKey>,
        evicted: &mut Vec<BlockKey>,
    ) -> Option<()> {
        if (keys.len() as u64) > self.capacity - self.chunks.len() as u64 {
            self.record_absent(rid, keys);
            return self.insert_stored(rid, keys, keys, stored, evicted);
        }
        let a = self.lru_access(rid);
        a.extend_run(keys);
        let req = a.rank;
        let (first, last) = (keys[0].1, keys[keys.len() - 1].1);
        if last.checked_sub(first) == Some(keys.len() as u64 - 1)
            && keys.windows(2).all(|w| w[1].1 == w[0].1 + 1)
            && let (Ok(n), Ok(pos)) = (u32::try_from(keys.len()), u32::try_from(first))
            && pos.checked_add(n).is_some()
        {
            // Positions up by one as the keys (a request's private chunks): a run of slots.
            self.chunks.insert_pending_run(hi, lo, n, req, pos);
        } else {
            self.chunks.insert_run(
                hi,
                lo,
                keys.iter().map(|&(_, pos)| Chunk {
                    req,
                    pos: u32::try_from(pos).expect("a chunk position below 2^32"),
                    ..Chunk::default()
                }),
            );
        }
        stored.extend(keys.iter().map(|&(k, _)| k));
        Some(())
    }

    /// `prepare_store`'s second half: room for `to_store` (evicting chunks not offered in `keys`) and
    /// the pending chunks; None if there is no room.
    fn insert_stored(
        &mut self,
        rid: u64,
        keys: &[(BlockKey, u64)],
        to_store: &[(BlockKey, u64)],
        stored: &mut Vec<BlockKey>,
        evicted: &mut Vec<BlockKey>,
    ) -> Option<()> {
        if to_store.is_empty() {
            return Some(());
        }
        let need = to_store.len() as i128 - (i128::from(self.capacity) - self.chunks.len() as i128);
        if need > 0 {
            if need > i128::from(self.num_evictable) {
                return None;
            }
            let protected: KeySet = keys.iter().map(|&(k, _)| k).collect();
            if !self.evict(need as usize, &protected, evicted) {
                return None;
            }
            self.num_evictable -= evicted.len() as u64;
            self.num_evicted += evicted.len() as u64;
        }
        let a = self.accesses.get_mut(&rid).expect("recorded above");
        let mut req = 0; // (the LRU's rank; unused under ARC)
        match self.eviction {
            Eviction::Lru => {
                if a.rank == 0 {
                    self.next_rank += 1;
                    a.rank = self.next_rank;
                }
                req = a.rank;
            }
            Eviction::Arc => {
                for &(key, _) in to_store {
                    self.b1.remove(key);
                    self.b2.remove(key);
                    self.t1.set(key, ());
                    a.set(key, INSERTED);
                }
            }
        }
        let chunk = |pos: u64| Chunk {
            req,
            pos: u32::try_from(pos).expect("a chunk position below 2^32"),
            ..Chunk::default()
        };
        if let Some((hi, lo, _)) = run_of(to_store.iter().map(|&(k, _)| k)) {
            // (none of them held: a prepared store's keys are absent)
            self.chunks
                .insert_run(hi, lo, to_store.iter().map(|&(_, pos)| chunk(pos)));
        } else {
            self.chunks
                .insert_many(to_store.iter().map(|&(key, pos)| (key, chunk(pos))));
        }
        stored.extend(to_store.iter().map(|&(key, _)| key));
        Some(())
    }

    /// Stores of `keys` are done: each pending chunk among them becomes ready (and evictable); keys
    /// not held or already ready are ignored.
    pub fn complete_store(&mut self, keys: &[BlockKey]) {
        let (heap, live) = (&mut self.heap, self.heap_live);
        let mut ready = 0;
        if !live
            && let Some((hi, lo, n)) = run_of(keys.iter().copied())
            && let Some(ready) = self.chunks.ready_run(hi, lo, n)
        {
            // One run inside its group's slots, no heap to feed: the slots in a row (a run of
            // slots in one write).
            self.num_evictable += ready;
            self.debug_check();
            return;
        }
        self.chunks.visit_mut(keys.iter().copied(), |key, c| {
            if !c.ready {
                c.ready = true;
                ready += 1;
                if live {
                    heap.push(Reverse((c.rank(), key)));
                }
            }
        });
        self.num_evictable += ready;
        self.compact_heap();
        self.debug_check();
    }

    /// `complete_store` of the keys `(hi, lo..lo + n)`.
    pub fn complete_store_run(&mut self, hi: u64, lo: u64, n: u64) {
        if !self.heap_live
            && let Some(ready) = self.chunks.ready_run(hi, lo, n as usize)
        {
            // (`complete_store`'s case of one run inside its group's slots, no heap to feed)
            self.num_evictable += ready;
            self.debug_check();
            return;
        }
        let keys: Vec<BlockKey> = (0..n).map(|i| run_key(hi, lo.wrapping_add(i))).collect();
        self.complete_store(&keys);
    }

    /// vLLM's `_record_accesses`: one more offer of each key, in a tracker of `tracker` keys. Keys
    /// already tracked move to its most recent end and are protected; a new key displaces the least
    /// recent unprotected one when the tracker is full, or is not tracked if none is left.
    fn count_offers(&mut self, keys: &[(BlockKey, u64)]) {
        let mut protected = KeySet::default();
        for &(key, _) in keys {
            if self.counts.move_to_end(key) {
                if let Some((_, n)) = self.counts.slot.get_mut(&key) {
                    *n += 1;
                }
                protected.insert(key);
            }
        }
        let mut unprotected = self.counts.len() - protected.len();
        for &(key, _) in keys {
            if self.counts.contains(key) {
                continue;
            }
            if self.counts.len() >= self.tracker {
                if unprotected == 0 {
                    continue;
                }
                self.counts.pop_front();
                unprotected -= 1;
            }
            self.counts.set(key, 1);
        }
    }

    /// Request `rid` finished (`on_request_finished`): its keys, ordered by position (ties in order of
    /// first access), are re-ranked from its last chunk to its first, so its first is the most recent.
    /// LRU: each held one gets a fresh rank. ARC: one it only inserted moves to the most recent end of
    /// its list; one it reused moves from T1 to T2, or to T2's most recent end. Its record is dropped.
    pub fn finish(&mut self, rid: u64) {
        let mut a = if !self.spans.is_empty()
            && let Some((rank, span @ (hi, lo, n, _))) = self.spans.remove(&rid)
        {
            if !self.heap_live
                && self
                    .chunks
                    .rerank_run(hi, lo, n as usize, &mut self.next_rank)
            {
                // (as below, with no record to drop)
                self.debug_check();
                return;
            }
            self.span_access(rank, span)
        } else {
            let Some(a) = self.accesses.remove(&rid) else {
                return;
            };
            a
        };
        if self.eviction == Eviction::Lru
            && !self.heap_live
            && let Some((hi, lo, n, _)) = a.span
            && self
                .chunks
                .rerank_run(hi, lo, n as usize, &mut self.next_rank)
        {
            // A record of one run of keys at consecutive positions (in order of position), inside
            // its group's slots, no heap to feed: re-ranked as below, the record never listed.
            self.spare_orders.push(std::mem::take(&mut a.order));
            self.debug_check();
            return;
        }
        let mut ordered = a.take_distinct();
        // One run of keys in order of position (a request's private chunks), or sorted by position.
        let run = run_in_order(&ordered);
        if run.is_none() && !ordered.is_sorted_by_key(|&(_, pos)| pos) {
            ordered.sort_by_key(|&(_, pos)| pos); // stable, as Python's sorted
        }
        if self.eviction == Eviction::Lru
            && !self.heap_live
            && let Some((hi, lo, n)) = run
            && self.chunks.rerank_run(hi, lo, n, &mut self.next_rank)
        {
            // One run inside its group's slots (in order of position), no heap to feed: re-ranked
            // from the last slot to the first (a run of slots in one write).
        } else if self.eviction == Eviction::Lru {
            let (heap, live, next_rank) = (&mut self.heap, self.heap_live, &mut self.next_rank);
            self.chunks
                .visit_mut(ordered.iter().rev().map(|&(key, _)| key), |key, c| {
                    *next_rank += 1;
                    let rank = (*next_rank, Reverse(0));
                    c.set_rank(rank);
                    if live && c.evictable() {
                        heap.push(Reverse((rank, key)));
                    }
                });
        }
        for &(key, _) in ordered.iter().rev() {
            match self.eviction {
                Eviction::Lru => break,
                Eviction::Arc => {
                    if !self.chunks.contains(key) {
                        continue;
                    }
                    let reused = a.has(key, REUSED);
                    if a.has(key, INSERTED) && !reused {
                        if !self.t1.move_to_end(key) {
                            self.t2.move_to_end(key);
                        }
                    } else if reused {
                        if self.t1.remove(key).is_some() {
                            self.t2.set(key, ());
                        } else {
                            self.t2.move_to_end(key);
                        }
                    }
                }
            }
        }
        ordered.clear();
        self.spare_orders.push(ordered); // for a later request's record
        self.compact_heap();
        self.debug_check();
    }

    // -- checking -----------------------------------------------------------------------------------
    #[inline]
    fn debug_check(&self) {
        #[cfg(debug_assertions)]
        if let Err(e) = self.check_invariants() {
            panic!("{e}");
        }
    }

    /// Checks the invariants listed on [`CpuTier`]; `KvError::Internal` (a bug) if one fails.
    pub fn check_invariants(&self) -> Result<()> {
        self.invariants()
            .map_err(|m| KvError::Internal(format!("CPU tier invariant broken: {m}")))
    }

    fn invariants(&self) -> std::result::Result<(), String> {
        self.chunks.check()?;
        let evictable = self.chunks.values().filter(|c| c.evictable()).count() as u64;
        if evictable != self.num_evictable {
            return Err(format!(
                "num_evictable is {} but {evictable} chunks are evictable",
                self.num_evictable
            ));
        }
        if self.chunks.len() as u64 > self.capacity {
            return Err(format!(
                "{} chunks held, capacity {}",
                self.chunks.len(),
                self.capacity
            ));
        }
        self.counts.check("the tracker")?;
        if self.counts.len() > self.tracker || (self.threshold == 0 && self.counts.len() > 0) {
            return Err(format!(
                "the tracker holds {} keys (size {}, threshold {})",
                self.counts.len(),
                self.tracker,
                self.threshold
            ));
        }
        if let Some(rid) = self
            .spans
            .keys()
            .find(|rid| self.accesses.contains_key(rid))
        {
            return Err(format!("request {rid} has two records"));
        }
        if self.eviction == Eviction::Arc && !self.spans.is_empty() {
            return Err("a record kept as a span under ARC".to_string());
        }
        for (rid, a) in &self.accesses {
            let checked = &a.order[..a.checked];
            let seen = if a.mapped {
                a.flags.values().filter(|&&f| f & SEEN != 0).count()
            } else {
                checked.iter().map(|&(k, _)| k).collect::<KeySet>().len()
            };
            if a.checked != seen
                || checked.iter().any(|&(k, _)| !a.seen(k))
                || (self.eviction == Eviction::Arc && a.checked != a.order.len())
            {
                return Err(format!(
                    "request {rid}'s record of first accesses is inconsistent"
                ));
            }
        }
        match self.eviction {
            Eviction::Lru => self.lru_invariants(),
            Eviction::Arc => self.arc_invariants(),
        }
    }

    fn lru_invariants(&self) -> std::result::Result<(), String> {
        if self.t1.len() + self.t2.len() + self.b1.len() + self.b2.len() > 0 || self.target != 0.0 {
            return Err("ARC state under LRU".into());
        }
        if !self.heap_live {
            return if self.heap.is_empty() {
                Ok(())
            } else {
                Err("the LRU heap holds entries before it is live".into())
            };
        }
        let live: HashSet<(Rank, BlockKey)> = self.heap.iter().map(|e| e.0).collect();
        for (key, c) in self.chunks.iter() {
            if c.evictable() && !live.contains(&(c.rank(), key)) {
                return Err(format!(
                    "evictable chunk {} has no current heap entry",
                    key.0
                ));
            }
        }
        Ok(())
    }

    fn arc_invariants(&self) -> std::result::Result<(), String> {
        if self.heap_live || !self.heap.is_empty() {
            return Err("LRU state under ARC".into());
        }
        for (list, name) in [
            (&self.t1, "T1"),
            (&self.t2, "T2"),
            (&self.b1, "B1"),
            (&self.b2, "B2"),
        ] {
            list.check(name)?;
        }
        if self.t1.len() + self.t2.len() != self.chunks.len()
            || self.t1.keys().any(|k| self.t2.contains(k))
            || self
                .chunks
                .keys()
                .any(|k| !self.t1.contains(k) && !self.t2.contains(k))
        {
            return Err("the chunks held are not T1 and T2, disjoint".into());
        }
        for (ghost, other, name) in [(&self.b1, &self.b2, "B1"), (&self.b2, &self.b1, "B2")] {
            if ghost.len() as u64 > self.capacity {
                return Err(format!(
                    "{name} holds {} ghosts, capacity {}",
                    ghost.len(),
                    self.capacity
                ));
            }
            if ghost
                .keys()
                .any(|k| other.contains(k) || self.chunks.contains(k))
            {
                return Err(format!("a ghost of {name} is held or in the other list"));
            }
        }
        if !(0.0..=self.capacity as f64).contains(&self.target) {
            return Err(format!(
                "target {} outside 0..={}",
                self.target, self.capacity
            ));
        }
        Ok(())
    }
}
