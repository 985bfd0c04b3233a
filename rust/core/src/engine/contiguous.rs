//! A linear address space of token slots with first-fit placement (the paper's contiguous baselines).
//! Holes are kept by start address, so first-fit takes the lowest hole that is large enough and a free
//! merges with its neighbours. `python/kvsim/reference/contiguous.py` is the executable spec.

use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub struct FirstFit {
    holes: BTreeMap<u64, u64>,
    num_free: u64,
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
}
