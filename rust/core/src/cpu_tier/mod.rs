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
//! The LRU heap is built only at the first eviction (a tier that never fills orders nothing, but logs
//! the spans of the runs its finishes re-rank, in order: `CpuTier::log`, at most twice the groups), from
//! that log and the chunks' ranks, which live in the chunks' slots (`Chunks`: a row's private chunks
//! share one slot of the rows' window, `rows.rs` in pages of `paged.rs`, and one vector or run of
//! slots).

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;

use crate::block_pool::IdHasher;
use crate::{BlockKey, Result, invalid_arg, invalid_op};

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

/// The first of the rows' names (`row_name`).
const ROW_NAMES: u64 = 0x7469_6572_5f70_7276;
/// Rows named: fewer than 2^48.
const MAX_ROWS: u64 = 1 << 48;

/// A name for row `row` (< 2^48) as a key's upper half and a request's id: distinct for distinct rows,
/// and the tier keeps what it holds by such names in a window indexed by row (`rows.rs`). The engine
/// names a request's private chunks and the request itself so (DESIGN.md §CPU tier); any other number
/// is a name too, kept in a hash table.
#[inline]
pub fn row_name(row: usize) -> u64 {
    ROW_NAMES.wrapping_add(row as u64)
}

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
mod check;
mod chunks;
mod evict;
mod order;
mod paged;
mod records;
mod rows;
#[cfg(test)]
mod tests;

use access::{Access, INSERTED, REUSED, Recency, STORE_MISS};
use chunks::{Chunk, Chunks, run_in_order, run_key, run_of};
use order::{Order, RankQueue};

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
    /// Offers a key needs before a store admits it; 0: no threshold (vLLM's `store_threshold` < 2).
    threshold: u64,
    tracker: usize,
    counts: Recency<u64>,
    // LRU.
    next_rank: u64,
    heap: RankQueue,
    /// Whether `heap` is kept (from the first eviction on): before, pushes are skipped.
    heap_live: bool,
    /// Before `heap_live`, under LRU: the spans of the runs finishes re-ranked, in order (a finish's
    /// ranks are the newest), some stale since; the first eviction builds the order from them and
    /// the entries they miss (`build_heap`). At most twice the groups held (`compact_log`).
    log: Vec<order::Span>,
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
    /// `lru_evict`'s scratch.
    scratch_evict: Vec<(order::Span, usize)>,
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
            threshold: if store_threshold >= 2 {
                store_threshold
            } else {
                0
            },
            tracker,
            counts: Recency::default(),
            next_rank: 0,
            heap: RankQueue::new(),
            heap_live: false,
            log: Vec::new(),
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
            scratch_evict: Vec::new(),
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
        if self.try_store_run(rid, (hi, lo, n), pos, evicted) {
            return Some(true);
        }
        offer.clear();
        offer.extend((0..n).map(|i| (run_key(hi, lo.wrapping_add(i)), pos + i)));
        self.prepare_store(rid, offer, stored, evicted)
            .map(|()| false)
    }

    /// `prepare_store_run`'s common case, alone: true if the `n` keys `(hi, lo..lo + n)` at positions
    /// `pos..` were stored whole as pending chunks (none held, room for them or chunks enough to evict,
    /// LRU, no threshold: the decision `prepare_store` makes, a request's record made or extended, the
    /// chunks evicted for them appended to `evicted` in eviction order); false, nothing changed, if
    /// `prepare_store_run` must decide otherwise.
    #[inline]
    pub fn try_store_run(
        &mut self,
        rid: u64,
        (hi, lo, n): (u64, u64, u64),
        pos: u64,
        evicted: &mut Vec<BlockKey>,
    ) -> bool {
        if !(self.eviction == Eviction::Lru
            && self.threshold == 0
            && n >= 1
            && lo.checked_add(n - 1).is_some()
            && self.chunks.singles.is_empty())
        {
            return false;
        }
        let (Ok(n32), Ok(pos32)) = (u32::try_from(n), u32::try_from(pos)) else {
            return false;
        };
        if pos32.checked_add(n32).is_none() {
            return false;
        }
        // `store_new_run`'s case (one run of keys none held), its keys unlisted: the request's own
        // keys (its id their upper half) with its record in their group, else the record in
        // `accesses`.
        let own = rid == hi && (self.accesses.is_empty() || !self.accesses.contains_key(&rid));
        let room = self.capacity - self.chunks.len() as u64;
        if n > room {
            // `insert_stored`'s eviction first (none of the keys held, so none protected), once
            // the store is known to go through.
            let fits = if own {
                self.chunks.own_run_fits(hi, lo, n, pos)
            } else {
                self.chunks.none_held(hi, lo, n)
            };
            let at = evicted.len();
            if !fits
                || n - room > self.num_evictable
                || !self.evict((n - room) as usize, &KeySet::default(), evicted)
            {
                return false;
            }
            let num = (evicted.len() - at) as u64;
            self.num_evictable -= num;
            self.num_evicted += num;
        }
        if own {
            if self
                .chunks
                .store_own_run((hi, lo, n32, pos32), &mut self.next_rank)
            {
                self.debug_check();
                return true;
            }
        } else if self.chunks.none_held(hi, lo, n) {
            let a = self.lru_access(rid);
            a.extend_key_run(hi, lo, n, pos);
            let req = a.rank;
            self.chunks.insert_pending_run(hi, lo, n32, req, pos32);
            self.debug_check();
            return true;
        }
        debug_assert!(n <= room, "a store evicted for is made");
        false
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
        if let Some((hi, lo, n)) = run_of(keys.iter().copied())
            && let Some(ready) = self.chunks.ready_run(hi, lo, n, live.then_some(&mut *heap))
        {
            // One run inside its group's slots: the slots in a row (a run of slots in one write,
            // one span of the eviction order).
            self.num_evictable += ready;
            self.compact_heap();
            self.debug_check();
            return;
        }
        // (from the last key: a store's chunks rank down by position, so the eviction order takes
        // their entries in order, `RankQueue`)
        self.chunks.visit_mut(keys.iter().rev().copied(), |key, c| {
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
        let live = self.heap_live;
        if let Some(ready) =
            self.chunks
                .ready_run(hi, lo, n as usize, live.then_some(&mut self.heap))
        {
            // (`complete_store`'s case of one run inside its group's slots)
            self.num_evictable += ready;
            if live {
                self.compact_heap();
            }
            self.debug_check();
            return;
        }
        let keys: Vec<BlockKey> = (0..n).map(|i| run_key(hi, lo.wrapping_add(i))).collect();
        self.complete_store(&keys);
    }

    /// Request `rid` finished (`on_request_finished`): its keys, ordered by position (ties in order of
    /// first access), are re-ranked from its last chunk to its first, so its first is the most recent.
    /// LRU: each held one gets a fresh rank. ARC: one it only inserted moves to the most recent end of
    /// its list; one it reused moves from T1 to T2, or to T2's most recent end. Its record is dropped.
    pub fn finish(&mut self, rid: u64) {
        let mut a = if !self.chunks.recs.is_empty()
            && let Some(rec) = self.chunks.recs.remove(rid)
        {
            // A record of one run of its own keys (`Chunks::recs`): re-ranked in their group as below.
            let (live, lru) = (self.heap_live, self.eviction == Eviction::Lru);
            if let Some(g) = self.chunks.groups.get_mut(rid)
                && g.rerank(
                    rid,
                    rec.lo,
                    rec.n as usize,
                    &mut self.next_rank,
                    Order::new(live, lru, &mut self.heap, &mut self.log),
                )
            {
                if live {
                    self.compact_heap();
                } else {
                    self.compact_log();
                }
                self.debug_check();
                return;
            }
            self.span_access(rec.rank.get(), (rid, rec.lo, rec.n, rec.pos))
        } else {
            let Some(a) = self.accesses.remove(&rid) else {
                return;
            };
            a
        };
        let live = self.heap_live;
        if self.eviction == Eviction::Lru
            && let Some((hi, lo, n, _)) = a.span
            && self.chunks.rerank_run(
                hi,
                lo,
                n as usize,
                &mut self.next_rank,
                Order::new(live, true, &mut self.heap, &mut self.log),
            )
        {
            // A record of one run of keys at consecutive positions (in order of position), inside
            // its group's slots, no heap to feed: re-ranked as below, the record never listed.
            self.spare_orders.push(std::mem::take(&mut a.order));
            self.compact_heap();
            self.compact_log();
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
            && let Some((hi, lo, n)) = run
            && self.chunks.rerank_run(
                hi,
                lo,
                n,
                &mut self.next_rank,
                Order::new(live, true, &mut self.heap, &mut self.log),
            )
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
        self.compact_log();
        self.debug_check();
    }
}
