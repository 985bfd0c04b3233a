//! The LRU's eviction order (DESIGN.md §CPU tier): a min-queue of `(rank, key)` entries, lazily deleted
//! by its user (`evict.rs`), kept as two runs in order, a heap for the rest and a small heap of young
//! spans (soon stale).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::group::Rank;
use crate::BlockKey;

pub(super) type Entry = (Rank, BlockKey);

/// `n` >= 1 entries of one group's chunks in order, from its head `((req, -pos), (hi, lo))`: entry `k` is
/// `((req + k * dreq, -(pos - k * dpos)), (hi, lo - k))`, so each is above the one before when `dreq` or
/// `dpos` (a run of slots from its last, `Slots::Run`: a store's ranks, positions down by one, or a
/// finish's, ranks up by one); a lone entry has neither. 32 bytes: the flags in `n`'s upper bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Span {
    req: u64,
    hi: u64,
    lo: u64,
    pos: u32,
    /// The count in its lower 30 bits, `dreq` and `dpos` above.
    n: u32,
}

const DREQ: u32 = 1 << 31;
const DPOS: u32 = 1 << 30;
pub(super) const COUNT: u32 = DPOS - 1;

impl Span {
    /// The span a finish's re-ranking makes of a run of `n` (1..=`COUNT`) chunks `(hi, lo..lo + n)`,
    /// request ranks `req..req + n` from its last chunk, positions 0 (`Run::reranked(req + n - 1)`'s
    /// `span(hi, lo)`, built directly).
    #[inline]
    pub(super) fn finished(req: u64, (hi, lo): (u64, u64), n: u32) -> Self {
        debug_assert!((1..=COUNT).contains(&n));
        Span {
            req,
            hi,
            lo: lo.wrapping_add(u64::from(n) - 1),
            pos: 0,
            n: n | DREQ,
        }
    }

    /// The entry alone.
    #[inline]
    pub(super) fn one(((req, Reverse(pos)), key): Entry) -> Self {
        Span {
            req,
            hi: (key.0 >> 64) as u64,
            lo: key.0 as u64,
            pos: u32::try_from(pos).expect("a chunk position below 2^32"),
            n: 1,
        }
    }

    /// The `n` >= 1 entries from `((req, -pos), (hi, lo))`, up by `dreq` or `dpos` (one of them) as
    /// `Span` says; None when they do not fit one (more than 2^30 - 1, or a position below 0).
    #[inline]
    pub(super) fn run(
        ((req, Reverse(pos)), (hi, lo)): ((u64, Reverse<u64>), (u64, u64)),
        n: u64,
        dreq: bool,
        dpos: bool,
    ) -> Option<Self> {
        let pos = u32::try_from(pos).ok()?;
        if n == 0 || n > u64::from(COUNT) || dreq == dpos || (dpos && u64::from(pos) < n - 1) {
            return None;
        }
        Some(Span {
            req,
            hi,
            lo,
            pos,
            n: n as u32 | if dreq { DREQ } else { 0 } | if dpos { DPOS } else { 0 },
        })
    }

    #[inline]
    pub(super) fn len(self) -> usize {
        (self.n & COUNT) as usize
    }

    /// Its head's key halves.
    #[inline]
    pub(super) fn key_halves(self) -> (u64, u64) {
        (self.hi, self.lo)
    }

    /// Its first `k` (>= 1) entries alone.
    #[inline]
    pub(super) fn truncated(self, k: usize) -> Self {
        Span {
            n: (self.n & !COUNT) | k as u32,
            ..self
        }
    }

    /// Its entry `k - 1`, the last of its first `k`.
    #[inline]
    pub(super) fn last_of(self, k: usize) -> Entry {
        self.at(k - 1)
    }

    /// The request ranks of its first `k` (>= 1) entries: the least and the greatest.
    #[inline]
    pub(super) fn req_range(self, k: usize) -> (u64, u64) {
        let last = if self.n & DREQ != 0 {
            (k - 1) as u64
        } else {
            0
        };
        (self.req, self.req + last)
    }

    /// Whether its entries step by the request rank (`dreq`) and by the position (`dpos`).
    #[inline]
    pub(super) fn steps(self) -> (bool, bool) {
        (self.n & DREQ != 0, self.n & DPOS != 0)
    }

    #[inline]
    fn key(self) -> BlockKey {
        BlockKey((u128::from(self.hi) << 64) | u128::from(self.lo))
    }

    /// Its first entry, the least.
    #[inline]
    pub(super) fn head(self) -> Entry {
        ((self.req, Reverse(u64::from(self.pos))), self.key())
    }

    /// Entry `k` (< `len`).
    #[inline]
    fn at(self, k: usize) -> Entry {
        let k64 = k as u64;
        let req = self.req_at(k);
        let pos = u64::from(self.pos) - if self.n & DPOS != 0 { k64 } else { 0 };
        let lo = self.lo.wrapping_sub(k64);
        (
            (req, Reverse(pos)),
            BlockKey((u128::from(self.hi) << 64) | u128::from(lo)),
        )
    }

    /// The request rank of its entry `k` (< `len`).
    #[inline]
    fn req_at(self, k: usize) -> u64 {
        self.req + if self.n & DREQ != 0 { k as u64 } else { 0 }
    }

    /// Its last entry, the greatest.
    #[inline]
    fn last(self) -> Entry {
        self.at(self.len() - 1)
    }

    /// Its first `k` entries, in order.
    #[inline]
    pub(super) fn entries(self, k: usize) -> impl Iterator<Item = Entry> {
        (0..k).map(move |i| self.at(i))
    }

    /// How many of its first entries, at least 1 (its head comes before `bound`) and at most `max`,
    /// come before `bound`.
    #[inline(always)]
    #[allow(clippy::inline_always)] // (the lane's fast path, `CpuTier::lane_evict`, per span: measured)
    pub(super) fn count_before(self, max: usize, bound: Entry) -> usize {
        let len = self.len().min(max);
        if self.req_at(len - 1) < (bound.0).0 {
            return len; // (told by the request ranks alone, the usual case)
        }
        let mut k = 1;
        while k < len && self.at(k) < bound {
            k += 1;
        }
        k
    }

    /// Its first `k` (< `len` + 1) entries taken: false if none is left.
    #[inline]
    pub(super) fn skip(&mut self, k: usize) -> bool {
        let left = self.len() - k;
        if left == 0 {
            return false;
        }
        let k64 = k as u64;
        self.n -= k as u32;
        if self.n & DREQ != 0 {
            self.req += k64;
        }
        if self.n & DPOS != 0 {
            self.pos -= k as u32;
        }
        self.lo = self.lo.wrapping_sub(k64);
        true
    }

    /// Its head taken: false if none is left.
    #[cfg(test)]
    fn advance(&mut self) -> bool {
        if self.n & COUNT == 1 {
            return false;
        }
        self.n -= 1;
        if self.n & DREQ != 0 {
            self.req += 1;
        }
        if self.n & DPOS != 0 {
            self.pos -= 1;
        }
        self.lo = self.lo.wrapping_sub(1);
        true
    }
}

impl Ord for Span {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.head().cmp(&other.head()).then(self.n.cmp(&other.n))
    }
}

impl PartialOrd for Span {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Whether `a`'s head comes before `b`'s: by the request rank, the whole entry only when those tie.
#[inline]
pub(super) fn head_lt(a: &Span, b: &Span) -> bool {
    a.req < b.req || (a.req == b.req && a.head() < b.head())
}

/// Which of `heads` (a queue's sources' head spans) holds the least head, None if all are empty.
#[inline]
fn least_of(heads: &[Option<Span>; 4]) -> Option<usize> {
    let mut least: Option<usize> = None;
    for (j, h) in heads.iter().enumerate() {
        if let Some(h) = h
            && least.is_none_or(|i| head_lt(h, heads[i].as_ref().expect("a head")))
        {
            least = Some(j);
        }
    }
    least
}

/// A min-queue of entries with `BinaryHeap<Reverse<Entry>>`'s interface (entries wrapped in `Reverse`,
/// `pop` the least), its entries kept as spans (`Span`: a run of slots' entries in one, pushed and
/// popped a chunk at a time without being listed). The tier makes its entries mostly in order (a
/// finish's re-ranking is always the newest, a completion's rank its store's request's, given as
/// requests came), so a span joins the end of the run in order it extends with the least gap
/// (patience sorting with two piles: a run's spans one after another, each's last entry at most the
/// next's head), else the heap; a run's completion span, which its request's finish soon makes
/// stale, joins a small heap of its own instead (`push_young`), which its user sweeps (`retain_young`).
/// A pop takes the least of the four heads: no sift for most, and the runs read in order. The least
/// entry is unique but for equal entries, so what pops does not depend on how the entries are split or
/// grouped.
#[derive(Clone, Debug, Default)]
pub(super) struct RankQueue {
    runs: [VecDeque<Span>; 2],
    /// The rest (`push_span`), and the young (`push_young`).
    heaps: [BinaryHeap<Reverse<Span>>; 2],
    /// The entries (not the spans).
    len: usize,
    /// The young heap's spans after its last `retain_young` (its growth measured from there).
    young_kept: usize,
}

/// Where a finish's re-ranked run goes (`Group::rerank`): the eviction order once it is kept
/// (`CpuTier::heap_live`), else, under LRU, the log of the finishes' spans (`CpuTier::log`) that the
/// first eviction builds the order from; else nowhere (ARC).
pub(super) enum Order<'a> {
    Heap(&'a mut RankQueue),
    Log(&'a mut Vec<Span>),
    Off,
}

impl<'a> Order<'a> {
    #[inline]
    pub(super) fn new(
        live: bool,
        lru: bool,
        heap: &'a mut RankQueue,
        log: &'a mut Vec<Span>,
    ) -> Self {
        if live {
            Order::Heap(heap)
        } else if lru {
            Order::Log(log)
        } else {
            Order::Off
        }
    }
}

/// The first heap's place among a queue's four sources (the two runs, the rest, the young).
const REST: usize = 2;

impl RankQueue {
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// How many entries it holds.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every entry, in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Reverse<Entry>> + '_ {
        self.runs[0]
            .iter()
            .chain(&self.runs[1])
            .chain(self.heaps.iter().flat_map(|h| h.iter().map(|r| &r.0)))
            .flat_map(|s| (0..s.len()).map(|k| Reverse(s.at(k))))
    }

    /// `push_span` of a span likely to go stale soon (a running request's completed run, which its
    /// finish re-ranks): kept in a small heap of its own, which `retain_young` sweeps, not among the
    /// runs, where it would stay until popped or rebuilt.
    #[inline]
    pub(super) fn push_young(&mut self, s: Span) {
        self.len += s.len();
        self.heaps[1].push(Reverse(s));
    }

    /// Whether the young heap has doubled (plus 64) since its last sweep.
    #[inline]
    pub(super) fn young_grown(&self) -> bool {
        self.heaps[1].len() > 2 * self.young_kept + 64
    }

    /// The young heap's spans for which `keep` is false taken out (the caller's: spans with no live
    /// entry; what pops is the same).
    pub(super) fn retain_young(&mut self, mut keep: impl FnMut(Span) -> bool) {
        let mut gone = 0;
        self.heaps[1].retain(|r| {
            let k = keep(r.0);
            if !k {
                gone += r.0.len();
            }
            k
        });
        self.len -= gone;
        self.young_kept = self.heaps[1].len();
    }

    pub(super) fn push(&mut self, Reverse(e): Reverse<Entry>) {
        self.push_span(Span::one(e));
    }

    #[inline]
    pub(super) fn push_span(&mut self, s: Span) {
        self.len += s.len();
        let head = s.head();
        let [a, b] = &mut self.runs;
        let (a_end, b_end) = (a.back().map(|s| s.last()), b.back().map(|s| s.last()));
        let fits = |end: Option<Entry>| end.is_none_or(|e| e <= head);
        match (fits(a_end), fits(b_end)) {
            // Both extend: the one whose end is nearer (an empty run only if the other is empty).
            (true, true) => {
                if a_end >= b_end {
                    a.push_back(s);
                } else {
                    b.push_back(s);
                }
            }
            (true, false) => a.push_back(s),
            (false, true) => b.push_back(s),
            (false, false) => self.heaps[0].push(Reverse(s)),
        }
    }

    pub(super) fn extend(&mut self, entries: impl IntoIterator<Item = Reverse<Entry>>) {
        for e in entries {
            self.push(e);
        }
    }

    /// The least entry, taken out (`pop_span` of one).
    #[cfg(test)]
    pub(super) fn pop(&mut self) -> Option<Reverse<Entry>> {
        let mut least = None;
        for (i, head) in self.head_spans().into_iter().enumerate() {
            if let Some(h) = head.map(Span::head)
                && least.is_none_or(|(_, l)| h < l)
            {
                least = Some((i, h));
            }
        }
        let (i, e) = least?;
        self.len -= 1;
        match i {
            0 | 1 => {
                let run = &mut self.runs[i];
                let front = run.front_mut().expect("its head");
                if !front.advance() {
                    run.pop_front();
                }
            }
            _ => {
                let mut top = self.heaps[i - REST].peek_mut().expect("its head");
                if !top.0.advance() {
                    std::collections::binary_heap::PeekMut::pop(top);
                }
            }
        }
        Some(Reverse(e))
    }

    /// The head span of its least source (its head the least entry), None if empty.
    #[inline]
    pub(super) fn least_head(&self) -> Option<Span> {
        let heads = self.head_spans();
        least_of(&heads).and_then(|i| heads[i])
    }

    /// The least entries, at most `max` >= 1 of them, taken out while they come from one span and
    /// before `outside`'s head (a span kept elsewhere, whose head is not less than the least here): that
    /// span as it was and how many of its first entries (`Span::entries`) were taken, None if empty.
    /// Popping them one by one would return the same entries in the same order.
    #[inline]
    pub(super) fn pop_span(&mut self, max: usize, outside: Option<Span>) -> Option<(Span, usize)> {
        // The four sources' head spans; the least head's source is `i` (heads compared by their
        // request rank first: ranks tie seldom, and the whole entry only then).
        let heads = self.head_spans();
        let i = least_of(&heads)?;
        let span = heads[i].expect("its head");
        // The least head of the others bounds how far this span's entries come first: the other
        // three's, and for a heap's top span that heap's next (one of its top's children); a run's
        // next span starts at or after this one's end.
        let mut bound: Option<Span> = None;
        let mut bound_by = |s: &Span| {
            if bound.as_ref().is_none_or(|b| head_lt(s, b)) {
                bound = Some(*s);
            }
        };
        for (j, h) in heads.iter().enumerate() {
            if j != i
                && let Some(h) = h
            {
                bound_by(h);
            }
        }
        if let Some(o) = &outside {
            bound_by(o);
        }
        if i >= REST {
            for r in self.heaps[i - REST].as_slice().iter().skip(1).take(2) {
                bound_by(&r.0);
            }
        }
        let len = span.len().min(max);
        let mut k = len;
        if let Some(b) = bound {
            // (its entries ascend: all of them come first when its last one does, the usual case;
            // told by the request ranks alone when they differ)
            let (last_req, b_req) = (span.req_at(len - 1), b.req);
            if last_req > b_req || (last_req == b_req && span.at(len - 1) > b.head()) {
                let bound = b.head();
                k = 1;
                while k < len && span.at(k) <= bound {
                    k += 1;
                }
            }
        }
        self.len -= k;
        let mut rest = span;
        let left = rest.skip(k);
        match i {
            0 | 1 => {
                let run = &mut self.runs[i];
                if left {
                    *run.front_mut().expect("its head") = rest;
                } else {
                    run.pop_front();
                }
            }
            _ => {
                let mut top = self.heaps[i - REST].peek_mut().expect("its head");
                if left {
                    top.0 = rest;
                } else {
                    std::collections::binary_heap::PeekMut::pop(top);
                }
            }
        }
        Some((span, k))
    }

    /// The head spans of its four sources: the runs', the rest's, the young's.
    #[inline]
    fn head_spans(&self) -> [Option<Span>; 4] {
        let [a, b] = &self.runs;
        let [rest, young] = &self.heaps;
        [
            a.front().copied(),
            b.front().copied(),
            rest.peek().map(|r| r.0),
            young.peek().map(|r| r.0),
        ]
    }

    /// A queue of `spans` (any order): sorted by head, each joining a run or the heap as pushed; when
    /// each sorted span ends at or before the next one's head (a rebuild's usual case: no two spans'
    /// entries interleave), they are the first run as they are (`push_span` would put them all there),
    /// in the vector's own memory.
    pub(super) fn of_spans(mut spans: Vec<Span>) -> Self {
        // (`Ord` with its first key, the request rank, compared before any entry is made: ranks tie
        // seldom; a rebuild sorts every live span)
        spans.sort_unstable_by(|a, b| a.req.cmp(&b.req).then_with(|| a.cmp(b)));
        if spans.windows(2).all(|w| w[0].last() <= w[1].head()) {
            let len = spans.iter().map(|s| s.len()).sum();
            return RankQueue {
                runs: [VecDeque::from(spans), VecDeque::new()],
                len,
                ..RankQueue::default()
            };
        }
        let mut q = RankQueue::new();
        for s in spans {
            q.push_span(s);
        }
        q
    }

    /// A queue of `log`'s spans (in order, no two interleaving: the finishes' spans still current,
    /// `CpuTier::build_heap`), its first run in the log's own memory, with room for a quarter more
    /// spans (touched only as they come, so that the spans pushed after it do not double it at once),
    /// and of `others` (any order), each joining a run or the heap.
    pub(super) fn of_log(mut log: Vec<Span>, mut others: Vec<Span>) -> Self {
        log.reserve(log.len() / 4);
        let run = VecDeque::from(log);
        debug_assert!(
            run.iter()
                .zip(run.iter().skip(1))
                .all(|(a, b)| a.last() <= b.head())
        );
        let len = run.iter().map(|s| s.len()).sum();
        let mut q = RankQueue {
            runs: [run, VecDeque::new()],
            len,
            ..RankQueue::default()
        };
        others.sort_unstable_by(|a, b| a.req.cmp(&b.req).then_with(|| a.cmp(b)));
        for s in others {
            q.push_span(s);
        }
        q
    }
}

/// A queue of `entries` (any order).
#[cfg(test)]
impl From<Vec<Reverse<Entry>>> for RankQueue {
    fn from(entries: Vec<Reverse<Entry>>) -> Self {
        RankQueue::of_spans(entries.into_iter().map(|r| Span::one(r.0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu_tier::group::run_key;
    use proptest::prelude::*;

    fn entry(req: u64, pos: u64, key: u128) -> Reverse<Entry> {
        Reverse(((req, Reverse(pos)), BlockKey(key)))
    }

    proptest! {
        /// Pops come out as a binary heap's would, whatever the order of pushes, pops and rebuilds.
        #[test]
        fn pops_as_a_binary_heap(ops in prop::collection::vec((0u8..5, 0u64..40, 0u64..4, 0u128..6, 1u64..5), 0..300)) {
            let (mut q, mut h) = (RankQueue::new(), BinaryHeap::new());
            for (op, req, pos, key, n) in ops {
                match op {
                    0 | 1 => {
                        q.push(entry(req, pos, key));
                        h.push(entry(req, pos, key));
                    }
                    4 => {
                        // A run's span: ranks up by one (`key` odd) or positions down by one.
                        let dreq = key % 2 == 1;
                        let pos = if dreq { pos } else { pos + n - 1 };
                        let span = Span::run(((req, Reverse(pos)), (1, key as u64 + n)), n, dreq, !dreq)
                            .expect("a span");
                        for k in 0..n {
                            let (r, p) = if dreq { (req + k, pos) } else { (req, pos - k) };
                            h.push(Reverse(((r, Reverse(p)), run_key(1, key as u64 + n - k))));
                        }
                        if req % 3 == 0 {
                            q.push_young(span);
                        } else {
                            q.push_span(span);
                        }
                    }
                    3 if req % 4 == 0 => {
                        // A sweep of the young: those whose head's request rank is odd taken out,
                        // their entries out of the model too.
                        let gone: Vec<Entry> = q.heaps[1]
                            .iter()
                            .filter(|r| r.0.head().0.0 % 2 == 1)
                            .flat_map(|r| r.0.entries(r.0.len()))
                            .collect();
                        q.retain_young(|s| s.head().0.0 % 2 == 0);
                        let mut all = std::mem::take(&mut h).into_vec();
                        for e in gone {
                            let at = all.iter().position(|x| x.0 == e).expect("in the model");
                            all.swap_remove(at);
                        }
                        h = BinaryHeap::from(all);
                    }
                    2 if n == 1 => prop_assert_eq!(q.pop(), h.pop()),
                    2 => {
                        // Up to `n` at once, as popped one by one.
                        if let Some((span, k)) = q.pop_span(n as usize, None) {
                            prop_assert!(k >= 1 && k <= n as usize);
                            for e in span.entries(k) {
                                prop_assert_eq!(Some(Reverse(e)), h.pop());
                            }
                        } else {
                            prop_assert!(h.pop().is_none());
                        }
                    }
                    _ => {
                        let all: Vec<_> = q.iter().collect();
                        prop_assert_eq!(all.len(), h.len());
                        q = RankQueue::from(all);
                    }
                }
                prop_assert_eq!(q.len(), h.len());
            }
            while let Some(e) = h.pop() {
                prop_assert_eq!(q.pop(), Some(e));
            }
            prop_assert!(q.pop().is_none() && q.is_empty());
        }
    }

    #[test]
    fn a_span_names_at_most_its_count() {
        // (a longer run's entries are pushed one by one: `Run::push_to`)
        let head = ((7, Reverse(0)), (1, 5));
        assert!(Span::run(head, u64::from(COUNT), true, false).is_some());
        assert!(Span::run(head, u64::from(COUNT) + 1, true, false).is_none());
        assert!(Span::run(head, 2, false, true).is_none()); // (positions below 0)
        assert!(Span::run(head, 2, true, true).is_none());
    }

    #[test]
    fn entries_in_order_never_reach_the_heap() {
        let mut q = RankQueue::new();
        for i in 0..100 {
            q.push(entry(i, 0, 1)); // a finish's re-rankings: ever newer
            q.push(entry(i / 2, 0, 2)); // completions: in order among themselves
        }
        assert!(q.heaps.iter().all(BinaryHeap::is_empty));
        let mut last = None;
        while let Some(Reverse(e)) = q.pop() {
            assert!(last.is_none_or(|l| l <= e));
            last = Some(e);
        }
    }
}
