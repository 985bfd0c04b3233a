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
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
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

/// The LRU's order of a chunk, smaller evicted first: `(request rank, -position)` while a request that
/// touched it runs (its tail before its head), `(n, -0)` once re-ranked at a request's finish. The
/// position is kept as `Reverse(position)`, which orders as the spec's `-position`.
type Rank = (u64, Reverse<u64>);

/// One held chunk: pending until its store completes, pinned by `pins` loads in flight, and (LRU) its
/// rank. One slot per chunk holds all of it (the LRU's ranks and its evictable set were maps of
/// their own: three hash tables per chunk held, and most of a tier's cost; results/README.md).
/// 16 bytes (a slot of its row's vector, `Chunks`): the rank's position is a chunk's index in its request,
/// kept in 32 bits, and a chunk is pinned by at most one load at a time in the engine (a lookup skips
/// a chunk being loaded), by fewer than 2^16 here.
#[derive(Clone, Copy, Debug, Default)]
struct Chunk {
    /// The LRU's rank (unused under ARC): the request rank and the position.
    req: u64,
    pos: u32,
    pins: u16,
    ready: bool,
    /// Whether the slot holds a chunk (a `Group`'s slots may be empty).
    held: bool,
}

const _: () = assert!(size_of::<Chunk>() == 16);

impl Chunk {
    /// vLLM's `ref_cnt == 0`: ready and read by no load.
    fn evictable(self) -> bool {
        self.ready && self.pins == 0
    }

    #[inline]
    fn rank(self) -> Rank {
        (self.req, Reverse(u64::from(self.pos)))
    }

    #[inline]
    fn set_rank(&mut self, (req, Reverse(pos)): Rank) {
        self.req = req;
        self.pos = u32::try_from(pos).expect("a chunk position below 2^32");
    }
}

/// The chunks held, grouped by their key's upper 64 bits: a key `(hi << 64) | lo` lives in the group
/// of `hi` at slot `lo - base` when the group's slots reach it, else among the singles. A request's
/// private chunks are named by its row in the upper half and their block index in the lower
/// (`ensure_tier_keys` in the engine), so they fill one group's consecutive slots: one hash-table entry
/// and one vector per row instead of one entry per chunk (the table's inserts and growth were most of a
/// rarely hit tier's cost, results/README.md §CPU tier). A content key (a hash) is a group of one, its
/// slot kept inline (`Slots::One`: no allocation); a key beyond its group's slots is a single, in a map
/// of its own.
///
/// Exact for any keys: a group starts with, and its slots only grow at their end by, keys absent from
/// the tier, so a single is never inside its group's slots (a key is in one place or none).
/// Memory: a group spans from its first slot to its last held chunk (empty slots at the end are
/// trimmed, a group with none held dropped), so at most a request's chunks per row with one held.
#[derive(Clone, Debug, Default)]
struct Chunks {
    groups: HashMap<u64, Group, Hasher>,
    singles: KeyMap<Chunk>,
    len: usize,
}

#[derive(Clone, Debug)]
struct Group {
    /// The lower key half of `slots[0]`.
    base: u64,
    slots: Slots,
    held: u32,
}

/// A group's slots: one kept inline (a key alone, as a content key: no allocation), or a vector.
#[derive(Clone, Debug)]
enum Slots {
    One(Chunk),
    Many(Vec<Chunk>),
}

impl std::ops::Deref for Slots {
    type Target = [Chunk];
    #[inline]
    fn deref(&self) -> &[Chunk] {
        match self {
            Slots::One(c) => std::slice::from_ref(c),
            Slots::Many(v) => v,
        }
    }
}

impl std::ops::DerefMut for Slots {
    #[inline]
    fn deref_mut(&mut self) -> &mut [Chunk] {
        match self {
            Slots::One(c) => std::slice::from_mut(c),
            Slots::Many(v) => v,
        }
    }
}

impl Slots {
    fn push(&mut self, c: Chunk) {
        match self {
            Slots::One(a) => *self = Slots::Many(vec![*a, c]),
            Slots::Many(v) => v.push(c),
        }
    }

    fn pop(&mut self) {
        match self {
            Slots::One(_) => *self = Slots::Many(Vec::new()),
            Slots::Many(v) => {
                v.pop();
            }
        }
    }

    fn extend(&mut self, more: impl ExactSizeIterator<Item = Chunk>) {
        match self {
            Slots::One(a) => {
                let mut v = Vec::with_capacity(1 + more.len());
                v.push(*a);
                v.extend(more);
                *self = Slots::Many(v);
            }
            Slots::Many(v) => v.extend(more),
        }
    }

    /// The slots of `chunks` (at least one).
    fn of(mut chunks: impl ExactSizeIterator<Item = Chunk>) -> Self {
        if chunks.len() == 1 {
            return Slots::One(chunks.next().expect("one chunk"));
        }
        let mut v = Vec::with_capacity(chunks.len());
        v.extend(chunks);
        Slots::Many(v)
    }
}

/// `(hi, lo, n)` if `keys` are `n` >= 1 consecutive keys `(hi, lo)`, `(hi, lo + 1)`, ... of one group.
#[inline]
fn run_of(mut keys: impl Iterator<Item = BlockKey>) -> Option<(u64, u64, usize)> {
    let first = keys.next()?;
    let mut n = 1;
    let mut last = first.0;
    for k in keys {
        if k.0 != last.wrapping_add(1) || (k.0 >> 64) != (last >> 64) {
            return None;
        }
        last = k.0;
        n += 1;
    }
    let (hi, lo) = split_key(first);
    Some((hi, lo, n))
}

/// `run_of` the keys of `order` if their positions also increase (so the order is by position).
#[inline]
fn run_in_order(order: &[(BlockKey, u64)]) -> Option<(u64, u64, usize)> {
    let (&(first, _), rest) = order.split_first()?;
    let mut last = order[0];
    for &(k, pos) in rest {
        if k.0 != last.0.0.wrapping_add(1) || (k.0 >> 64) != (last.0.0 >> 64) || pos <= last.1 {
            return None;
        }
        last = (k, pos);
    }
    let (hi, lo) = split_key(first);
    Some((hi, lo, order.len()))
}

#[inline]
fn split_key(key: BlockKey) -> (u64, u64) {
    ((key.0 >> 64) as u64, key.0 as u64)
}

impl Chunks {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn get(&self, key: BlockKey) -> Option<&Chunk> {
        let (hi, lo) = split_key(key);
        if let Some(g) = self.groups.get(&hi) {
            let i = lo.wrapping_sub(g.base);
            if i < g.slots.len() as u64 {
                let c = &g.slots[i as usize];
                return c.held.then_some(c);
            }
        }
        if self.singles.is_empty() {
            return None;
        }
        self.singles.get(&key)
    }

    #[inline]
    fn get_mut(&mut self, key: BlockKey) -> Option<&mut Chunk> {
        let (hi, lo) = split_key(key);
        if let Some(g) = self.groups.get_mut(&hi) {
            let i = lo.wrapping_sub(g.base);
            if i < g.slots.len() as u64 {
                let c = &mut g.slots[i as usize];
                return if c.held { Some(c) } else { None };
            }
        }
        if self.singles.is_empty() {
            return None;
        }
        self.singles.get_mut(&key)
    }

    #[inline]
    fn contains(&self, key: BlockKey) -> bool {
        self.get(key).is_some()
    }

    /// Holds `key` as `chunk` (replacing it if held, as a map's insert): in its group's slots if they
    /// reach it or it continues them, else among the singles (a key alone, as a content key, starts no
    /// group: only `insert_run` does).
    fn insert(&mut self, key: BlockKey, mut chunk: Chunk) {
        chunk.held = true;
        if !self.singles.is_empty()
            && let Some(c) = self.singles.get_mut(&key)
        {
            *c = chunk; // (replaced: a key held is in one place)
            return;
        }
        self.len += 1;
        let (hi, lo) = split_key(key);
        let g = match self.groups.entry(hi) {
            Entry::Vacant(e) => {
                e.insert(Group {
                    base: lo,
                    slots: Slots::One(chunk),
                    held: 1,
                });
                return;
            }
            Entry::Occupied(e) => e.into_mut(),
        };
        {
            let i = lo.wrapping_sub(g.base);
            let n = g.slots.len() as u64;
            if i < n {
                let slot = &mut g.slots[i as usize];
                if slot.held {
                    self.len -= 1; // (replaced)
                } else {
                    g.held += 1;
                }
                *slot = chunk;
                return;
            } else if i == n {
                g.slots.push(chunk);
                g.held += 1;
                return;
            }
        }
        if self.singles.insert(key, chunk).is_some() {
            self.len -= 1; // (replaced)
        }
    }

    /// `insert` of `chunks` under keys `(hi, lo..)` (a run of keys none of which is held), in one
    /// piece when they start a group or continue one; else one by one.
    fn insert_run(&mut self, hi: u64, lo: u64, chunks: impl ExactSizeIterator<Item = Chunk>) {
        let n = chunks.len();
        let held = |mut c: Chunk| {
            c.held = true;
            c
        };
        match self.groups.entry(hi) {
            Entry::Vacant(e) => {
                e.insert(Group {
                    base: lo,
                    slots: Slots::of(chunks.map(held)),
                    held: n as u32,
                });
                self.len += n;
            }
            Entry::Occupied(mut e)
                if lo.wrapping_sub(e.get().base) == e.get().slots.len() as u64 =>
            {
                let g = e.get_mut();
                g.slots.extend(chunks.map(held));
                g.held += n as u32;
                self.len += n;
            }
            Entry::Occupied(_) => {
                self.insert_many(chunks.enumerate().map(|(i, c)| {
                    (
                        BlockKey((u128::from(hi) << 64) | u128::from(lo.wrapping_add(i as u64))),
                        c,
                    )
                }));
            }
        }
    }

    /// `insert` of each `(key, chunk)` in order, one group lookup per run of keys sharing their upper
    /// half.
    fn insert_many(&mut self, items: impl ExactSizeIterator<Item = (BlockKey, Chunk)>) {
        let mut items = items.peekable();
        while let Some((key, chunk)) = items.next() {
            let (hi, lo) = split_key(key);
            self.insert(key, chunk);
            // The keys after it in its group: appended while they follow on.
            let Some(g) = self.groups.get_mut(&hi) else {
                continue;
            };
            while let Some(&(key, mut chunk)) = items.peek() {
                let (h, l) = split_key(key);
                if h != hi
                    || l.wrapping_sub(g.base) != g.slots.len() as u64
                    || l == lo
                    || self.singles.contains_key(&key)
                {
                    break; // (a single is replaced where it is, by `insert`)
                }
                items.next();
                chunk.held = true;
                g.slots.push(chunk);
                g.held += 1;
                self.len += 1;
            }
        }
    }

    fn remove(&mut self, key: BlockKey) -> Option<Chunk> {
        if !self.singles.is_empty()
            && let Some(c) = self.singles.remove(&key)
        {
            self.len -= 1;
            return Some(c);
        }
        let (hi, lo) = split_key(key);
        if let Entry::Occupied(mut e) = self.groups.entry(hi) {
            let g = e.get_mut();
            let i = lo.wrapping_sub(g.base);
            if i < g.slots.len() as u64 {
                let c = g.slots[i as usize];
                if !c.held {
                    return None;
                }
                g.slots[i as usize].held = false;
                g.held -= 1;
                self.len -= 1;
                if g.held == 0 {
                    e.remove();
                } else {
                    while g.slots.last().is_some_and(|c| !c.held) {
                        g.slots.pop();
                    }
                }
                return Some(c);
            }
        }
        None
    }

    /// `f(i, key, chunk)` for the `i`th of `keys` (None: not held), one group lookup per run of keys
    /// sharing their upper half (a request's private chunks).
    #[inline]
    fn visit<'a>(
        &'a self,
        keys: impl Iterator<Item = BlockKey>,
        mut f: impl FnMut(usize, BlockKey, Option<&'a Chunk>),
    ) {
        let mut cur: Option<(u64, Option<&'a Group>)> = None;
        for (i, key) in keys.enumerate() {
            let (hi, lo) = split_key(key);
            let g = match cur {
                Some((h, g)) if h == hi => g,
                _ => {
                    let g = self.groups.get(&hi);
                    cur = Some((hi, g));
                    g
                }
            };
            if let Some(g) = g {
                let j = lo.wrapping_sub(g.base);
                if j < g.slots.len() as u64 {
                    let c = &g.slots[j as usize];
                    f(i, key, c.held.then_some(c));
                    continue;
                }
            }
            f(
                i,
                key,
                if self.singles.is_empty() {
                    None
                } else {
                    self.singles.get(&key)
                },
            );
        }
    }

    /// Whether no key `(hi, lo..lo + n)` is held (for a run of keys: one group lookup).
    #[inline]
    fn none_held(&self, hi: u64, lo: u64, n: u64) -> bool {
        if !self.singles.is_empty() {
            return false; // (not decided here)
        }
        self.groups.get(&hi).is_none_or(|g| {
            // The run and the slots do not overlap (each taken from its own start, modulo 2^64).
            let len = g.slots.len() as u64;
            lo.wrapping_sub(g.base) >= len && g.base.wrapping_sub(lo) >= n
        })
    }

    /// The slots of keys `(hi, lo..lo + n)` if the group's slots hold them all, else None.
    #[inline]
    fn slots_mut(&mut self, hi: u64, lo: u64, n: usize) -> Option<&mut [Chunk]> {
        let g = self.groups.get_mut(&hi)?;
        let j = lo.wrapping_sub(g.base) as usize;
        if (lo.wrapping_sub(g.base)) < g.slots.len() as u64 && n <= g.slots.len() - j {
            Some(&mut g.slots[j..j + n])
        } else {
            None
        }
    }

    /// `visit` with the chunks mutable (`f` sees only held ones).
    #[inline]
    fn visit_mut(
        &mut self,
        keys: impl Iterator<Item = BlockKey>,
        mut f: impl FnMut(BlockKey, &mut Chunk),
    ) {
        let Chunks {
            groups, singles, ..
        } = self;
        let mut keys = keys.peekable();
        while let Some(key) = keys.next() {
            let (hi, lo) = split_key(key);
            let Some(g) = groups.get_mut(&hi) else {
                if let Some(c) = singles.get_mut(&key) {
                    f(key, c);
                }
                continue;
            };
            let mut next = Some((key, lo));
            while let Some((key, lo)) = next {
                let j = lo.wrapping_sub(g.base);
                if j < g.slots.len() as u64 {
                    let c = &mut g.slots[j as usize];
                    if c.held {
                        f(key, c);
                    }
                } else if let Some(c) = singles.get_mut(&key) {
                    f(key, c);
                }
                next = keys
                    .next_if(|&k| split_key(k).0 == hi)
                    .map(|k| (k, split_key(k).1));
            }
        }
    }

    /// Every chunk held with its key (in no particular order).
    fn iter(&self) -> impl Iterator<Item = (BlockKey, &Chunk)> + '_ {
        self.groups
            .iter()
            .flat_map(|(&hi, g)| {
                g.slots
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.held)
                    .map(move |(i, c)| {
                        let lo = g.base.wrapping_add(i as u64);
                        (BlockKey((u128::from(hi) << 64) | u128::from(lo)), c)
                    })
            })
            .chain(self.singles.iter().map(|(&k, c)| (k, c)))
    }

    fn values(&self) -> impl Iterator<Item = &Chunk> + '_ {
        self.iter().map(|(_, c)| c)
    }

    fn keys(&self) -> impl Iterator<Item = BlockKey> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// Its own consistency: counts, no empty group or trailing empty slot, no single inside a group.
    fn check(&self) -> std::result::Result<(), String> {
        let mut n = self.singles.len();
        for (hi, g) in &self.groups {
            let held = g.slots.iter().filter(|c| c.held).count();
            if held != g.held as usize || held == 0 || !g.slots.last().is_some_and(|c| c.held) {
                return Err(format!("group {hi:#x} miscounts or ends in an empty slot"));
            }
            n += held;
        }
        if n != self.len {
            return Err(format!("{} chunks counted, {n} held", self.len));
        }
        for k in self.singles.keys() {
            let (hi, lo) = split_key(*k);
            if let Some(g) = self.groups.get(&hi)
                && lo.wrapping_sub(g.base) < g.slots.len() as u64
            {
                return Err(format!("single {} inside its group's slots", k.0));
            }
            if !self.singles[k].held {
                return Err(format!("single {} not marked held", k.0));
            }
        }
        Ok(())
    }
}

/// Keys in order, least recent first, with O(log n) move-to-end and removal: Python's `OrderedDict`
/// (ARC's T1/T2/B1/B2, the threshold tracker). Each key holds a stamp, unique and increasing with each
/// move to the end; `order` maps stamps back to keys.
#[derive(Clone, Debug)]
struct Recency<V> {
    slot: KeyMap<(u64, V)>,
    order: BTreeMap<u64, BlockKey>,
    next: u64,
}

impl<V> Default for Recency<V> {
    fn default() -> Self {
        Self {
            slot: KeyMap::default(),
            order: BTreeMap::new(),
            next: 0,
        }
    }
}

impl<V> Recency<V> {
    fn len(&self) -> usize {
        self.slot.len()
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.slot.contains_key(&key)
    }

    fn get(&self, key: BlockKey) -> Option<&V> {
        self.slot.get(&key).map(|(_, v)| v)
    }

    fn stamp(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// `d[key] = value`: a new key goes to the end, a present one keeps its place.
    fn set(&mut self, key: BlockKey, value: V) {
        let stamp = self.next + 1;
        match self.slot.entry(key) {
            Entry::Occupied(mut e) => e.get_mut().1 = value,
            Entry::Vacant(e) => {
                e.insert((stamp, value));
                self.next = stamp;
                self.order.insert(stamp, key);
            }
        }
    }

    /// `d.move_to_end(key)` for a present key; false (nothing changed) for an absent one.
    fn move_to_end(&mut self, key: BlockKey) -> bool {
        let stamp = self.stamp();
        let Some((old, _)) = self.slot.get_mut(&key) else {
            return false;
        };
        self.order.remove(old);
        *old = stamp;
        self.order.insert(stamp, key);
        true
    }

    fn remove(&mut self, key: BlockKey) -> Option<V> {
        let (stamp, value) = self.slot.remove(&key)?;
        self.order.remove(&stamp);
        Some(value)
    }

    /// `d.popitem(last=False)`: the least recent key.
    fn pop_front(&mut self) -> Option<BlockKey> {
        let (_, key) = self.order.pop_first()?;
        self.slot.remove(&key);
        Some(key)
    }

    /// Keys whose stamp is at least `from`, least recent first, with their stamps.
    fn since(&self, from: u64) -> impl Iterator<Item = (u64, BlockKey)> + '_ {
        self.order.range(from..).map(|(&s, &k)| (s, k))
    }

    fn keys(&self) -> impl Iterator<Item = BlockKey> + '_ {
        self.order.values().copied()
    }

    fn check(&self, what: &str) -> std::result::Result<(), String> {
        if self.slot.len() != self.order.len() {
            return Err(format!(
                "{what} holds {} keys but orders {}",
                self.slot.len(),
                self.order.len()
            ));
        }
        for (&stamp, key) in &self.order {
            if self.slot.get(key).map(|s| s.0) != Some(stamp) {
                return Err(format!("{what} orders key {} under a stale stamp", key.0));
            }
        }
        Ok(())
    }
}

/// `Access::flags`: the key was accessed (it is in `order`), inserted by the request, reused by it, a
/// store miss of it (vLLM's `_RequestCacheAccess` sets). Only ARC reads the last three: under LRU they
/// are not kept.
const SEEN: u8 = 1;
const INSERTED: u8 = 2;
const REUSED: u8 = 4;
const STORE_MISS: u8 = 8;

/// What one live request did to the tier (vLLM's `_RequestCacheAccess` and the LRU's request rank);
/// dropped at its `finish`.
#[derive(Clone, Debug, Default)]
struct Access {
    /// The LRU's request rank, 0 until first needed.
    rank: u64,
    /// Keys seen, in order of first access, with their position then: `order[..checked]` distinct and
    /// indexed (by the filter or `flags`); after them (LRU) keys recorded while not held, unchecked
    /// (repeats possible), checked when a held key's access needs the set (`absorb`) or at `finish`.
    order: Vec<(BlockKey, u64)>,
    checked: usize,
    /// Whether the unchecked keys are consecutive keys of one group (`Chunks`): distinct, so they
    /// need no check at `finish` when they are all the keys (a row's private chunks, the usual case).
    run: bool,
    /// Each key's `SEEN`, `INSERTED`, `REUSED` and `STORE_MISS` bits: vLLM's four sets in one map.
    flags: KeyMap<u8>,
    /// Whether `flags` holds the keys seen: always under ARC; under LRU (which reads no other bit)
    /// once `order` is longer than `SCAN_SEEN`, below which a scan of `order` finds them for less.
    mapped: bool,
    /// While scanning: a 256-bit filter of the keys in `order` (a clear bit: not seen, no scan).
    filter: [u64; 4],
}

/// A key's bit in `Access::filter`.
#[inline]
fn filter_bit(key: BlockKey) -> (usize, u64) {
    let h = ((key.0 as u64) ^ ((key.0 >> 64) as u64)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56;
    ((h >> 6) as usize, 1 << (h & 63))
}

/// Keys seen a request's record finds by scanning `order` rather than hashing (LRU).
const SCAN_SEEN: usize = 24;

impl Access {
    fn new(arc: bool) -> Self {
        Access {
            mapped: arc,
            ..Access::default()
        }
    }

    /// Records `key` at `pos` unchecked (LRU, a key not held). Unchecked keys that are not one run
    /// are checked once more than `SCAN_SEEN` wait (so that repeated offers of the same keys keep the
    /// record within twice its distinct keys and that many more).
    #[inline]
    fn push_unchecked(&mut self, key: BlockKey, pos: u64) {
        let n = self.order.len();
        if n == self.checked {
            self.run = true;
        } else if self.run {
            let last = self.order[n - 1].0.0;
            self.run = key.0 == last.wrapping_add(1) && (key.0 >> 64) == (last >> 64);
        }
        self.order.push((key, pos));
        if !self.run && self.order.len() - self.checked > SCAN_SEEN {
            self.absorb();
        }
    }

    /// `push_unchecked` of each of `keys` (not empty).
    fn extend_unchecked(&mut self, keys: &[(BlockKey, u64)]) {
        let n = self.order.len();
        let follows =
            |a: BlockKey, b: BlockKey| b.0 == a.0.wrapping_add(1) && (a.0 >> 64) == (b.0 >> 64);
        let joins = n == self.checked || self.run && follows(self.order[n - 1].0, keys[0].0);
        self.run = joins && keys.windows(2).all(|w| follows(w[0].0, w[1].0));
        self.order.extend_from_slice(keys);
        if !self.run && self.order.len() - self.checked > SCAN_SEEN {
            self.absorb();
        }
    }

    /// `extend_unchecked` of `keys` known to be one run (consecutive keys of one group).
    fn extend_run(&mut self, keys: &[(BlockKey, u64)]) {
        let n = self.order.len();
        if n == self.checked {
            self.run = true;
        } else if self.run {
            let (last, first) = (self.order[n - 1].0.0, keys[0].0.0);
            self.run = first == last.wrapping_add(1) && (first >> 64) == (last >> 64);
        }
        self.order.extend_from_slice(keys);
        if !self.run && self.order.len() - self.checked > SCAN_SEEN {
            self.absorb();
        }
    }

    /// Whether `key` is among the checked keys.
    #[inline]
    fn seen(&self, key: BlockKey) -> bool {
        if self.mapped {
            return self.has(key, SEEN);
        }
        let (word, bit) = filter_bit(key);
        self.filter[word] & bit != 0 && self.order[..self.checked].iter().any(|&(k, _)| k == key)
    }

    /// Indexes `order[checked]` (a key not seen) and counts it checked.
    #[inline]
    fn index_next(&mut self) {
        let key = self.order[self.checked].0;
        self.checked += 1;
        if self.mapped {
            self.set(key, SEEN);
            return;
        }
        let (word, bit) = filter_bit(key);
        self.filter[word] |= bit;
        if self.checked > SCAN_SEEN {
            self.mapped = true;
            self.flags.reserve(self.checked);
            for &(k, _) in &self.order[..self.checked] {
                *self.flags.entry(k).or_insert(0) |= SEEN;
            }
        }
    }

    /// Records a first access to `key` at `pos`; false if it was seen before. (Unchecked keys are
    /// checked first.)
    #[inline]
    fn first_seen(&mut self, key: BlockKey, pos: u64) -> bool {
        self.absorb();
        if self.seen(key) {
            return false;
        }
        self.order.push((key, pos));
        self.index_next();
        true
    }

    /// Checks the unchecked keys in order, dropping the repeats (a key's first access stays).
    fn absorb(&mut self) {
        let n = self.order.len();
        if self.checked == n {
            return;
        }
        if self.checked == 0 && self.run {
            // Consecutive keys of one group: distinct.
            if n <= SCAN_SEEN {
                for &(k, _) in &self.order {
                    let (word, bit) = filter_bit(k);
                    self.filter[word] |= bit;
                }
                self.checked = n;
                return;
            }
        }
        for r in self.checked..n {
            let e = self.order[r];
            if self.seen(e.0) {
                continue;
            }
            let w = self.checked;
            self.order[w] = e;
            self.index_next();
        }
        self.order.truncate(self.checked);
    }

    /// The keys in order, repeats dropped (the first access kept), taken out for `finish`.
    fn take_distinct(&mut self) -> Vec<(BlockKey, u64)> {
        if !(self.checked == 0 && self.run) {
            self.absorb(); // (else distinct: no check needed)
        }
        self.checked = 0;
        std::mem::take(&mut self.order)
    }

    #[inline]
    fn has(&self, key: BlockKey, flag: u8) -> bool {
        self.flags.get(&key).is_some_and(|f| f & flag != 0)
    }

    /// Sets `flag` on `key`; returns whether it was unset.
    #[inline]
    fn set(&mut self, key: BlockKey, flag: u8) -> bool {
        let f = self.flags.entry(key).or_insert(0);
        let was = *f & flag == 0;
        *f |= flag;
        was
    }
}

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
    pub fn lookup(&self, key: BlockKey) -> u8 {
        match self.chunks.get(key) {
            None => MISS,
            Some(c) if c.ready => HIT,
            Some(_) => PENDING,
        }
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
        let spare = &mut self.spare_orders;
        let a = self.accesses.entry(rid).or_insert_with(|| {
            let mut a = Access::new(arc);
            a.order = spare.pop().unwrap_or_default();
            a
        });
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

    /// `record` under LRU of keys none of which is held: recorded unchecked, the request ranked.
    fn record_absent(&mut self, rid: u64, keys: &[(BlockKey, u64)]) {
        if keys.is_empty() {
            return;
        }
        let spare = &mut self.spare_orders;
        let a = self.accesses.entry(rid).or_insert_with(|| {
            let mut a = Access::new(false);
            a.order = spare.pop().unwrap_or_default();
            a
        });
        a.extend_unchecked(keys);
        if a.rank == 0 {
            self.next_rank += 1;
            a.rank = self.next_rank;
        }
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
            if self.chunks.get(key).is_some_and(|c| c.evictable()) && !protected.contains(&key) {
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
        let spare = &mut self.spare_orders;
        let a = self.accesses.entry(rid).or_insert_with(|| {
            let mut a = Access::new(false);
            a.order = spare.pop().unwrap_or_default();
            a
        });
        a.extend_run(keys);
        if a.rank == 0 {
            self.next_rank += 1;
            a.rank = self.next_rank;
        }
        let req = a.rank;
        self.chunks.insert_run(
            hi,
            lo,
            keys.iter().map(|&(_, pos)| Chunk {
                req,
                pos: u32::try_from(pos).expect("a chunk position below 2^32"),
                ..Chunk::default()
            }),
        );
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
            && let Some(slots) = self.chunks.slots_mut(hi, lo, n)
        {
            // One run inside its group's slots, no heap to feed: the slots in a row.
            for c in slots {
                if c.held && !c.ready {
                    c.ready = true;
                    ready += 1;
                }
            }
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
        let Some(mut a) = self.accesses.remove(&rid) else {
            return;
        };
        let mut ordered = a.take_distinct();
        // One run of keys in order of position (a request's private chunks), or sorted by position.
        let run = run_in_order(&ordered);
        if run.is_none() && !ordered.is_sorted_by_key(|&(_, pos)| pos) {
            ordered.sort_by_key(|&(_, pos)| pos); // stable, as Python's sorted
        }
        if self.eviction == Eviction::Lru
            && !self.heap_live
            && let Some((hi, lo, n)) = run
            && let Some(slots) = self.chunks.slots_mut(hi, lo, n)
        {
            // One run inside its group's slots (in order of position), no heap to feed: re-ranked
            // from the last slot to the first.
            for c in slots.iter_mut().rev() {
                if c.held {
                    self.next_rank += 1;
                    c.set_rank((self.next_rank, Reverse(0)));
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn k(n: u128) -> BlockKey {
        BlockKey(n)
    }

    /// Keys `ns` at positions 0, 1, ...
    fn at(ns: &[u128]) -> Vec<(BlockKey, u64)> {
        ns.iter()
            .enumerate()
            .map(|(i, &n)| (k(n), i as u64))
            .collect()
    }

    fn keys(ns: &[u128]) -> Vec<BlockKey> {
        ns.iter().map(|&n| k(n)).collect()
    }

    /// `prepare_store`: Some((stored, evicted)) or None.
    fn store(t: &mut CpuTier, rid: u64, ks: &[(BlockKey, u64)]) -> Option<(Vec<u128>, Vec<u128>)> {
        let (mut stored, mut evicted) = (Vec::new(), Vec::new());
        t.prepare_store(rid, ks, &mut stored, &mut evicted)?;
        Some((
            stored.iter().map(|k| k.0).collect(),
            evicted.iter().map(|k| k.0).collect(),
        ))
    }

    /// Stores `ns` for `rid` (positions 0, 1, ...), completes the store and finishes the request.
    fn fill(t: &mut CpuTier, rid: u64, ns: &[u128]) {
        store(t, rid, &at(ns)).unwrap();
        t.complete_store(&keys(ns));
        t.finish(rid);
    }

    #[test]
    fn lookup_tells_missing_pending_and_ready_chunks_apart() {
        let mut t = CpuTier::new(4, Eviction::Lru, 0);
        assert_eq!(t.lookup(k(1)), MISS);
        assert_eq!(store(&mut t, 1, &at(&[1, 2])), Some((vec![1, 2], vec![])));
        assert_eq!(
            (t.lookup(k(1)), t.used(), t.num_evictable()),
            (PENDING, 2, 0)
        );
        t.complete_store(&keys(&[1, 9]));
        assert_eq!((t.lookup(k(1)), t.lookup(k(2))), (HIT, PENDING));
        assert_eq!(t.num_evictable(), 1);
        // offering held keys again stores nothing
        assert_eq!(store(&mut t, 2, &at(&[1, 2])), Some((vec![], vec![])));
    }

    #[test]
    fn lru_evicts_a_running_requests_tail_first_and_a_finished_requests_tail_first() {
        let mut t = CpuTier::new(3, Eviction::Lru, 0);
        store(&mut t, 1, &at(&[1, 2, 3])).unwrap();
        t.complete_store(&keys(&[1, 2, 3]));
        // request 1 still runs: ranks (r, -position), its last chunk the oldest
        assert_eq!(store(&mut t, 2, &at(&[4])), Some((vec![4], vec![3])));
        t.finish(1);
        t.complete_store(&keys(&[4]));
        t.finish(2);
        // finish re-ranked 2 then 1 (the first chunk newest); request 2 finished later
        assert_eq!(
            store(&mut t, 3, &at(&[5, 6])),
            Some((vec![5, 6], vec![2, 1]))
        );
        assert_eq!(t.num_evicted(), 3);
    }

    #[test]
    fn a_load_moves_a_chunk_up_and_pins_protect_it() {
        let mut t = CpuTier::new(3, Eviction::Lru, 0);
        fill(&mut t, 1, &[1, 2, 3]);
        // request 2 reads chunk 3 (the oldest): it becomes the newest
        t.prepare_load(2, &[(k(3), 0)]);
        assert_eq!(t.num_evictable(), 2);
        assert_eq!(
            store(&mut t, 3, &at(&[7, 8])),
            Some((vec![7, 8], vec![2, 1]))
        );
        // pinned: not evictable, so there is no room
        assert_eq!(store(&mut t, 3, &at(&[7, 8, 9])), None);
        assert!(t.check_complete_load(&keys(&[3, 3])).is_err());
        assert!(t.check_complete_load(&keys(&[5])).is_err());
        t.check_complete_load(&keys(&[3])).unwrap();
        t.complete_load(&keys(&[3]));
        t.complete_store(&keys(&[7, 8]));
        assert_eq!(store(&mut t, 4, &at(&[9])), Some((vec![9], vec![3])));
    }

    #[test]
    fn pending_chunks_are_neither_loadable_nor_evictable() {
        let mut t = CpuTier::new(2, Eviction::Lru, 0);
        store(&mut t, 1, &at(&[1, 2])).unwrap();
        assert!(t.check_prepare_load(&at(&[1])).is_err());
        assert!(t.check_prepare_load(&at(&[5])).is_err());
        assert_eq!(store(&mut t, 2, &at(&[3])), None);
        t.complete_store(&keys(&[1]));
        t.check_prepare_load(&at(&[1])).unwrap();
        assert_eq!(store(&mut t, 2, &at(&[3])), Some((vec![3], vec![1])));
    }

    #[test]
    fn an_offered_chunk_is_never_evicted_and_eviction_is_all_or_nothing() {
        for eviction in [Eviction::Lru, Eviction::Arc] {
            let mut t = CpuTier::new(2, eviction, 0);
            fill(&mut t, 1, &[1, 2]);
            // 1 is the oldest but offered again: 2 goes instead
            assert_eq!(
                store(&mut t, 2, &at(&[1, 3])),
                Some((vec![3], vec![2])),
                "{eviction:?}"
            );
            // two needed, one evictable (3 is pending): nothing changes
            assert_eq!(store(&mut t, 3, &at(&[4, 5])), None);
            assert_eq!((t.used(), t.lookup(k(1)), t.num_evicted()), (2, HIT, 1));
            // one needed, but the only evictable chunk is offered
            assert_eq!(store(&mut t, 3, &at(&[1, 6])), None);
        }
    }

    #[test]
    fn arc_ghost_hits_move_the_target() {
        let mut t = CpuTier::new(2, Eviction::Arc, 0);
        fill(&mut t, 1, &[1, 2]);
        // T1 = [2, 1] (finish made 1 the most recent); target 0, so T1 gives its least recent
        assert_eq!(store(&mut t, 2, &at(&[3])), Some((vec![3], vec![2])));
        t.complete_store(&keys(&[3]));
        t.finish(2);
        // 2 comes back: a B1 hit raises the target by max(1, |B2|/|B1|) = 1
        assert_eq!(store(&mut t, 3, &at(&[2])), Some((vec![2], vec![1])));
        assert!((t.target() - 1.0).abs() < f64::EPSILON);
        t.complete_store(&keys(&[2]));
        t.finish(3);
        // request 4 reads 3: reused, so T1 -> T2 at its finish
        t.prepare_load(4, &[(k(3), 0)]);
        t.complete_load(&keys(&[3]));
        t.finish(4);
        // T1 = [2], T2 = [3], B1 = [1]: |T1| 1 >= 1, T1 gives 2
        assert_eq!(store(&mut t, 5, &at(&[4])), Some((vec![4], vec![2])));
        t.complete_store(&keys(&[4]));
        t.finish(5);
        // T1 = [4], target 1: T1 gives 4 -> B1 = [1, 2, 4], trimmed to capacity: [2, 4]
        assert_eq!(store(&mut t, 6, &at(&[5])), Some((vec![5], vec![4])));
        assert_eq!(t.b1.keys().map(|k| k.0).collect::<Vec<_>>(), [2, 4]);
        t.complete_store(&keys(&[5]));
        t.finish(6);
        // 1 is no ghost any more: the target stays; 4 is one: target += max(1, 0/2) -> 2 (= capacity,
        // the cap), and |T1| 1 < 2: T2 gives 3
        assert_eq!(store(&mut t, 7, &at(&[4])), Some((vec![4], vec![3])));
        assert!((t.target() - 2.0).abs() < f64::EPSILON);
        t.complete_store(&keys(&[4]));
        t.finish(7);
        // 3 is a B2 ghost: target -= max(1, |B1|/|B2|) = max(1, 1/1) -> 1; |T1| 2 >= 1: T1 gives 5
        assert_eq!(store(&mut t, 8, &at(&[3])), Some((vec![3], vec![5])));
        assert!((t.target() - 1.0).abs() < f64::EPSILON);
        t.check_invariants().unwrap();
    }

    #[test]
    fn arc_ghost_lists_stay_within_capacity() {
        let mut t = CpuTier::new(3, Eviction::Arc, 0);
        for rid in 0..50u64 {
            let n = u128::from(rid) * 2;
            fill(&mut t, rid, &[n, n + 1]);
        }
        assert!(t.b1.len() <= 3 && t.b2.len() <= 3);
        assert_eq!(t.used(), 3);
    }

    #[test]
    fn the_threshold_stores_a_key_at_its_nth_offer() {
        let mut t = CpuTier::new(4, Eviction::Lru, 2);
        assert_eq!(store(&mut t, 1, &at(&[1, 2])), Some((vec![], vec![])));
        assert_eq!(t.num_stores_skipped(), 2);
        assert_eq!(store(&mut t, 2, &at(&[2, 3])), Some((vec![2], vec![])));
        assert_eq!(t.num_stores_skipped(), 3);
        // a threshold of 1 is none
        let mut t = CpuTier::new(4, Eviction::Lru, 1);
        assert_eq!(store(&mut t, 1, &at(&[1])), Some((vec![1], vec![])));
    }

    #[test]
    fn a_full_tracker_forgets_its_least_recent_unprotected_key() {
        let mut t = CpuTier::with_tracker(8, Eviction::Lru, 2, 2);
        store(&mut t, 1, &at(&[1, 2])).unwrap();
        // 3 displaces 1, the least recent
        store(&mut t, 1, &at(&[3])).unwrap();
        assert_eq!(t.counts.keys().map(|k| k.0).collect::<Vec<_>>(), [2, 3]);
        // 2 and 3 offered again are protected: 4 finds no room and is not tracked
        assert_eq!(
            store(&mut t, 2, &at(&[2, 3, 4])),
            Some((vec![2, 3], vec![]))
        );
        assert_eq!(t.counts.keys().map(|k| k.0).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(t.num_stores_skipped(), 4);
        // 1 was forgotten: its count starts again
        assert_eq!(store(&mut t, 3, &at(&[1])), Some((vec![], vec![])));
    }

    #[test]
    fn memory_does_not_grow_with_finished_requests() {
        for eviction in [Eviction::Lru, Eviction::Arc] {
            let mut t = CpuTier::with_tracker(16, eviction, 2, 100);
            for rid in 0..3_000u64 {
                // a fresh chunk (stored at its second offer) and rereads of a few old ones
                let n = u128::from(rid);
                for _ in 0..2 {
                    let mut stored = Vec::new();
                    t.prepare_store(rid, &[(k(n), 0)], &mut stored, &mut Vec::new());
                    t.complete_store(&stored);
                }
                let old: Vec<_> = (1..4)
                    .map(|d| (k(n.saturating_sub(d)), d as u64))
                    .filter(|&(key, _)| t.lookup(key) == HIT)
                    .collect();
                t.prepare_load(rid, &old);
                t.complete_load(&old.iter().map(|&(key, _)| key).collect::<Vec<_>>());
                t.finish(rid);
            }
            assert!(t.num_evicted() > 2_900, "{eviction:?}");
            assert!(t.accesses.is_empty());
            assert!(t.heap.len() <= 64.max(2 * t.num_evictable as usize));
            assert!(t.b1.len() <= 16 && t.b2.len() <= 16);
            assert!(t.counts.len() <= 100);
            assert!(t.chunks.len() <= 16);
        }
    }

    #[test]
    fn rereads_without_evictions_keep_the_lru_heap_small() {
        let mut t = CpuTier::new(1000, Eviction::Lru, 0);
        fill(&mut t, 0, &[1, 2, 3]);
        for rid in 1..5_000u64 {
            t.prepare_load(rid, &at(&[1, 2, 3]));
            t.complete_load(&keys(&[1, 2, 3]));
            t.finish(rid);
        }
        assert!(t.heap.len() <= 64, "{}", t.heap.len());
        assert!(t.accesses.is_empty());
    }

    #[test]
    fn a_long_requests_keys_are_recorded_once_whether_scanned_or_mapped() {
        // More keys than `SCAN_SEEN`: the record moves from scanning to its map midway, and keys seen
        // before (offered again) are not recorded twice: finishing re-ranks each key once, the first
        // chunk newest.
        let n = 2 * SCAN_SEEN as u128 + 3;
        let mut t = CpuTier::new(1000, Eviction::Lru, 0);
        let first: Vec<u128> = (1..=n / 2).collect();
        let all: Vec<u128> = (1..=n).collect();
        store(&mut t, 7, &at(&first)).unwrap();
        t.complete_store(&keys(&first));
        let again = store(&mut t, 7, &at(&all)).unwrap();
        assert_eq!(again.0, ((n / 2 + 1)..=n).collect::<Vec<_>>());
        t.finish(7);
        let ranks = t.internals().ranks;
        assert_eq!(ranks.len(), n as usize);
        // Request 7 took rank 1; the finish gave ranks 2..=n+1 from the last key to the first.
        for (key, rank, neg_pos) in ranks {
            assert_eq!(
                (rank, neg_pos),
                ((n + 2 - key.0) as u64, 0),
                "key {}",
                key.0
            );
        }
    }

    #[test]
    fn a_key_is_held_in_one_place_whether_in_a_run_or_alone() {
        // A run starts a group; keys stored alone (a gap, a repeat in one offer) are singles, and a
        // group's slots growing to a single's key leave it where it is.
        let mut t = CpuTier::new(8, Eviction::Lru, 0);
        store(&mut t, 0, &at(&[0])).unwrap();
        assert_eq!(
            store(&mut t, 0, &at(&[2, 1, 2])),
            Some((vec![2, 1, 2], vec![]))
        );
        assert_eq!(
            (t.used(), t.lookup(k(1)), t.lookup(k(2))),
            (3, PENDING, PENDING)
        );
        t.complete_store(&keys(&[0, 1, 2]));
        store(&mut t, 1, &at(&[4, 3])).unwrap();
        assert_eq!(t.used(), 5);
        t.check_invariants().unwrap();
        t.complete_store(&keys(&[3, 4]));
        t.finish(0);
        t.finish(1);
        // every chunk evictable and found: eviction takes the five
        assert_eq!(t.num_evictable(), 5);
        let (stored, evicted) = store(&mut t, 2, &at(&[10, 11, 12, 13, 14, 15, 16, 17])).unwrap();
        assert_eq!((stored.len(), evicted.len()), (8, 5));
        t.check_invariants().unwrap();
    }

    #[test]
    fn eviction_names_parse() {
        assert_eq!(Eviction::parse("arc").unwrap(), Eviction::Arc);
        assert_eq!(
            Eviction::parse(Eviction::Lru.as_str()).unwrap(),
            Eviction::Lru
        );
        assert!(Eviction::parse("fifo").is_err());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Store(u64, Vec<u8>),
        Load(u64, Vec<u8>),
        CompleteLoad(usize),
        CompleteStore(usize),
        Finish(u64),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let ks = || proptest::collection::vec(0u8..16, 0..5);
        prop_oneof![
            (0u64..4, ks()).prop_map(|(r, v)| Op::Store(r, v)),
            (0u64..4, ks()).prop_map(|(r, v)| Op::Load(r, v)),
            (0usize..8).prop_map(Op::CompleteLoad),
            (0usize..8).prop_map(Op::CompleteStore),
            (0u64..4).prop_map(Op::Finish),
        ]
    }

    proptest::proptest! {
        /// Random legal operations keep every invariant (debug builds check them after each one).
        #[test]
        fn random_operations_keep_the_invariants(
            cap in 1u64..10,
            arc in proptest::bool::ANY,
            threshold in 0u64..4,
            ops in proptest::collection::vec(op(), 0..120),
        ) {
            let eviction = if arc { Eviction::Arc } else { Eviction::Lru };
            let mut t = CpuTier::with_tracker(cap, eviction, threshold, 6);
            let (mut loads, mut stores): (Vec<Vec<BlockKey>>, Vec<Vec<BlockKey>>) = (vec![], vec![]);
            for op in ops {
                match op {
                    Op::Store(rid, v) => {
                        let ks: Vec<_> = v.iter().enumerate().map(|(i, &n)| (k(n.into()), i as u64)).collect();
                        let mut stored = Vec::new();
                        if t.prepare_store(rid, &ks, &mut stored, &mut Vec::new()).is_some() {
                            proptest::prop_assert!(t.used() <= cap);
                            stores.push(stored);
                        }
                    }
                    Op::Load(rid, v) => {
                        let ks: Vec<_> = v.iter().enumerate().map(|(i, &n)| (k(n.into()), i as u64))
                            .filter(|&(key, _)| t.lookup(key) == HIT).collect();
                        t.prepare_load(rid, &ks);
                        loads.push(ks.iter().map(|&(key, _)| key).collect());
                    }
                    Op::CompleteLoad(i) if !loads.is_empty() => {
                        let ks = loads.swap_remove(i % loads.len());
                        t.check_complete_load(&ks).unwrap();
                        t.complete_load(&ks);
                    }
                    Op::CompleteStore(i) if !stores.is_empty() => {
                        let ks = stores.swap_remove(i % stores.len());
                        t.complete_store(&ks);
                    }
                    Op::Finish(rid) => t.finish(rid),
                    _ => {}
                }
                t.check_invariants().unwrap();
            }
        }
    }
}
