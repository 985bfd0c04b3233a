//! A CPU tier's chunks in memory (`Chunks`): one slot of 16 bytes per chunk held, a row's private
//! chunks one entry of the rows' window and one vector or run of slots, content keys a group of one
//! (DESIGN.md §CPU tier).

use std::cmp::Reverse;
use std::num::NonZeroU64;

use super::KeyMap;
use super::order::{Order, RankQueue, Span};
use super::rows::{ByName, Entry};
use crate::BlockKey;

/// The LRU's order of a chunk, smaller evicted first: `(request rank, -position)` while a request that
/// touched it runs (its tail before its head), `(n, -0)` once re-ranked at a request's finish. The
/// position is kept as `Reverse(position)`, which orders as the spec's `-position`.
pub(super) type Rank = (u64, Reverse<u64>);

/// One held chunk: pending until its store completes, pinned by `pins` loads in flight, and (LRU) its
/// rank. One slot per chunk holds all of it (the LRU's ranks and its evictable set were maps of
/// their own: three hash tables per chunk held, and most of a tier's cost; results/README.md).
/// 16 bytes (a slot of its row's vector, `Chunks`): the rank's position is a chunk's index in its request,
/// kept in 32 bits, and a chunk is pinned by at most one load at a time in the engine (a lookup skips
/// a chunk being loaded), by fewer than 2^16 here.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Chunk {
    /// The LRU's rank (unused under ARC): the request rank and the position.
    pub(super) req: u64,
    pub(super) pos: u32,
    pub(super) pins: u16,
    pub(super) ready: bool,
    /// Whether the slot holds a chunk (a `Group`'s slots may be empty).
    pub(super) held: bool,
}

const _: () = assert!(size_of::<Chunk>() == 16);

impl Chunk {
    /// vLLM's `ref_cnt == 0`: ready and read by no load.
    pub(super) fn evictable(self) -> bool {
        self.ready && self.pins == 0
    }

    #[inline]
    pub(super) fn rank(self) -> Rank {
        (self.req, Reverse(u64::from(self.pos)))
    }

    #[inline]
    pub(super) fn set_rank(&mut self, (req, Reverse(pos)): Rank) {
        self.req = req;
        self.pos = u32::try_from(pos).expect("a chunk position below 2^32");
    }
}

/// The chunks held, grouped by their key's upper 64 bits: a key `(hi << 64) | lo` lives in the group
/// of `hi` at slot `lo - base` when the group's slots reach it, else among the singles. A request's
/// private chunks are named by its row in the upper half and their block index in the lower
/// (`ensure_tier_keys` in the engine), so they fill one group's consecutive slots: one entry of the rows'
/// window (`Groups`) and one vector or run per row instead of one entry per chunk (a table's inserts and
/// growth were most of a rarely hit tier's cost, results/README.md §CPU tier). A content key (a hash) is a group of one, its
/// slot kept inline (`Slots::One`: no allocation); a key beyond its group's slots is a single, in a map
/// of its own.
///
/// Exact for any keys: a group starts with, and its slots only grow at their end by, keys absent from
/// the tier, so a single is never inside its group's slots (a key is in one place or none).
/// Memory: a group spans from its first slot to its last held chunk (empty slots at the end are
/// trimmed, a group with none held dropped), so at most a request's chunks per row with one held.
///
/// The record of a request named as a row (the engine names a request's private chunks and the request
/// itself by the same number) is kept here too while it is one run of keys (`recs`, a `Rec`), by the
/// same name: a store of the request's private chunks with its record (`store_own_run`) and its finish
/// (`CpuTier::finish`) find both by subtraction (the record was once the group's own field: a group
/// entry of 80 bytes where 48 now, the rows' window the most of a filling tier's memory).
/// The group an eviction's lookups found last (`Chunks::get_near`): its key's upper half and the
/// group, if any.
pub(super) type Near<'a> = Option<(u64, Option<&'a Group>)>;

/// The groups by their key's upper half: rows' names in a window indexed by row (`ByName`: no hashing,
/// and the rows stored lately and those evicted, oldest first, sit together), any other in a hash
/// table (a content key's group placed at random).
pub(super) type Groups = ByName<Group>;

#[derive(Clone, Debug, Default)]
pub(super) struct Chunks {
    pub(super) groups: Groups,
    pub(super) singles: KeyMap<Chunk>,
    pub(super) len: usize,
    /// Requests' records that are one run of keys, by request id (`Rec`).
    pub(super) recs: ByName<Rec>,
}

#[derive(Clone, Debug)]
pub(super) struct Group {
    /// The lower key half of `slots[0]`.
    pub(super) base: u64,
    pub(super) slots: Slots,
    pub(super) held: u32,
}

const _: () = assert!(size_of::<Group>() == 48 && size_of::<Option<Group>>() == 48);

/// A request's record that is one run of its own keys, under LRU: its rank and the keys
/// `(rid, lo..lo + n)` (`rid` the request's id) at positions `pos..pos + n` (`Access::span`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Rec {
    pub(super) rank: NonZeroU64,
    pub(super) lo: u64,
    pub(super) n: u64,
    pub(super) pos: u64,
}

impl Rec {
    /// Whether keys from `lo` at positions from `pos` continue it (`extend_key_run`'s case).
    #[inline]
    pub(super) fn continued_by(self, lo: u64, pos: u64) -> bool {
        self.lo.checked_add(self.n) == Some(lo) && self.pos + self.n == pos
    }
}

impl Group {
    /// The last `m` (>= 1, fewer than all) slots of its run taken out.
    #[inline]
    fn take_run_tail(&mut self, m: u32) {
        let Slots::Run(r) = &mut self.slots else {
            unreachable!("a run")
        };
        r.n -= m;
        self.held -= m;
        if r.n == 1 {
            self.slots = Slots::One(r.at(0));
        }
    }

    /// The chunk of lower key half `lo` taken out of the slots (None if not held); the caller drops
    /// a group left with no chunk.
    #[inline]
    fn remove(&mut self, lo: u64) -> Option<Chunk> {
        let i = lo.wrapping_sub(self.base);
        if i >= self.slots.len() as u64 {
            return None;
        }
        let c = self.slots.at(i as usize);
        if !c.held {
            return None;
        }
        self.held -= 1;
        if self.held == 0 {
            return Some(c); // (the group goes)
        }
        if let Slots::Run(r) = &mut self.slots
            && i + 1 == u64::from(r.n)
        {
            // A run's last slot (the LRU's first of a run): the run one shorter.
            r.n -= 1;
            if r.n == 1 {
                self.slots = Slots::One(r.at(0));
            }
        } else {
            self.slots.as_mut()[i as usize].held = false;
            while self.slots.len() > 0 && !self.slots.at(self.slots.len() - 1).held {
                self.slots.pop();
            }
        }
        Some(c)
    }

    /// `Chunks::rerank_run` on this group's slots.
    #[inline(always)]
    #[allow(clippy::inline_always)] // a finish's, once a request: measured (results/README.md §CPU tier)
    pub(super) fn rerank(
        &mut self,
        hi: u64,
        lo: u64,
        n: usize,
        next_rank: &mut u64,
        order: Order<'_>,
    ) -> bool {
        let j = lo.wrapping_sub(self.base);
        let len = self.slots.len();
        if j >= len as u64 || n > len - j as usize {
            return false;
        }
        if let Slots::Run(r) = &mut self.slots
            && j == 0
            && n == len
        {
            // The whole run, all held: the last slot takes the next rank, the first the newest.
            *next_rank += n as u64;
            r.req = *next_rank;
            r.dreq = true;
            r.pos = 0;
            r.dpos = false;
            if r.ready {
                // (all evictable: a run is unpinned)
                match order {
                    Order::Heap(heap) => r.push_to(heap, hi, self.base),
                    // (in order: a finish's ranks are the newest; a span it cannot name is found
                    // among the groups by the first eviction, as any entry not logged)
                    Order::Log(log) => {
                        if let Some(span) = r.span(hi, self.base) {
                            log.push(span);
                        }
                    }
                    Order::Off => {}
                }
            }
            return true;
        }
        let base = self.base;
        let mut heap = match order {
            Order::Heap(heap) => Some(heap),
            _ => None,
        };
        for (i, c) in self.slots.as_mut()[j as usize..j as usize + n]
            .iter_mut()
            .enumerate()
            .rev()
        {
            if c.held {
                *next_rank += 1;
                c.set_rank((*next_rank, Reverse(0)));
                if let Some(heap) = heap.as_deref_mut()
                    && c.evictable()
                {
                    let key = run_key(hi, base.wrapping_add(j + i as u64));
                    heap.push(Reverse((c.rank(), key)));
                }
            }
        }
        true
    }

    /// `n` new pending chunks of rank `req` at positions `pos..` as the slots of a group without any.
    fn pending_slots(n: u32, req: u64, pos: u32) -> Slots {
        let run = Run::pending(n, pos, req);
        if n >= 2 {
            Slots::Run(run)
        } else {
            Slots::One(run.at(0))
        }
    }
}

/// A group's slots: one kept inline (a key alone, as a content key: no allocation), a vector, or a
/// *run*: chunks all held, unpinned and alike but for a rank that moves by one a slot (no allocation,
/// and a store's completion or a finish's re-ranking of the whole run is one write: a request's
/// private chunks spend their life so). Anything else made of a run turns it into a vector first.
#[derive(Clone, Debug)]
pub(super) enum Slots {
    One(Chunk),
    Many(Vec<Chunk>),
    Run(Run),
}

/// `n` held, unpinned chunks, ready or all pending; slot `i`'s rank is `(req - i * dreq, pos + i * dpos)`
/// (a store's: one request rank, positions up by one; a finish's: ranks down by one, position 0).
#[derive(Clone, Copy, Debug)]
#[allow(clippy::struct_excessive_bools)] // (four flags in its padding: 24 bytes, a group 48, asserted)
pub(super) struct Run {
    pub(super) n: u32,
    pub(super) pos: u32,
    pub(super) req: u64,
    pub(super) dreq: bool,
    pub(super) dpos: bool,
    pub(super) ready: bool,
    /// Its span found in the log by the first eviction's build (`CpuTier::build_heap`), which clears
    /// it again: false at any other time.
    pub(super) marked: bool,
}

impl Run {
    /// `n` new pending chunks of request rank `req` at positions `pos..pos + n` (a store's run).
    #[inline]
    fn pending(n: u32, pos: u32, req: u64) -> Self {
        Run {
            n,
            pos,
            req,
            dreq: false,
            dpos: true,
            ready: false,
            marked: false,
        }
    }

    /// The eviction order's entries of its `n` chunks (`RankQueue`), from its last slot (the least), its
    /// keys `(hi, base..base + n)`; None for a run a span cannot name (then listed).
    #[inline]
    pub(super) fn span(self, hi: u64, base: u64) -> Option<Span> {
        let n = u64::from(self.n);
        Span::run(
            (
                self.at(self.n as usize - 1).rank(),
                (hi, base.wrapping_add(n - 1)),
            ),
            n,
            self.dreq,
            self.dpos,
        )
    }

    /// Its entries pushed to the eviction order: as one span, or one by one when a span cannot name
    /// them (`span`).
    #[inline]
    fn push_to(self, heap: &mut RankQueue, hi: u64, base: u64) {
        if let Some(span) = self.span(hi, base) {
            heap.push_span(span);
            return;
        }
        for i in (0..self.n as usize).rev() {
            let key = run_key(hi, base.wrapping_add(i as u64));
            heap.push(Reverse((self.at(i).rank(), key)));
        }
    }

    #[inline]
    fn at(self, i: usize) -> Chunk {
        let i32_ = i as u32;
        Chunk {
            req: self.req - if self.dreq { i as u64 } else { 0 },
            pos: self.pos + if self.dpos { i32_ } else { 0 },
            pins: 0,
            ready: self.ready,
            held: true,
        }
    }
}

impl Slots {
    #[inline]
    pub(super) fn len(&self) -> usize {
        match self {
            Slots::One(_) => 1,
            Slots::Many(v) => v.len(),
            Slots::Run(r) => r.n as usize,
        }
    }

    /// Slot `i` (< `len`).
    #[inline]
    pub(super) fn at(&self, i: usize) -> Chunk {
        match self {
            Slots::One(c) => *c,
            Slots::Many(v) => v[i],
            Slots::Run(r) => r.at(i),
        }
    }

    /// The slots, a run's made a vector first.
    #[inline]
    pub(super) fn as_mut(&mut self) -> &mut [Chunk] {
        if let Slots::Run(r) = *self {
            *self = Slots::Many((0..r.n as usize).map(|i| r.at(i)).collect());
        }
        match self {
            Slots::One(c) => std::slice::from_mut(c),
            Slots::Many(v) => v,
            Slots::Run(_) => unreachable!("made a vector above"),
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = Chunk> + '_ {
        (0..self.len()).map(|i| self.at(i))
    }

    pub(super) fn push(&mut self, c: Chunk) {
        match self {
            Slots::One(a) => *self = Slots::Many(vec![*a, c]),
            Slots::Many(v) => v.push(c),
            Slots::Run(_) => {
                self.as_mut();
                self.push(c);
            }
        }
    }

    pub(super) fn pop(&mut self) {
        match self {
            Slots::One(_) => *self = Slots::Many(Vec::new()),
            Slots::Many(v) => {
                v.pop();
            }
            Slots::Run(_) => {
                self.as_mut();
                self.pop();
            }
        }
    }

    pub(super) fn extend(&mut self, more: impl ExactSizeIterator<Item = Chunk>) {
        match self {
            Slots::One(a) => {
                let mut v = Vec::with_capacity(1 + more.len());
                v.push(*a);
                v.extend(more);
                *self = Slots::Many(v);
            }
            Slots::Many(v) => v.extend(more),
            Slots::Run(_) => {
                self.as_mut();
                self.extend(more);
            }
        }
    }

    /// The slots of `chunks` (at least one).
    pub(super) fn of(mut chunks: impl ExactSizeIterator<Item = Chunk>) -> Self {
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
pub(super) fn run_of(mut keys: impl Iterator<Item = BlockKey>) -> Option<(u64, u64, usize)> {
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
pub(super) fn run_in_order(order: &[(BlockKey, u64)]) -> Option<(u64, u64, usize)> {
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

/// The key `(hi, lo)`.
#[inline]
pub(super) fn run_key(hi: u64, lo: u64) -> BlockKey {
    BlockKey((u128::from(hi) << 64) | u128::from(lo))
}

#[inline]
pub(super) fn split_key(key: BlockKey) -> (u64, u64) {
    ((key.0 >> 64) as u64, key.0 as u64)
}

impl Chunks {
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(super) fn get(&self, key: BlockKey) -> Option<Chunk> {
        self.held_in(self.groups.get(split_key(key).0), key)
    }

    /// `get`, the group of the key before kept in `near` (an eviction's keys come a run of one group at
    /// a time: one table lookup a run).
    #[inline]
    pub(super) fn get_near<'a>(&'a self, key: BlockKey, near: &mut Near<'a>) -> Option<Chunk> {
        let g = self.group_near(split_key(key).0, near);
        self.held_in(g, key)
    }

    /// Group `hi`, kept in `near` for the next call with the same `hi` (`Near`).
    #[inline]
    fn group_near<'a>(&'a self, hi: u64, near: &mut Near<'a>) -> Option<&'a Group> {
        match *near {
            Some((h, g)) if h == hi => g,
            _ => {
                let g = self.groups.get(hi);
                *near = Some((hi, g));
                g
            }
        }
    }

    /// `key` as held in its group `g` (looked up by the caller) or among the singles.
    #[inline]
    fn held_in(&self, g: Option<&Group>, key: BlockKey) -> Option<Chunk> {
        if let Some(g) = g {
            let i = split_key(key).1.wrapping_sub(g.base);
            if i < g.slots.len() as u64 {
                let c = g.slots.at(i as usize);
                return c.held.then_some(c);
            }
        }
        if self.singles.is_empty() {
            return None;
        }
        self.singles.get(&key).copied()
    }

    /// Whether the first `k` entries of `span` are all live (each key held, evictable, of that rank)
    /// because they are the last `k` slots of a ready run whose ranks step as the span's (the span a
    /// run's completion or finish pushed, the run unchanged since but for its later slots taken): then
    /// they need no check one by one. False says nothing. `near` as `get_near`'s.
    #[inline]
    pub(super) fn live_run_tail<'a>(&'a self, span: Span, k: usize, near: &mut Near<'a>) -> bool {
        let (hi, lo) = span.key_halves();
        let g = self.group_near(hi, near);
        let Some(g) = g else {
            return false;
        };
        let Slots::Run(r) = g.slots else {
            return false;
        };
        let i = lo.wrapping_sub(g.base);
        r.ready
            && i < u64::from(r.n)
            && k as u64 <= i + 1
            && r.at(i as usize).rank() == span.head().0
            && (k == 1 || span.steps() == (r.dreq, r.dpos))
    }

    /// Whether none of the first `k` entries of `span` is live, told without checking them one by one:
    /// their group is gone, or is a run that is pending or whose request ranks all differ from theirs
    /// (a completion's span once its request's finish re-ranked the run: half the spans). False says
    /// nothing. `near` as `get_near`'s.
    #[inline]
    pub(super) fn stale_span<'a>(&'a self, span: Span, k: usize, near: &mut Near<'a>) -> bool {
        if !self.singles.is_empty() {
            return false;
        }
        let (hi, _) = span.key_halves();
        let g = self.group_near(hi, near);
        let Some(g) = g else {
            return true; // (no chunk of the group held)
        };
        let Slots::Run(r) = g.slots else {
            return false;
        };
        // A key beyond the run's slots is not held (no singles); one within has a request rank in
        // the run's range.
        let (least, most) = span.req_range(k);
        let top = r.req;
        let bottom = r.req - if r.dreq { u64::from(r.n - 1) } else { 0 };
        !r.ready || most < bottom || least > top
    }

    /// `MISS`, `HIT` (held and ready) or `PENDING` for `key`, read in place (`CpuTier::lookup`).
    #[inline]
    pub(super) fn state(&self, key: BlockKey) -> u8 {
        let (hi, lo) = split_key(key);
        if let Some(g) = self.groups.get(hi) {
            let i = lo.wrapping_sub(g.base);
            let held_ready = match &g.slots {
                Slots::One(c) if i == 0 => Some((c.held, c.ready)),
                Slots::Many(v) if i < v.len() as u64 => {
                    let c = &v[i as usize];
                    Some((c.held, c.ready))
                }
                Slots::Run(r) if i < u64::from(r.n) => Some((true, r.ready)),
                _ => None,
            };
            if let Some((held, ready)) = held_ready {
                return match (held, ready) {
                    (false, _) => super::MISS,
                    (true, true) => super::HIT,
                    (true, false) => super::PENDING,
                };
            }
        }
        if self.singles.is_empty() {
            return super::MISS;
        }
        match self.singles.get(&key) {
            None => super::MISS,
            Some(c) if c.ready => super::HIT,
            Some(_) => super::PENDING,
        }
    }

    #[inline]
    pub(super) fn get_mut(&mut self, key: BlockKey) -> Option<&mut Chunk> {
        let (hi, lo) = split_key(key);
        if let Some(g) = self.groups.get_mut(hi) {
            let i = lo.wrapping_sub(g.base);
            if i < g.slots.len() as u64 {
                let c = &mut g.slots.as_mut()[i as usize];
                return if c.held { Some(c) } else { None };
            }
        }
        if self.singles.is_empty() {
            return None;
        }
        self.singles.get_mut(&key)
    }

    #[inline]
    pub(super) fn contains(&self, key: BlockKey) -> bool {
        self.get(key).is_some()
    }

    /// Holds `key` as `chunk` (replacing it if held, as a map's insert): in its group's slots if they
    /// reach it or it continues them, else among the singles (a key alone, as a content key, starts no
    /// group: only `insert_run` does).
    pub(super) fn insert(&mut self, key: BlockKey, mut chunk: Chunk) {
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
                let slot = &mut g.slots.as_mut()[i as usize];
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
    pub(super) fn insert_run(
        &mut self,
        hi: u64,
        lo: u64,
        chunks: impl ExactSizeIterator<Item = Chunk>,
    ) {
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

    /// `insert_run` of `n` >= 1 pending chunks of request rank `req` at positions `pos..pos + n` (a
    /// request's new private chunks): a run of slots where they start a group or continue a pending
    /// run of the same rank, else as `insert_run` does.
    pub(super) fn insert_pending_run(&mut self, hi: u64, lo: u64, n: u32, req: u64, pos: u32) {
        let run = Run::pending(n, pos, req);
        match self.groups.entry(hi) {
            Entry::Vacant(e) if n >= 2 => {
                e.insert(Group {
                    base: lo,
                    slots: Slots::Run(run),
                    held: n,
                });
                self.len += n as usize;
                return;
            }
            Entry::Occupied(mut e) => {
                let g = e.get_mut();
                if let Slots::Run(r) = &mut g.slots
                    && lo.wrapping_sub(g.base) == u64::from(r.n)
                    && !r.ready
                    && !r.dreq
                    && r.dpos
                    && r.req == req
                    && r.pos.checked_add(r.n) == Some(pos)
                {
                    r.n += n;
                    g.held += n;
                    self.len += n as usize;
                    return;
                }
            }
            Entry::Vacant(_) => {}
        }
        self.insert_run(hi, lo, (0..n as usize).map(|i| run.at(i)));
    }

    /// `insert` of each `(key, chunk)` in order, one group lookup per run of keys sharing their upper
    /// half.
    pub(super) fn insert_many(&mut self, items: impl ExactSizeIterator<Item = (BlockKey, Chunk)>) {
        let mut items = items.peekable();
        while let Some((key, chunk)) = items.next() {
            let (hi, lo) = split_key(key);
            self.insert(key, chunk);
            // The keys after it in its group: appended while they follow on.
            let Some(g) = self.groups.get_mut(hi) else {
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

    pub(super) fn remove(&mut self, key: BlockKey) -> Option<Chunk> {
        if !self.singles.is_empty()
            && let Some(c) = self.singles.remove(&key)
        {
            self.len -= 1;
            return Some(c);
        }
        let (hi, lo) = split_key(key);
        if let Entry::Occupied(mut e) = self.groups.entry(hi) {
            let c = e.get_mut().remove(lo)?;
            self.len -= 1;
            if e.get().held == 0 {
                e.remove();
            }
            return Some(c);
        }
        None
    }

    /// `remove` of the keys of the first `k` entries of `span` (held ones): one table operation for
    /// the last `k` slots of a run, a run's usual eviction (the run shorter).
    pub(super) fn remove_span(&mut self, span: Span, k: usize) {
        let (hi, lo) = span.key_halves();
        if k > 1
            && self.singles.is_empty()
            && let Entry::Occupied(mut e) = self.groups.entry(hi)
        {
            let g = e.get_mut();
            if let Slots::Run(r) = g.slots
                && lo.wrapping_sub(g.base) + 1 == u64::from(r.n)
                && k as u64 <= u64::from(r.n)
            {
                if k as u64 == u64::from(r.n) {
                    e.remove(); // (all of it: the group goes)
                } else {
                    g.take_run_tail(k as u32);
                }
                self.len -= k;
                return;
            }
        }
        for (_, key) in span.entries(k) {
            self.remove(key);
        }
    }

    /// `f(i, key, chunk)` for the `i`th of `keys` (None: not held), one group lookup per run of keys
    /// sharing their upper half (a request's private chunks).
    #[inline]
    pub(super) fn visit(
        &self,
        keys: impl Iterator<Item = BlockKey>,
        mut f: impl FnMut(usize, BlockKey, Option<Chunk>),
    ) {
        let mut cur: Option<(u64, Option<&Group>)> = None;
        for (i, key) in keys.enumerate() {
            let (hi, lo) = split_key(key);
            let g = match cur {
                Some((h, g)) if h == hi => g,
                _ => {
                    let g = self.groups.get(hi);
                    cur = Some((hi, g));
                    g
                }
            };
            if let Some(g) = g {
                let j = lo.wrapping_sub(g.base);
                if j < g.slots.len() as u64 {
                    let c = g.slots.at(j as usize);
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
                    self.singles.get(&key).copied()
                },
            );
        }
    }

    /// Whether no key `(hi, lo..lo + n)` is held (for a run of keys: one group lookup).
    #[inline]
    pub(super) fn none_held(&self, hi: u64, lo: u64, n: u64) -> bool {
        if !self.singles.is_empty() {
            return false; // (not decided here)
        }
        self.groups.get(hi).is_none_or(|g| {
            // The run and the slots do not overlap (each taken from its own start, modulo 2^64).
            let len = g.slots.len() as u64;
            lo.wrapping_sub(g.base) >= len && g.base.wrapping_sub(lo) >= n
        })
    }

    /// Keys `(hi, lo..lo + n)` are stored: the pending chunks among them become ready. Returns how many
    /// did, or None (nothing changed) unless the group's slots hold all of those keys.
    #[inline(always)]
    #[allow(clippy::inline_always)] // a store's completion, once a request: measured (results/README.md §CPU tier)
    pub(super) fn ready_run(
        &mut self,
        hi: u64,
        lo: u64,
        n: usize,
        heap: Option<&mut RankQueue>,
    ) -> Option<u64> {
        let g = self.groups.get_mut(hi)?;
        let j = lo.wrapping_sub(g.base);
        let len = g.slots.len();
        if j >= len as u64 || n > len - j as usize {
            return None;
        }
        if let Slots::Run(r) = &mut g.slots
            && j == 0
            && n == len
        {
            // The whole run: one write (and one span of the eviction order).
            let was = r.ready;
            r.ready = true;
            if was {
                return Some(0);
            }
            if let Some(heap) = heap {
                // (its request still runs, or it is a span stale already: its finish re-ranks it)
                match r.span(hi, g.base) {
                    Some(span) => heap.push_young(span),
                    None => r.push_to(heap, hi, g.base),
                }
            }
            return Some(n as u64);
        }
        let mut ready = 0;
        let base = g.base;
        let mut heap = heap;
        // (from the last: a store's chunks rank down by position, so their entries come in order)
        for (i, c) in g.slots.as_mut()[j as usize..j as usize + n]
            .iter_mut()
            .enumerate()
            .rev()
        {
            if c.held && !c.ready {
                c.ready = true;
                ready += 1;
                if let Some(heap) = heap.as_deref_mut()
                    && c.pins == 0
                {
                    heap.push(Reverse((
                        c.rank(),
                        run_key(hi, base.wrapping_add(j + i as u64)),
                    )));
                }
            }
        }
        Some(ready)
    }

    /// The run whose whole slots span `s` names (`Run::span`), ready: a logged finish's span still
    /// current (`CpuTier::log`).
    #[inline]
    pub(super) fn logged_run_mut(&mut self, s: Span) -> Option<&mut Run> {
        let (hi, _) = s.key_halves();
        let g = self.groups.get_mut(hi)?;
        let base = g.base;
        match &mut g.slots {
            Slots::Run(r) if r.ready && r.span(hi, base) == Some(s) => Some(r),
            _ => None,
        }
    }

    /// The held chunks among keys `(hi, lo..lo + n)`, from the last to the first, each take the next
    /// rank `(*next_rank + 1, -0)` (a finish's re-ranking); false (nothing changed) unless the group's
    /// slots hold all of those keys.
    #[inline]
    pub(super) fn rerank_run(
        &mut self,
        hi: u64,
        lo: u64,
        n: usize,
        next_rank: &mut u64,
        order: Order<'_>,
    ) -> bool {
        self.groups
            .get_mut(hi)
            .is_some_and(|g| g.rerank(hi, lo, n, next_rank, order))
    }

    /// Whether `store_own_run((hi, lo, n, pos), ..)` stores (none of the keys held, the group's record
    /// none or ending where they start); evicting other chunks first changes no answer.
    #[inline]
    pub(super) fn own_run_fits(&self, hi: u64, lo: u64, n: u64, pos: u64) -> bool {
        self.groups.get(hi).is_none_or(|g| {
            lo.wrapping_sub(g.base) >= g.slots.len() as u64 && g.base.wrapping_sub(lo) >= n
        }) && self.recs.get(hi).is_none_or(|r| r.continued_by(lo, pos))
    }

    /// `insert_pending_run(hi, lo, n, rank, pos)` of request `hi`'s new private chunks with its record
    /// (`lru_access(hi)` then `extend_key_run`, which the caller finds in no `Access`) made or extended
    /// (`recs`), the request taking rank `*next_rank + 1` if it has none. False, nothing changed, if a
    /// key is held or the request's record does not end where the run starts (the caller's general path
    /// decides then).
    #[inline]
    pub(super) fn store_own_run(
        &mut self,
        (hi, lo, n, pos): (u64, u64, u32, u32),
        next_rank: &mut u64,
    ) -> bool {
        let (n64, pos64) = (u64::from(n), u64::from(pos));
        if !self.singles.is_empty() {
            return false; // (`none_held` would not decide: the caller's path does)
        }
        // The group's and the record's entries held together (one lookup each), nothing changed
        // before both are known to take the run.
        let (groups, recs) = (&mut self.groups, &mut self.recs);
        let group = groups.entry(hi);
        if let Entry::Occupied(e) = &group {
            // None of the keys held: the run and the slots do not overlap (as `none_held`).
            let g = e.get();
            if lo.wrapping_sub(g.base) < g.slots.len() as u64 || g.base.wrapping_sub(lo) < n64 {
                return false;
            }
        }
        let rank = match recs.entry(hi) {
            Entry::Vacant(e) => {
                *next_rank += 1;
                let rank = NonZeroU64::new(*next_rank).expect("ranks start at 1");
                e.insert(Rec {
                    rank,
                    lo,
                    n: n64,
                    pos: pos64,
                });
                rank
            }
            Entry::Occupied(mut e) => {
                if !e.get().continued_by(lo, pos64) {
                    return false;
                }
                let r = e.get_mut();
                r.n += n64; // (as `extend_key_run` extends a span)
                r.rank
            }
        };
        let req = rank.get();
        let g = match group {
            Entry::Vacant(e) => {
                e.insert(Group {
                    base: lo,
                    slots: Group::pending_slots(n, req, pos),
                    held: n,
                });
                self.len += n as usize;
                return true;
            }
            Entry::Occupied(e) => e.into_mut(),
        };
        let len = g.slots.len() as u64;
        if let Slots::Run(r) = &mut g.slots
            && lo.wrapping_sub(g.base) == u64::from(r.n)
            && !r.ready
            && !r.dreq
            && r.dpos
            && r.req == req
            && r.pos.checked_add(r.n) == Some(pos)
        {
            r.n += n; // (as `insert_pending_run` continues a run)
        } else if lo.wrapping_sub(g.base) == len {
            let run = Run::pending(n, pos, req);
            g.slots.extend((0..n as usize).map(|i| run.at(i)));
        } else {
            // Not where its slots end (keys before them, or a gap): as `insert_run` places them.
            let run = Run::pending(n, pos, req);
            self.insert_many(
                (0..n as usize).map(|i| (run_key(hi, lo.wrapping_add(i as u64)), run.at(i))),
            );
            return true;
        }
        g.held += n;
        self.len += n as usize;
        true
    }

    /// `visit` with the chunks mutable (`f` sees only held ones).
    #[inline]
    pub(super) fn visit_mut(
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
            let Some(g) = groups.get_mut(hi) else {
                if let Some(c) = singles.get_mut(&key) {
                    f(key, c);
                }
                continue;
            };
            let base = g.base;
            let slots = g.slots.as_mut();
            let mut next = Some((key, lo));
            while let Some((key, lo)) = next {
                let j = lo.wrapping_sub(base);
                if j < slots.len() as u64 {
                    let c = &mut slots[j as usize];
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
    pub(super) fn iter(&self) -> impl Iterator<Item = (BlockKey, Chunk)> + '_ {
        self.groups
            .iter()
            .flat_map(|(hi, g)| {
                g.slots
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.held)
                    .map(move |(i, c)| {
                        let lo = g.base.wrapping_add(i as u64);
                        (BlockKey((u128::from(hi) << 64) | u128::from(lo)), c)
                    })
            })
            .chain(self.singles.iter().map(|(&k, &c)| (k, c)))
    }

    pub(super) fn values(&self) -> impl Iterator<Item = Chunk> + '_ {
        self.iter().map(|(_, c)| c)
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = BlockKey> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// Its own consistency: counts, no empty group or trailing empty slot, no single inside a group, a
    /// run of slots as it says.
    pub(super) fn check(&self) -> std::result::Result<(), String> {
        self.groups.check()?;
        let mut n = self.singles.len();
        for (hi, g) in self.groups.iter() {
            let held = g.slots.iter().filter(|c| c.held).count();
            let last_held = g.slots.len() > 0 && g.slots.at(g.slots.len() - 1).held;
            if held != g.held as usize || held == 0 || !last_held {
                return Err(format!("group {hi:#x} miscounts or ends in an empty slot"));
            }
            if let Slots::Run(r) = g.slots
                && (r.n < 2
                    || r.marked
                    || (r.dreq && r.req < u64::from(r.n))
                    || (r.dpos && r.pos.checked_add(r.n).is_none()))
            {
                return Err(format!(
                    "group {hi:#x}'s run of slots is out of range or marked"
                ));
            }
            n += held;
        }
        if n != self.len {
            return Err(format!("{} chunks counted, {n} held", self.len));
        }
        for k in self.singles.keys() {
            let (hi, lo) = split_key(*k);
            if let Some(g) = self.groups.get(hi)
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
