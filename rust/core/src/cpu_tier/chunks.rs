//! A CPU tier's chunks in memory (`Chunks`): one slot of 16 bytes per chunk held, a row's private
//! chunks one entry of the rows' window and one vector or run of slots, content keys a group of one
//! (DESIGN.md §CPU tier).

use std::cmp::Reverse;
use std::num::NonZeroU64;

use super::KeyMap;
use super::group::{Chunk, Group, Rec, Run, Slots, run_key, split_key};
use super::order::{Order, RankQueue, Span};
use super::rows::{ByName, Entry};
use crate::BlockKey;

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

/// (`repr(C)`: the count and the singles, which the engine's usual store reads, first: `CpuTier`'s
/// layout)
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub(super) struct Chunks {
    pub(super) len: usize,
    pub(super) singles: KeyMap<Chunk>,
    pub(super) groups: Groups,
    /// Requests' records that are one run of keys, by request id (`Rec`).
    pub(super) recs: ByName<Rec>,
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
