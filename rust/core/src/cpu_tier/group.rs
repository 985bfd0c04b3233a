//! A CPU tier's chunk and its group of slots (DESIGN.md §CPU tier): a held chunk's 16 bytes (`Chunk`),
//! a key's upper half's slots (`Group`: a vector, a run kept as a few numbers, or one inline), a
//! request's record that is one run of its own keys (`Rec`), and the key helpers the tier shares.
//! `chunks.rs` keeps the groups by name (`Chunks`).

use std::cmp::Reverse;
use std::num::NonZeroU64;

use super::order::{Order, RankQueue, Span};
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
    pub(super) fn take_run_tail(&mut self, m: u32) {
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
    pub(super) fn remove(&mut self, lo: u64) -> Option<Chunk> {
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
            *r = r.reranked(*next_rank);
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
    pub(super) fn pending_slots(n: u32, req: u64, pos: u32) -> Slots {
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
    /// The run a finish re-ranks whole (`Group::rerank`): its first slot of rank `newest`, each slot
    /// after it one less, all at position 0.
    #[inline]
    pub(super) fn reranked(self, newest: u64) -> Self {
        Run {
            req: newest,
            dreq: true,
            pos: 0,
            dpos: false,
            ..self
        }
    }

    /// `n` new pending chunks of request rank `req` at positions `pos..pos + n` (a store's run).
    #[inline]
    pub(super) fn pending(n: u32, pos: u32, req: u64) -> Self {
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
    pub(super) fn push_to(self, heap: &mut RankQueue, hi: u64, base: u64) {
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
    pub(super) fn at(self, i: usize) -> Chunk {
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
