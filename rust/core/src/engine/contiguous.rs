//! Linear address spaces of token slots for the paper's contiguous baselines: first-fit and buddy
//! placement. Both answer `allocate(size)` with `(start, reserved)` (buddy rounds up to a power of two).
//! `python/kvsim/reference/contiguous.py` is the executable spec.

use std::collections::{BTreeMap, BTreeSet};

/// The placement a contiguous policy uses.
#[derive(Clone, Debug)]
pub enum Space {
    FirstFit(FirstFit),
    Buddy(Buddy),
}

impl Space {
    pub fn allocate(&mut self, size: u64) -> Option<(u64, u64)> {
        match self {
            Space::FirstFit(s) => s.allocate(size).map(|start| (start, size)),
            Space::Buddy(s) => s.allocate(size),
        }
    }

    pub fn free(&mut self, start: u64, reserved: u64) {
        match self {
            Space::FirstFit(s) => s.free(start, reserved),
            Space::Buddy(s) => s.free(start, reserved),
        }
    }

    /// The largest region this space could ever hold.
    pub fn max_region(&self) -> u64 {
        match self {
            Space::FirstFit(s) => s.capacity,
            Space::Buddy(s) => s.max_region(),
        }
    }

    pub fn external_fragmentation(&self) -> u64 {
        match self {
            Space::FirstFit(s) => s.external_fragmentation(),
            Space::Buddy(s) => s.external_fragmentation(),
        }
    }
}

/// Binary buddy placement: `[0, capacity)` is cut into power-of-two chunks, largest first, each the root
/// of a buddy tree. Allocation takes, among free blocks of the smallest order that fits, the lowest
/// addressed and splits it down; freeing merges a block with its free buddy up to its chunk's order.
#[derive(Clone, Debug)]
pub struct Buddy {
    /// `(base, order)` of each chunk, ascending base.
    chunks: Vec<(u64, u32)>,
    /// Starts of free blocks, per order.
    free_at: Vec<BTreeSet<u64>>,
    num_free: u64,
}

impl Buddy {
    pub fn new(capacity: u64) -> Self {
        let mut chunks = Vec::new();
        let mut free_at = vec![BTreeSet::new(); 65];
        let mut base = 0;
        for order in (0..64).rev() {
            if capacity >> order & 1 == 1 {
                chunks.push((base, order));
                free_at[order as usize].insert(base);
                base += 1 << order;
            }
        }
        Buddy {
            chunks,
            free_at,
            num_free: capacity,
        }
    }

    fn order_of(size: u64) -> u32 {
        64 - size.saturating_sub(1).leading_zeros()
    }

    pub fn max_region(&self) -> u64 {
        self.chunks.first().map_or(0, |&(_, o)| 1 << o)
    }

    pub fn allocate(&mut self, size: u64) -> Option<(u64, u64)> {
        let want = Self::order_of(size);
        let mut order = (want..64).find(|&o| !self.free_at[o as usize].is_empty())?;
        let start = self.free_at[order as usize].pop_first()?;
        while order > want {
            order -= 1;
            self.free_at[order as usize].insert(start + (1 << order));
        }
        self.num_free -= 1 << want;
        Some((start, 1 << want))
    }

    pub fn free(&mut self, mut start: u64, reserved: u64) {
        let mut order = Self::order_of(reserved);
        self.num_free += reserved;
        let &(base, top) = self
            .chunks
            .iter()
            .rev()
            .find(|&&(b, _)| b <= start)
            .expect("a block lies in a chunk");
        while order < top {
            let buddy = base + ((start - base) ^ (1 << order));
            if !self.free_at[order as usize].remove(&buddy) {
                break;
            }
            start = start.min(buddy);
            order += 1;
        }
        self.free_at[order as usize].insert(start);
    }

    pub fn largest_hole(&self) -> u64 {
        (0..64u32)
            .rev()
            .find(|&o| !self.free_at[o as usize].is_empty())
            .map_or(0, |o| 1 << o)
    }

    pub fn external_fragmentation(&self) -> u64 {
        self.num_free - self.largest_hole()
    }
}

/// First-fit placement: holes by start address, the lowest hole that is large enough wins, and a free
/// merges with its neighbours.
#[derive(Clone, Debug)]
pub struct FirstFit {
    holes: BTreeMap<u64, u64>,
    num_free: u64,
    capacity: u64,
}

impl FirstFit {
    pub fn new(capacity: u64) -> Self {
        let mut holes = BTreeMap::new();
        if capacity > 0 {
            holes.insert(0, capacity);
        }
        FirstFit {
            holes,
            num_free: capacity,
            capacity,
        }
    }

    /// Start of a new region of `size` slots in the first hole that fits, or `None`.
    pub fn allocate(&mut self, size: u64) -> Option<u64> {
        let (&start, &len) = self.holes.iter().find(|&(_, &len)| len >= size)?;
        self.holes.remove(&start);
        if len > size {
            self.holes.insert(start + size, len - size);
        }
        self.num_free -= size;
        Some(start)
    }

    pub fn free(&mut self, start: u64, size: u64) {
        let (mut lo, mut hi) = (start, start + size);
        if let Some((&ps, &pl)) = self.holes.range(..start).next_back()
            && ps + pl == lo
        {
            self.holes.remove(&ps);
            lo = ps;
        }
        if let Some(&nl) = self.holes.get(&hi) {
            self.holes.remove(&hi);
            hi += nl;
        }
        self.holes.insert(lo, hi - lo);
        self.num_free += size;
    }

    pub fn largest_hole(&self) -> u64 {
        self.holes.values().copied().max().unwrap_or(0)
    }

    /// Free slots outside the largest hole: free in total, but in holes too small to be used whole.
    pub fn external_fragmentation(&self) -> u64 {
        self.num_free - self.largest_hole()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_reuses_the_lowest_hole_and_merges_on_free() {
        let mut s = FirstFit::new(100);
        assert_eq!(s.allocate(30), Some(0));
        assert_eq!(s.allocate(30), Some(30));
        assert_eq!(s.allocate(30), Some(60));
        s.free(0, 30);
        s.free(60, 30);
        assert_eq!(
            s.external_fragmentation(),
            30,
            "holes of 30 and 40: 30 outside the largest"
        );
        assert_eq!(s.allocate(35), Some(60));
        assert_eq!(s.allocate(20), Some(0));
        s.free(30, 30);
        s.free(0, 20);
        s.free(60, 35);
        assert_eq!(s.largest_hole(), 100);
        assert_eq!(s.allocate(101), None);
    }

    #[test]
    fn buddy_rounds_up_splits_the_lowest_block_and_merges_back() {
        let mut b = Buddy::new(100); // chunks 64 @0, 32 @64, 4 @96
        assert_eq!(b.max_region(), 64);
        assert_eq!(
            b.allocate(20),
            Some((64, 32)),
            "the 32-chunk is the smallest order that fits"
        );
        assert_eq!(
            b.allocate(20),
            Some((0, 32)),
            "then the 64-chunk splits; its upper half stays free"
        );
        assert_eq!(b.allocate(3), Some((96, 4)));
        assert_eq!(b.external_fragmentation(), 0);
        b.free(64, 32);
        assert_eq!(
            b.external_fragmentation(),
            32,
            "two free 32-blocks in different chunks"
        );
        b.free(0, 32);
        assert_eq!(b.largest_hole(), 64);
        assert_eq!(b.allocate(65), None);
    }
}
