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
mod group;
mod order;
mod own;
pub(crate) use own::OWN_FRESH;
mod paged;
mod records;
mod rows;
mod stores;
#[cfg(test)]
mod tests;

use access::{Access, INSERTED, REUSED, Recency};
use chunks::Chunks;
use group::{run_in_order, run_key};
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
///
/// Laid out by hand (`repr(C)`; the assertions after it check the offsets): what the engine's usual
/// store, completion and finish read (the counts and the policy in line 0, the own runs, the lane, the
/// chunks' count and singles) in its first four cache lines, the engine's `Tier` placing it on a line's
/// start (results/README.md §CPU tier, "The tier's hot fields together").
#[derive(Clone, Debug)]
#[repr(C)]
pub struct CpuTier {
    capacity: u64,
    num_evictable: u64,
    // LRU.
    next_rank: u64,
    num_evicted: u64,
    /// The chunks the lane holds.
    lane_len: u64,
    /// Offers a key needs before a store admits it; 0: no threshold (vLLM's `store_threshold` < 2).
    threshold: u64,
    eviction: Eviction,
    /// Whether `heap` is kept (from the first eviction on): before, pushes are skipped.
    heap_live: bool,
    /// Whether an eviction lists the keys it takes (`evict`'s `out`): the engine only counts them
    /// (`num_evicted`), so it turns the listing off (`count_evictions_only`).
    list_evicted: bool,
    /// vLLM 0.34.0's rule: a request counts a key toward the threshold once (`count_per_request`).
    per_request: bool,
    num_stores_skipped: u64,
    /// Running requests' own runs, outside the groups (`own.rs`: LRU, no threshold; after the first
    /// eviction found through their index).
    owns: own::Owns,
    /// Under LRU, the *retired* runs (`finish_unnamed`): ready runs of requests that finished and whose
    /// keys nobody names again, each the span its finish's re-ranking made, oldest first (a finish's
    /// ranks are the newest, so the lane is in order); their chunks are held and evictable, in no
    /// group. What remains of the front span after the evictions that took its least entries.
    lane: paged::Paged<order::Span>,
    chunks: Chunks,
    accesses: HashMap<u64, Access, Hasher>,
    tracker: usize,
    counts: Recency<u64>,
    /// Per request (under `per_request` and a threshold), the keys it counted (vLLM's
    /// `_RequestCacheAccess.counted_keys`), dropped at its `finish`.
    counted: HashMap<u64, KeySet, Hasher>,
    heap: RankQueue,
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

// The layout the engine's usual store, completion and finish rely on: their fields in lines 0-3.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(CpuTier, num_stores_skipped) + 8 <= 64);
    assert!(
        offset_of!(CpuTier, chunks)
            + offset_of!(Chunks, singles)
            + size_of::<KeyMap<group::Chunk>>()
            <= 256
    );
};

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
            per_request: false,
            counted: HashMap::default(),
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
            list_evicted: true,
            num_stores_skipped: 0,
            scratch_store: Vec::new(),
            scratch_ready: Vec::new(),
            scratch_accessed: Vec::new(),
            scratch_absent: Vec::new(),
            scratch_evict: Vec::new(),
            spare_orders: Vec::new(),
            lane: paged::Paged::default(),
            lane_len: 0,
            owns: own::Owns::default(),
        }
    }

    // -- queries -----------------------------------------------------------------------------------
    /// [`MISS`], [`HIT`] (ready) or [`PENDING`] (its store in flight).
    #[inline]
    pub fn lookup(&self, key: BlockKey) -> u8 {
        self.chunks.state(key)
    }

    /// Chunks held, pending ones included.
    #[inline]
    pub fn used(&self) -> u64 {
        self.chunks.len() as u64 + self.lane_len + self.owns.len
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

    /// The threshold counts a key once per request (vLLM 0.34.0: a request's re-offers, after a store
    /// with no room or a preemption, do not count again, and its skips count once a key), not at every
    /// offer (0.33.0, the default).
    pub fn count_per_request(&mut self) {
        self.per_request = true;
    }

    /// LRU evictions stop listing the keys they take in a store's `evicted` (ARC's still do): their
    /// count is `num_evicted`'s change.
    pub fn count_evictions_only(&mut self) {
        self.list_evicted = false;
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
                .chain(self.lane.iter().flat_map(|s| {
                    s.entries(s.len())
                        .map(|((req, Reverse(pos)), k)| (k, req, -i128::from(pos)))
                }))
                .chain(self.owns.iter().flat_map(|o| {
                    (o.lo..o.lo + o.n)
                        .map(move |p| (run_key(o.hi, u64::from(p)), o.rank, -i128::from(p)))
                }))
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

    /// [`CpuTier::finish`] of a request none of whose keys named by `rid` (its upper half) is named
    /// again by anyone (the engine's request, its private chunks named by its row): under LRU, a
    /// record that is the whole of `rid`'s group, a ready run, leaves the group for the lane of retired
    /// runs (the span its re-ranking makes, where eviction finds it without a lookup), the same ranks
    /// and decisions as `finish`; anything else is `finish`.
    pub fn finish_unnamed(&mut self, rid: u64) {
        if !self.counted.is_empty() {
            self.counted.remove(&rid);
        }
        if self.chunks.recs.is_empty() {
            return self.finish(rid);
        }
        let Some(rec) = self.chunks.recs.remove(rid) else {
            return self.finish(rid);
        };
        // (under LRU only: a one-run record is kept under no other policy)
        if let rows::Entry::Occupied(e) = self.chunks.groups.entry(rid)
            && let g = e.get()
            && let group::Slots::Run(r) = g.slots
            && r.ready
            && g.base == rec.lo
            && u64::from(r.n) == rec.n
        {
            let n = u64::from(r.n);
            if let Some(span) = r.reranked(self.next_rank + n).span(rid, g.base) {
                e.remove();
                self.next_rank += n;
                self.chunks.len -= n as usize;
                self.lane_len += n;
                self.lane.push_back(span);
                self.debug_check();
                return;
            }
        }
        self.finish_rec(rid, rec);
    }

    /// Request `rid` finished (`on_request_finished`): its keys, ordered by position (ties by key: a
    /// hybrid model's groups, `engine::offload::hybrid`), are re-ranked from its last chunk to its first, so its first is the most recent.
    /// LRU: each held one gets a fresh rank. ARC: one it only inserted moves to the most recent end of
    /// its list; one it reused moves from T1 to T2, or to T2's most recent end. Its record is dropped.
    pub fn finish(&mut self, rid: u64) {
        if !self.counted.is_empty() {
            self.counted.remove(&rid);
        }
        if !self.chunks.recs.is_empty()
            && let Some(rec) = self.chunks.recs.remove(rid)
        {
            return self.finish_rec(rid, rec);
        }
        let Some(a) = self.accesses.remove(&rid) else {
            return;
        };
        self.finish_access(a);
    }

    /// `finish` of request `rid` whose record, one run of its own keys (`Chunks::recs`), was `rec`:
    /// re-ranked in their group as below.
    fn finish_rec(&mut self, rid: u64, rec: group::Rec) {
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
        let a = self.span_access(rec.rank.get(), (rid, rec.lo, rec.n, rec.pos));
        self.finish_access(a);
    }

    /// `finish` of a request whose record is `a`.
    fn finish_access(&mut self, mut a: Access) {
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
        if run.is_none() && !ordered.is_sorted_by_key(|&(key, pos)| (pos, key)) {
            // By position, then key: one request's keys at one position are one content's in several
            // KV-cache groups, whose keys order as their groups (vLLM's `order_request_keys`).
            ordered.sort_by_key(|&(key, pos)| (pos, key));
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
