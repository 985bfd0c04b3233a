//! The free-block queue: an intrusive doubly linked list threaded through the blocks.
//!
//! Why intrusive: a prefix-cache hit on a free block must take it out of the *middle* of the queue in
//! O(1), and nothing may be allocated per operation (vLLM's `FreeKVCacheBlockQueue` for the same
//! reasons). Order: the head is the next block handed out (least recently freed, so cached content
//! freed long ago is evicted first); freed blocks join at the tail, or at the head under the
//! `lifo_unhashed` rule. Two sentinels (`HEAD`, `TAIL` at indices `n`, `n + 1`) remove every special case.

use crate::BlockId;

const NONE: u32 = u32::MAX;

/// Elements a cancellable setup builds between two looks at its stop flag (about a millisecond of work).
pub const SETUP_CHUNK: usize = 1 << 18;

/// A block's neighbours in the queue (`NONE` both when it is not queued); one array of pairs, so a link
/// update touches one place per block.
#[derive(Clone, Copy, Debug)]
struct Link {
    prev: u32,
    next: u32,
}

const UNLINKED: Link = Link {
    prev: NONE,
    next: NONE,
};

#[derive(Clone, Debug)]
pub struct FreeQueue {
    links: Vec<Link>,
    len: u32,
    head: u32,
    tail: u32,
}

impl FreeQueue {
    /// Bytes per block of the queue's links.
    pub const BYTES_PER_BLOCK: usize = size_of::<Link>();

    /// A queue over ids `0..n` holding `first..n` in ascending order (ids below `first` stay out).
    pub fn new(n: u32, first: u32) -> Self {
        Self::try_new(n, first).expect("memory for the free queue")
    }

    /// `new`, or `None` when the memory for its links cannot be allocated.
    pub fn try_new(n: u32, first: u32) -> Option<Self> {
        Self::try_new_until(n, first, &|| false).map(|(q, _)| q)
    }

    /// `try_new` that asks `stop` every `SETUP_CHUNK` blocks (a huge queue takes a second to build) and
    /// gives up when it says so: `(queue, complete)`, a given-up queue being only fit to drop.
    pub fn try_new_until(n: u32, first: u32, stop: &dyn Fn() -> bool) -> Option<(Self, bool)> {
        let (head, tail) = (n, n + 1);
        let size = n as usize + 2;
        let mut links = Vec::new();
        links.try_reserve_exact(size).ok()?;
        while links.len() < size {
            if stop() {
                let q = FreeQueue {
                    links,
                    len: 0,
                    head,
                    tail,
                };
                return Some((q, false));
            }
            links.resize((links.len() + SETUP_CHUNK).min(size), UNLINKED);
        }
        let mut q = FreeQueue {
            links,
            len: 0,
            head,
            tail,
        };
        q.links[head as usize].next = tail;
        q.links[tail as usize].prev = head;
        let mut b = first;
        while b < n {
            if stop() {
                return Some((q, false));
            }
            let end = n.min(b.saturating_add(SETUP_CHUNK as u32));
            for id in b..end {
                q.push_back(BlockId(id));
            }
            b = end;
        }
        Some((q, true))
    }

    #[inline]
    pub fn len(&self) -> u32 {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn contains(&self, b: BlockId) -> bool {
        self.links[b.index()].next != NONE
    }

    #[inline]
    fn link_after(&mut self, at: u32, b: u32) {
        let nx = self.links[at as usize].next;
        self.links[b as usize] = Link { prev: at, next: nx };
        self.links[at as usize].next = b;
        self.links[nx as usize].prev = b;
        self.len += 1;
    }

    #[inline]
    pub fn push_back(&mut self, b: BlockId) {
        debug_assert!(!self.contains(b), "block {b} is already queued");
        let last = self.links[self.tail as usize].prev;
        self.link_after(last, b.0);
    }

    #[inline]
    pub fn push_front(&mut self, b: BlockId) {
        debug_assert!(!self.contains(b), "block {b} is already queued");
        self.link_after(self.head, b.0);
    }

    /// Links `b` right after `prev`, or at the head when `prev` is None: pushing a run of blocks to the
    /// head in their given order is `after = None`, then `after = Some(last pushed)`.
    #[inline]
    pub fn insert_after(&mut self, prev: Option<BlockId>, b: BlockId) {
        debug_assert!(!self.contains(b), "block {b} is already queued");
        let at = prev.map_or(self.head, |p| p.0);
        self.link_after(at, b.0);
    }

    /// Unlinks `b` from wherever it is in the queue.
    #[inline]
    pub fn remove(&mut self, b: BlockId) {
        debug_assert!(self.contains(b), "block {b} is not queued");
        let Link { prev, next } = std::mem::replace(&mut self.links[b.index()], UNLINKED);
        self.links[prev as usize].next = next;
        self.links[next as usize].prev = prev;
        self.len -= 1;
    }

    #[inline]
    pub fn pop_front(&mut self) -> Option<BlockId> {
        let first = self.links[self.head as usize].next;
        if first == self.tail {
            return None;
        }
        let b = BlockId(first);
        self.remove(b);
        Some(b)
    }

    /// The block after `b` in the queue (the head when `b` is `None`), in the order `pop_front` takes
    /// them; `None` past the tail.
    #[inline]
    pub fn next_after(&self, b: Option<BlockId>) -> Option<BlockId> {
        let next = self.links[b.map_or(self.head, |b| b.0) as usize].next;
        (next != self.tail).then_some(BlockId(next))
    }

    /// Head first.
    pub fn iter(&self) -> impl Iterator<Item = BlockId> + '_ {
        let mut cur = self.links[self.head as usize].next;
        std::iter::from_fn(move || {
            if cur == self.tail {
                None
            } else {
                let b = cur;
                cur = self.links[cur as usize].next;
                Some(BlockId(b))
            }
        })
    }

    /// Checks the links both ways and the counter; returns a message on the first inconsistency.
    pub fn check(&self) -> std::result::Result<(), String> {
        let mut count = 0u32;
        let mut prev = self.head;
        let mut cur = self.links[self.head as usize].next;
        while cur != self.tail {
            if cur == NONE || cur >= self.head {
                return Err(format!("broken link after {prev}"));
            }
            if self.links[cur as usize].prev != prev {
                return Err(format!(
                    "block {cur} has prev {} not {prev}",
                    self.links[cur as usize].prev
                ));
            }
            count += 1;
            if count > self.len {
                return Err(format!("more than {} blocks linked (a cycle?)", self.len));
            }
            prev = cur;
            cur = self.links[cur as usize].next;
        }
        if self.links[self.tail as usize].prev != prev {
            return Err("tail does not point at the last block".into());
        }
        if count != self.len {
            return Err(format!(
                "{count} blocks linked but the counter says {}",
                self.len
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(q: &FreeQueue) -> Vec<u32> {
        q.iter().map(|b| b.0).collect()
    }

    #[test]
    fn starts_ascending_without_reserved_ids() {
        let q = FreeQueue::new(5, 1);
        assert_eq!(ids(&q), [1, 2, 3, 4]);
        assert!(!q.contains(BlockId(0)));
        q.check().unwrap();
    }

    #[test]
    fn pop_remove_and_both_ends() {
        let mut q = FreeQueue::new(6, 1);
        assert_eq!(q.pop_front(), Some(BlockId(1)));
        q.remove(BlockId(3));
        q.push_back(BlockId(1));
        q.push_front(BlockId(3));
        assert_eq!(ids(&q), [3, 2, 4, 5, 1]);
        assert_eq!(q.len(), 5);
        q.check().unwrap();
        while q.pop_front().is_some() {}
        assert!(q.is_empty());
        q.check().unwrap();
    }
}
