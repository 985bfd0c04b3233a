//! The LRU's eviction order (DESIGN.md §CPU tier): a min-queue of `(rank, key)` entries, lazily deleted
//! by its user (`evict.rs`), kept as two runs in order and a heap for the rest.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::chunks::Rank;
use crate::BlockKey;

type Entry = (Rank, BlockKey);

/// A min-queue of entries with `BinaryHeap<Reverse<Entry>>`'s interface (entries wrapped in `Reverse`,
/// `pop` the least). The tier makes its entries mostly in order (a finish's re-ranking is always the
/// newest, a completion's rank its store's request's, given as requests came), so an entry joins the end
/// of the run in order it extends with the least gap (patience sorting with two piles), else the heap; a
/// pop takes the least of the three heads: no sift, and the runs read in order. The least entry is unique
/// but for equal entries, so what pops does not depend on how the entries are split.
#[derive(Clone, Debug, Default)]
pub(super) struct RankQueue {
    runs: [VecDeque<Entry>; 2],
    rest: BinaryHeap<Reverse<Entry>>,
}

impl RankQueue {
    pub(super) fn new() -> Self {
        Self::default()
    }

    pub(super) fn len(&self) -> usize {
        self.runs[0].len() + self.runs[1].len() + self.rest.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry, in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Reverse<Entry>> + '_ {
        self.runs[0]
            .iter()
            .chain(&self.runs[1])
            .map(|&e| Reverse(e))
            .chain(self.rest.iter().copied())
    }

    pub(super) fn push(&mut self, Reverse(e): Reverse<Entry>) {
        let fits = |run: &VecDeque<Entry>| run.back().is_none_or(|&b| b <= e);
        let [a, b] = &mut self.runs;
        match (fits(a), fits(b)) {
            // Both extend: the one whose end is nearer (an empty run only if the other is empty).
            (true, true) => {
                if a.back() >= b.back() {
                    a.push_back(e);
                } else {
                    b.push_back(e);
                }
            }
            (true, false) => a.push_back(e),
            (false, true) => b.push_back(e),
            (false, false) => self.rest.push(Reverse(e)),
        }
    }

    pub(super) fn extend(&mut self, entries: impl IntoIterator<Item = Reverse<Entry>>) {
        for e in entries {
            self.push(e);
        }
    }

    /// The least entry, taken out.
    pub(super) fn pop(&mut self) -> Option<Reverse<Entry>> {
        let [a, b] = &self.runs;
        let rest = self.rest.peek().map(|r| r.0);
        let mut least = None;
        for (i, head) in [a.front().copied(), b.front().copied(), rest]
            .into_iter()
            .enumerate()
        {
            if let Some(h) = head
                && least.is_none_or(|(_, l)| h < l)
            {
                least = Some((i, h));
            }
        }
        let (i, _) = least?;
        match i {
            0 | 1 => self.runs[i].pop_front().map(Reverse),
            _ => self.rest.pop(),
        }
    }
}

/// A queue of `entries` (any order): sorted into one run.
impl From<Vec<Reverse<Entry>>> for RankQueue {
    fn from(mut entries: Vec<Reverse<Entry>>) -> Self {
        entries.sort_unstable_by(|x, y| y.cmp(x)); // (`Reverse`: ascending entries)
        RankQueue {
            runs: [entries.into_iter().map(|r| r.0).collect(), VecDeque::new()],
            rest: BinaryHeap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(req: u64, pos: u64, key: u128) -> Reverse<Entry> {
        Reverse(((req, Reverse(pos)), BlockKey(key)))
    }

    proptest! {
        /// Pops come out as a binary heap's would, whatever the order of pushes, pops and rebuilds.
        #[test]
        fn pops_as_a_binary_heap(ops in prop::collection::vec((0u8..4, 0u64..40, 0u64..4, 0u128..6), 0..300)) {
            let (mut q, mut h) = (RankQueue::new(), BinaryHeap::new());
            for (op, req, pos, key) in ops {
                match op {
                    0 | 1 => {
                        q.push(entry(req, pos, key));
                        h.push(entry(req, pos, key));
                    }
                    2 => prop_assert_eq!(q.pop(), h.pop()),
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
    fn entries_in_order_never_reach_the_heap() {
        let mut q = RankQueue::new();
        for i in 0..100 {
            q.push(entry(i, 0, 1)); // a finish's re-rankings: ever newer
            q.push(entry(i / 2, 0, 2)); // completions: in order among themselves
        }
        assert!(q.rest.is_empty());
        let mut last = None;
        while let Some(Reverse(e)) = q.pop() {
            assert!(last.is_none_or(|l| l <= e));
            last = Some(e);
        }
    }
}
