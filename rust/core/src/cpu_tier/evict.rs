//! A CPU tier's evictability and eviction: the evictable count and the LRU's lazily deleted heap,
//! the LRU's and ARC's choice of the chunks to evict, ARC's ghost hits before a store.

use std::cmp::Reverse;

use super::group::{Chunk, Group, Rank, Slots, run_key};
use super::order::{RankQueue, Span, head_lt};
use super::own::Owns;
use super::paged::Paged;
use super::{CpuTier, Eviction, KeySet};
use crate::BlockKey;

/// A taken count's mark (`lru_evict`) for entries taken from the lane of retired runs.
const LANE: usize = 1 << (usize::BITS - 1);

impl CpuTier {
    /// Chunk `key` (held, of rank `rank`) has become evictable.
    pub(super) fn mark_evictable(&mut self, key: BlockKey, rank: Rank) {
        self.num_evictable += 1;
        if self.heap_live {
            self.heap.push(Reverse((rank, key)));
            self.compact_heap();
        }
    }

    pub(super) fn mark_pinned(&mut self) {
        self.num_evictable -= 1;
    }

    /// Rebuilds the LRU heap from the evictable chunks once stale entries make up half of it (vLLM's
    /// `_maybe_compact_heap`), so that it stays O(chunks held).
    pub(super) fn compact_heap(&mut self) {
        if self.heap.young_grown() {
            self.sweep_young();
        }
        if self.heap.len() < 64.max(2 * self.num_evictable as usize) {
            return;
        }
        self.rebuild_heap();
    }

    /// The young spans (`RankQueue::push_young`: completed runs) with no live entry left taken out of
    /// the order: those whose request's finish has re-ranked their run, most of them.
    #[cold]
    fn sweep_young(&mut self) {
        let (heap, chunks) = (&mut self.heap, &self.chunks);
        let mut near = None;
        heap.retain_young(|s| !chunks.stale_span(s, s.len(), &mut near));
    }

    /// The log's stale spans dropped once it holds more than twice the groups (plus 64), so that it
    /// stays O(chunks held) while the tier never fills.
    #[inline]
    pub(super) fn compact_log(&mut self) {
        if self.log.len() > 2 * self.chunks.groups.len() + 64 {
            self.drop_stale_log();
        }
    }

    #[cold]
    fn drop_stale_log(&mut self) {
        let chunks = &mut self.chunks;
        self.log.retain(|&s| chunks.logged_run_mut(s).is_some());
    }

    /// The first eviction's order: the log's spans still current (in order, the first run as they
    /// are; each marks its run) and every other evictable chunk's entry, as a rebuild finds them (runs
    /// marked are skipped, their marks cleared): the same entries as `rebuild_heap`'s, without sorting
    /// those of the runs finishes re-ranked, most of a full tier's.
    pub(super) fn build_heap(&mut self) {
        let mut log = std::mem::take(&mut self.log);
        let chunks = &mut self.chunks;
        log.retain(|&s| match chunks.logged_run_mut(s) {
            Some(r) => {
                r.marked = true;
                true
            }
            None => false,
        });
        let mut others = Vec::new();
        for (hi, g) in self.chunks.groups.iter_mut() {
            if let Slots::Run(r) = &mut g.slots
                && r.marked
            {
                r.marked = false;
                continue;
            }
            push_live(&mut others, hi, g);
        }
        for (&key, c) in &self.chunks.singles {
            if c.evictable() {
                others.push(Span::one((c.rank(), key)));
            }
        }
        self.heap = RankQueue::of_log(log, others);
    }

    /// The heap of the evictable chunks' current entries, each once.
    pub(super) fn rebuild_heap(&mut self) {
        // (a span a group at least: sized once, not grown by copies; with room for a quarter more,
        // which the first run it becomes takes the next spans in without doubling at once)
        let n = self.chunks.groups.len() + self.chunks.singles.len();
        let mut live = Vec::with_capacity(n + n / 4);
        for (hi, g) in self.chunks.groups.iter() {
            push_live(&mut live, hi, g);
        }
        for (&key, c) in &self.chunks.singles {
            if c.evictable() {
                live.push(Span::one((c.rank(), key)));
            }
        }
        self.heap = RankQueue::of_spans(live);
    }

    /// Removes `n` evictable chunks not in `protected`, appending their keys to `out` in eviction order
    /// (LRU's not once `count_evictions_only`); false (nothing changed) if there are fewer.
    pub(super) fn evict(&mut self, n: usize, protected: &KeySet, out: &mut Vec<BlockKey>) -> bool {
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
            self.build_heap();
            self.owns.build_index();
        }
        if protected.is_empty() && self.lane_evict(n, out) {
            self.compact_heap();
            return true;
        }
        self.lru_choose(n, protected, out)
    }

    /// `lru_evict`'s choice among all sources: the queue, the lane, the own runs (the least of which
    /// is demoted into the queue, `own.rs`).
    fn lru_choose(&mut self, n: usize, protected: &KeySet, out: &mut Vec<BlockKey>) -> bool {
        // The entries taken, as spans (each with how many of its first entries), and how many.
        let mut taken = std::mem::take(&mut self.scratch_evict);
        taken.clear();
        let mut num = 0;
        let mut last = None; // (the last entry taken)
        let mut deferred = Vec::new();
        // The lane's spans wholly taken, and what is left of the next one (its head the lane's least
        // entry): the lane itself changes only once the eviction goes through.
        let mut lane_taken = 0;
        let mut lane_head = self.lane.front().copied();
        // (an own run the least of all is demoted, `own.rs`, and the choice carries on from where it
        // was: what was taken stays taken)
        let mut demote = None;
        loop {
            if let Some(i) = demote.take() {
                self.demote(i);
            }
            let (heap, chunks, owns) = (&mut self.heap, &self.chunks, &mut self.owns);
            let mut near = None;
            'pop: while num < n {
                let least = heap.least_head();
                let own = match own_bound(owns, lane_head, least) {
                    Ok(own) => own,
                    Err(i) => {
                        demote = Some(i);
                        break 'pop;
                    }
                };
                'lane: {
                    let Some(l) = lane_head else {
                        break 'lane;
                    };
                    let least = lesser(least, own);
                    if least.is_some_and(|h| head_lt(&h, &l)) {
                        break 'lane;
                    }
                    // The lane's least entries come first, all live (a retired run is held, ready and
                    // unpinned, and no key of it is named again, so none is protected): those before
                    // the queue's least and the least own run.
                    let k;
                    (k, lane_head) = lane_step(&self.lane, l, n - num, least, &mut lane_taken);
                    taken.push((l, k | LANE));
                    num += k;
                    last = Some(l.last_of(k));
                    continue 'pop;
                }
                // The least entries, as many as may be taken, a span's at a time.
                let Some((span, k)) = heap.pop_span(n - num, lesser(lane_head, own)) else {
                    break;
                };
                if protected.is_empty()
                    && last != Some(span.head())
                    && chunks.live_run_tail(span, k, &mut near)
                {
                    // The tail of a ready run, its ranks as pushed: all live, none a repeat (distinct
                    // keys; the first not the last taken).
                    taken.push((span, k));
                    num += k;
                    last = Some(span.last_of(k));
                    continue;
                }
                if chunks.stale_span(span, k, &mut near) {
                    continue; // (none live: skipped, as one by one)
                }
                for entry in span.entries(k) {
                    let (rank, key) = entry;
                    // (a repeated entry pops right after its twin: the queue pops in order)
                    if !chunks
                        .get_near(key, &mut near)
                        .is_some_and(|c| c.evictable() && c.rank() == rank)
                        || last == Some(entry)
                    {
                        continue;
                    }
                    if !protected.is_empty() && protected.contains(&key) {
                        deferred.push(entry);
                        continue;
                    }
                    taken.push((Span::one(entry), 1));
                    num += 1;
                    last = Some(entry);
                    if num == n {
                        // (the span's entries after it, if any, were not taken: `pop_span` takes no
                        // more than are left to choose)
                        break 'pop;
                    }
                }
            }
            if demote.is_none() {
                break;
            }
        }
        self.heap.extend(deferred.into_iter().map(Reverse));
        if num < n {
            self.untake(&taken);
            self.scratch_evict = taken;
            return false;
        }
        self.remove_taken(&taken, (lane_taken, lane_head), out);
        self.scratch_evict = taken;
        self.compact_heap();
        true
    }

    /// `lru_evict`'s common case, alone (nothing protected): when the lane of retired runs holds the
    /// `n` least live entries, all before the queue's least head and the least ready own run, they are
    /// taken straight from the lane
    /// (its spans wholly taken dropped, the next one shortened), their keys appended to `out` unless
    /// `count_evictions_only`; false, nothing changed, otherwise. The same steps as the general loop's
    /// lane branch (which takes these entries, the queue untouched, hence its least head the same
    /// throughout), without listing them as taken.
    #[inline]
    fn lane_evict(&mut self, n: usize, out: &mut Vec<BlockKey>) -> bool {
        if self.lane_len < n as u64 {
            return false; // (the queue supplies some)
        }
        // (the least ready own run bounds the lane as the queue's least does: one before the lane's
        // head is demoted by the general loop)
        let own = if self.owns.len == 0 {
            None
        } else {
            self.owns.least_ready().map(|(o, _)| o)
        };
        let least = lesser(self.heap.least_head(), own);
        // The lane's spans wholly taken, and what is left of the next one, as in `lru_evict`.
        let mut num = 0;
        let mut lane_taken = 0;
        let mut lane_head = self.lane.front().copied();
        while num < n {
            let Some(l) = lane_head else {
                return false;
            };
            if least.is_some_and(|h| head_lt(&h, &l)) {
                return false; // (the queue's least comes next)
            }
            let k;
            (k, lane_head) = lane_step(&self.lane, l, n - num, least, &mut lane_taken);
            num += k;
        }
        self.lane_len -= n as u64;
        if self.list_evicted {
            for i in 0..lane_taken {
                let s = self.lane[i];
                out.extend(s.entries(s.len()).map(|(_, key)| key));
            }
            if let (Some(&s), Some(rest)) = (self.lane.get(lane_taken), lane_head) {
                out.extend(s.entries(s.len() - rest.len()).map(|(_, key)| key));
            }
        }
        self.drop_lane_front(lane_taken, lane_head);
        true
    }

    /// The lane's first `lane_taken` spans dropped and the next one made `lane_head` (what an eviction
    /// left of it).
    #[inline]
    fn drop_lane_front(&mut self, lane_taken: usize, lane_head: Option<Span>) {
        for _ in 0..lane_taken {
            self.lane.pop_front();
        }
        if let Some(front) = self.lane.get_mut(0) {
            *front = lane_head.expect("the lane's rest");
        }
    }

    /// The queue's entries `lru_choose` took back in the queue (not enough to take: nothing changes).
    fn untake(&mut self, taken: &[(Span, usize)]) {
        for &(span, k) in taken {
            if k & LANE == 0 {
                self.heap.push_span(span.truncated(k));
            }
        }
    }

    /// The entries `lru_evict` took removed, their keys appended to `out` in order: the queue's from
    /// their groups, the lane's from the lane (`lane`: its spans wholly taken, what is left of the next).
    fn remove_taken(
        &mut self,
        taken: &[(Span, usize)],
        (lane_taken, lane_head): (usize, Option<Span>),
        out: &mut Vec<BlockKey>,
    ) {
        for &(span, k) in taken {
            let n = k & !LANE;
            if k & LANE == 0 {
                self.chunks.remove_span(span, n);
            } else {
                self.lane_len -= n as u64;
            }
            if self.list_evicted {
                out.extend(span.entries(n).map(|(_, key)| key));
            }
        }
        if lane_taken > 0 || lane_head != self.lane.front().copied() {
            self.drop_lane_front(lane_taken, lane_head);
        }
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
    pub(super) fn arc_store_misses(&mut self, keys: &[BlockKey]) {
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
}

/// The entries of group `hi`'s evictable chunks pushed to `live`: a run's as one span (unless a span
/// cannot name them), any other's one by one.
#[inline(always)]
#[allow(clippy::inline_always)] // (the loop of every rebuild, as its body: measured, results/README.md §CPU tier)
fn push_live(live: &mut Vec<Span>, hi: u64, g: &Group) {
    if let Slots::Run(r) = g.slots
        && let Some(span) = r.span(hi, g.base)
    {
        if r.ready {
            live.push(span); // (a run is unpinned: all evictable)
        }
        return;
    }
    for (i, c) in g.slots.iter().enumerate() {
        if c.held && c.evictable() {
            let key = run_key(hi, g.base.wrapping_add(i as u64));
            live.push(Span::one((c.rank(), key)));
        }
    }
}

/// The one of two spans whose head comes first (`head_lt`), either if one is None.
#[inline]
fn lesser(a: Option<Span>, b: Option<Span>) -> Option<Span> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if head_lt(&y, &x) { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

/// The least ready own run (a running request's: none is taken while it is own): `Err(its slot)` if it
/// comes before the lane's head and the queue's least (`least`), to be demoted; else its span, if any.
#[inline]
fn own_bound(
    owns: &mut Owns,
    lane_head: Option<Span>,
    least: Option<Span>,
) -> Result<Option<Span>, usize> {
    let Some((o, i)) = (if owns.len == 0 {
        None
    } else {
        owns.least_ready()
    }) else {
        return Ok(None);
    };
    if lane_head.is_none_or(|l| head_lt(&o, &l)) && least.is_none_or(|h| head_lt(&o, &h)) {
        return Err(i);
    }
    Ok(Some(o))
}

/// One step of an eviction through the lane (`lru_choose`, `lane_evict`): of the lane's span `l` (its
/// `lane_taken`th, or what is left of it), the entries before `least` (the other sources' least head),
/// at most `max` (>= 1 of them: `l`'s head comes first); returns how many and the lane's head after
/// them (the rest of `l`, or the next span, `lane_taken` counting `l` as wholly taken).
#[inline(always)]
#[allow(clippy::inline_always)] // (an eviction's inner step, twice: measured, results/README.md §CPU tier)
fn lane_step(
    lane: &Paged<Span>,
    l: Span,
    max: usize,
    least: Option<Span>,
    lane_taken: &mut usize,
) -> (usize, Option<Span>) {
    let k = match least {
        Some(h) => l.count_before(max, h.head()),
        None => l.len().min(max),
    };
    let mut rest = l;
    if rest.skip(k) {
        return (k, Some(rest));
    }
    *lane_taken += 1;
    (k, lane.get(*lane_taken).copied())
}
