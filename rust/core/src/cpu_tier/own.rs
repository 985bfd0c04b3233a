//! A running request's own prompt run, held outside the groups (DESIGN.md §CPU tier, "A request's own
//! run"): the engine's usual store, of a run of a request's private chunks that no one else names,
//! kept in a small slab of 32-byte slots (`Owns`) the engine names by handle, until the request
//! finishes and its run retires to the lane. Anything else the run meets *demotes* it: it is written
//! into the groups exactly as `try_store_run` would have kept it (a `Group` and the request's `Rec`),
//! and the general path carries on. Where a run is kept changes no decision: which chunks are held,
//! their ranks and their states are the same either way (`an_own_run_decides_as_a_row_run`).
//!
//! From the first eviction on (`heap_live`), the eviction order finds the own runs through `Owns::index`,
//! their ranks in creation order (a run's rank is the newest at its creation), and takes none: one
//! that is the least evictable is demoted (its span into the queue, as its completion would have
//! pushed it) and the eviction carries on (`lru_evict`).

use std::collections::VecDeque;
use std::num::NonZeroU64;

use super::group::{Group, Rec, Run, Slots};
use super::order::{COUNT, Span};
use super::rows::Entry;
use super::{CpuTier, Eviction};
use crate::BlockKey;

/// A request's private prompt run: keys `(hi, lo..lo + n)` at positions `lo..lo + n`, all pending or
/// all ready, unpinned, of LRU rank `(rank, -position)`: exactly a group's `Slots::Run` (one request
/// rank, positions up by one) with the request's one-run record `Rec { rank, lo, n, pos: lo }`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Own {
    /// The request's id and its keys' upper half (a row's name: never 0); 0: a free slot.
    pub(super) hi: u64,
    pub(super) rank: u64,
    pub(super) lo: u32,
    pub(super) n: u32,
    pub(super) ready: bool,
}

const _: () = assert!(size_of::<Own>() == 32);

/// The own runs by handle (1-based: 0 names none): slots reused last-freed first, so a finish's slot
/// is the next store's and the slab stays in cache. A handle is valid for request `hi` while its slot's
/// `hi` is `hi`; a request's id is never reused, so a stale handle (its slot freed, or reused by
/// another request) is never valid again.
#[derive(Clone, Debug, Default)]
pub(super) struct Owns {
    slots: Vec<Own>,
    free: Vec<u32>,
    /// Chunks held in own runs (part of `CpuTier::used`).
    pub(super) len: u64,
    /// Once the order is live: `(rank, handle)` of the own runs in creation order, so in rank order;
    /// lazily deleted (an entry whose slot is free or holds another rank is dead).
    index: VecDeque<(u64, u32)>,
}

impl Owns {
    /// The slot handle `h` names if it is request `hi`'s.
    #[inline]
    pub(super) fn valid(&self, h: u32, hi: u64) -> Option<usize> {
        let i = (h as usize).wrapping_sub(1);
        (self.slots.get(i).is_some_and(|o| o.hi == hi) && hi != 0).then_some(i)
    }

    #[inline]
    fn alloc(&mut self, own: Own) -> u32 {
        if let Some(h) = self.free.pop() {
            self.slots[h as usize - 1] = own;
            return h;
        }
        self.slots.push(own);
        u32::try_from(self.slots.len()).expect("fewer than 2^32 own runs")
    }

    #[inline]
    fn release(&mut self, i: usize) {
        self.slots[i].hi = 0;
        self.free.push(i as u32 + 1);
    }

    /// The index made from the live slots (the first eviction's).
    pub(super) fn build_index(&mut self) {
        self.index.clear();
        let mut live: Vec<(u64, u32)> = (0..self.slots.len())
            .filter(|&i| self.slots[i].hi != 0)
            .map(|i| (self.slots[i].rank, i as u32 + 1))
            .collect();
        live.sort_unstable();
        self.index.extend(live);
    }

    #[inline]
    fn live_entry(&self, (rank, h): (u64, u32)) -> Option<usize> {
        let i = h as usize - 1;
        let o = self.slots[i];
        (o.hi != 0 && o.rank == rank).then_some(i)
    }

    /// The least evictable own run (ready: the index's first ready run; the pending ones before it
    /// are stores in flight, a few) as the span of its entries, and its slot; dead entries at the
    /// front dropped.
    #[inline]
    pub(super) fn least_ready(&mut self) -> Option<(Span, usize)> {
        while let Some(&e) = self.index.front() {
            if self.live_entry(e).is_some() {
                break;
            }
            self.index.pop_front();
        }
        self.index.iter().find_map(|&e| {
            let i = self.live_entry(e)?;
            let o = self.slots[i];
            o.ready.then(|| (o.span(), i))
        })
    }

    /// The live slots.
    pub(super) fn iter(&self) -> impl Iterator<Item = Own> + '_ {
        self.slots.iter().copied().filter(|o| o.hi != 0)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0 && self.slots.len() == self.free.len()
    }

    /// The slab's own consistency: free slots exactly those listed, once each; `len` the live runs'.
    pub(super) fn check(&self) -> std::result::Result<(), String> {
        let mut free = vec![false; self.slots.len()];
        for &h in &self.free {
            let i = (h as usize).wrapping_sub(1);
            if i >= self.slots.len() || free[i] || self.slots[i].hi != 0 {
                return Err(format!("own slot {h} is listed free wrongly"));
            }
            free[i] = true;
        }
        if let Some(i) = (0..self.slots.len()).find(|&i| !free[i] && self.slots[i].hi == 0) {
            return Err(format!("own slot {} is neither live nor free", i + 1));
        }
        if self.iter().any(|o| o.n > COUNT) {
            return Err("an own run longer than a span".into());
        }
        let len: u64 = self.iter().map(|o| u64::from(o.n)).sum();
        if len != self.len {
            return Err(format!("own runs hold {len} chunks, counted {}", self.len));
        }
        if self
            .iter()
            .any(|o| o.n == 0 || o.lo.checked_add(o.n).is_none())
        {
            return Err("an own run is empty or past 2^32 positions".into());
        }
        Ok(())
    }
}

impl Own {
    /// The eviction order's entries of its chunks (`Run::span`), from its last (the least).
    #[inline]
    fn span(self) -> Span {
        self.run()
            .span(self.hi, u64::from(self.lo))
            .expect("an own run is a span")
    }

    /// It as a group's run of slots.
    #[inline]
    fn run(self) -> Run {
        Run {
            ready: self.ready,
            ..Run::pending(self.n, self.lo, self.rank)
        }
    }
}

/// The engine's handle for a request with no record in the tier at all, and no own run yet
/// (`CpuTier::store_own`): nothing was stored, loaded, looked up or reused for it (a request admitted
/// without a lookup, before its first offer), so its first store skips the tier's look for another
/// record. Never a slot's handle (slots are fewer than 2^32 - 1).
pub(crate) const OWN_FRESH: u32 = u32::MAX;

/// Whether an own run may hold `n` chunks from position `lo`: positions below 2^32, as a span names.
#[inline]
fn fits(lo: u64, n: u64) -> bool {
    n >= 1 && n <= u64::from(COUNT) && lo.checked_add(n).is_some_and(|e| u32::try_from(e).is_ok())
}

impl CpuTier {
    /// Whether stores may be kept as own runs at all: LRU without a store threshold (the only policy
    /// with one-run records), and no singles (as `try_store_run`, which decides nothing beside them).
    #[inline]
    fn own_ok(&self) -> bool {
        self.eviction == Eviction::Lru && self.threshold == 0 && self.chunks.singles.is_empty()
    }

    /// `try_store_run(hi, (hi, lo, n), lo, evicted)` of request `hi`'s own new private chunks (keys
    /// `(hi, lo..lo + n)` at positions `lo..lo + n`) kept as its own run, `*h` its handle (0: none yet;
    /// `OWN_FRESH`: none, and request `hi` has no record in the tier, so none is looked for):
    /// true if stored so (a new run, or the continuation of its pending one), with the decision
    /// `try_store_run` makes. False if `try_store_run` must decide (no room without evicting, a record
    /// elsewhere, a ready run extended, ...): then the request's own run, if any, has been demoted
    /// first and `*h` is 0, so the general path finds its record as it would have.
    ///
    /// The caller names no key of `hi` held anywhere unless request `hi` has a record (its keys are its
    /// own: nobody else stores them; asserted in debug builds): the engine's private chunks, which is why
    /// the own runs are the engine's alone (crate-visible; the binding's tier has none).
    #[inline(always)]
    #[allow(clippy::inline_always)] // the engine's usual store, one call site: measured (results/README.md §CPU tier)
    pub(crate) fn store_own(
        &mut self,
        h: &mut u32,
        hi: u64,
        lo: u64,
        n: u64,
        evicted: &mut Vec<BlockKey>,
    ) -> bool {
        if *h != OWN_FRESH
            && let Some(i) = self.owns.valid(*h, hi)
        {
            let o = self.owns.slots[i];
            let (start, end) = (u64::from(o.lo), u64::from(o.lo) + u64::from(o.n));
            // (as `store_own_run` continues a pending run of the same rank; the eviction takes
            // no pending chunk, so the run stays as it is)
            if !o.ready
                && lo == end
                && fits(start, end - start + n)
                && self.own_ok()
                && self.make_room(n, evicted)
            {
                self.owns.slots[i].n += n as u32;
                self.owns.len += n;
                self.debug_check();
                return true;
            }
            if self.owns.valid(*h, hi).is_some() {
                self.demote(i);
            }
            *h = 0;
            return false;
        }
        let fresh = *h == OWN_FRESH;
        *h = 0;
        debug_assert!(
            !fresh || !(self.accesses.contains_key(&hi) || self.chunks.recs.get(hi).is_some()),
            "a fresh request with a record in the tier"
        );
        if !(self.own_ok()
            && fits(lo, n)
            && (fresh
                || (self.accesses.is_empty() || !self.accesses.contains_key(&hi))
                    && (self.chunks.recs.is_empty() || self.chunks.recs.get(hi).is_none())))
        {
            return false;
        }
        debug_assert!(
            self.chunks.none_held(hi, lo, n),
            "an own run's keys are held already"
        );
        if !self.make_room(n, evicted) {
            return false;
        }
        self.next_rank += 1;
        let own = Own {
            hi,
            rank: self.next_rank,
            lo: lo as u32,
            n: n as u32,
            ready: false,
        };
        *h = self.owns.alloc(own);
        self.owns.len += n;
        if self.heap_live {
            self.owns.index.push_back((own.rank, *h));
            self.owns.compact_index();
        }
        self.debug_check();
        true
    }

    /// `complete_store_run(hi, lo, n)` of request `hi`'s own run of handle `h`: true if that store made
    /// the whole run ready; else false, and the caller's `complete_store_run` decides (the run, if
    /// still own, demoted first: a store of part of it done before the rest).
    #[inline]
    pub(crate) fn complete_own(&mut self, h: u32, hi: u64, lo: u64, n: u64) -> bool {
        let Some(i) = self.owns.valid(h, hi) else {
            return false;
        };
        let o = &mut self.owns.slots[i];
        if !o.ready && lo == u64::from(o.lo) && n == u64::from(o.n) {
            o.ready = true;
            self.num_evictable += n;
            self.debug_check();
            return true;
        }
        self.demote(i);
        false
    }

    /// `complete_store_run(hi, lo, n)` of the store of request `hi`'s own run of handle `h` (the
    /// engine's `What::Own`): `complete_own`, else the general completion it leaves to its caller.
    #[inline]
    pub(crate) fn complete_own_store(&mut self, h: u32, hi: u64, lo: u64, n: u64) {
        if !self.complete_own(h, hi, lo, n) {
            self.complete_store_run(hi, lo, n);
        }
    }

    /// `finish_unnamed(hi)` of request `hi` whose own run has handle `h`: true if its ready run retired
    /// to the lane (the span its re-ranking makes, as `finish_unnamed` retires a group's); else false,
    /// and the caller's `finish_unnamed` decides (the run, if still own, demoted first).
    #[inline]
    pub(crate) fn finish_own(&mut self, h: u32, hi: u64) -> bool {
        let Some(i) = self.owns.valid(h, hi) else {
            return false;
        };
        let o = self.owns.slots[i];
        if o.ready {
            let n = u64::from(o.n);
            let span = Span::finished(self.next_rank + 1, (hi, u64::from(o.lo)), o.n);
            debug_assert_eq!(
                Some(span),
                o.run()
                    .reranked(self.next_rank + n)
                    .span(hi, u64::from(o.lo))
            );
            self.next_rank += n;
            self.owns.len -= n;
            self.owns.release(i);
            self.lane_len += n;
            self.lane.push_back(span);
            self.debug_check();
            return true;
        }
        self.demote(i);
        false
    }

    /// Request `hi`'s own run of handle `h`, if it still has one, demoted (the engine's preemption: a
    /// preempted request looks its chunks up again).
    pub(crate) fn demote_own(&mut self, h: u32, hi: u64) {
        if let Some(i) = self.owns.valid(h, hi) {
            self.demote(i);
            self.debug_check();
        }
    }

    /// The own run of slot `i` written into the groups as `try_store_run` keeps it (its group's run
    /// of slots and its request's `Rec`; once the order is live, a ready one's span in the queue, as
    /// its completion pushed it): the same chunks held, evictable and ranked.
    pub(super) fn demote(&mut self, i: usize) {
        let o = self.owns.slots[i];
        self.owns.len -= u64::from(o.n);
        self.owns.release(i);
        let run = o.run();
        if self.heap_live && o.ready {
            self.heap.push_young(o.span()); // (`Chunks::ready_run`'s)
        }
        let slots = if o.n >= 2 {
            Slots::Run(run)
        } else {
            Slots::One(run.at(0))
        };
        let Entry::Vacant(e) = self.chunks.groups.entry(o.hi) else {
            unreachable!("an own run's keys are in no group")
        };
        e.insert(Group {
            base: u64::from(o.lo),
            slots,
            held: o.n,
        });
        self.chunks.len += o.n as usize;
        let Entry::Vacant(e) = self.chunks.recs.entry(o.hi) else {
            unreachable!("an own run's request has no other record")
        };
        e.insert(Rec {
            rank: NonZeroU64::new(o.rank).expect("ranks start at 1"),
            lo: u64::from(o.lo),
            n: u64::from(o.n),
            pos: u64::from(o.lo),
        });
    }
}

impl Owns {
    /// The index's dead entries dropped once they outnumber the live ones (plus 64).
    #[inline]
    fn compact_index(&mut self) {
        let live = self.slots.len() - self.free.len();
        if self.index.len() > 2 * live + 64 {
            let slots = &self.slots;
            self.index.retain(|&(rank, h)| {
                let o = slots[h as usize - 1];
                o.hi != 0 && o.rank == rank
            });
        }
    }

    /// The index's own consistency once the order is live: ranks strictly up, and every live slot's
    /// entry in it; before, empty.
    pub(super) fn check_index(&self, live_order: bool) -> std::result::Result<(), String> {
        if !live_order {
            return if self.index.is_empty() {
                Ok(())
            } else {
                Err("an index of own runs before the order is live".into())
            };
        }
        if self
            .index
            .iter()
            .zip(self.index.iter().skip(1))
            .any(|(a, b)| a.0 >= b.0)
        {
            return Err("the own runs' index is out of order".into());
        }
        let mut found = 0;
        for &e in &self.index {
            if self.live_entry(e).is_some() {
                found += 1;
            }
        }
        if found != self.slots.len() - self.free.len() {
            return Err("an own run missing from the index".into());
        }
        Ok(())
    }
}
