//! A double-ended queue kept in fixed pages (DESIGN.md §CPU tier, "rows' window"): the rows' window,
//! which moves forward (pushed at the back, taken from the front) through as many rows as requests,
//! holding hundreds of thousands of them. A `VecDeque` of them grows by doubling, copying itself into fresh
//! memory each time, and cycles through its whole capacity as it moves; here a page emptied at the front
//! is reused at the back, so the memory touched is about the most the queue held at once (a filling
//! tier's page faults were mostly these: results/README.md §CPU tier).
//!
//! Invariant: value `i` (< `len`) is slot `head + i` of the pages in order; every other slot of a page
//! holds `T::default()`; there are as many pages as the values need (none while the queue is empty).

/// Slots a page.
const PAGE: usize = 1024;
/// Emptied pages kept for reuse (more are freed, so that memory follows the queue down).
const SPARE: usize = 4;

#[derive(Clone, Debug)]
pub(super) struct Paged<T> {
    /// (a page taken from the front shifts the rest: one in `PAGE` pops, a few hundred pointers)
    pages: Vec<Box<[T; PAGE]>>,
    /// The first value's slot in the first page.
    head: usize,
    len: usize,
    spare: Vec<Box<[T; PAGE]>>,
}

impl<T> Default for Paged<T> {
    fn default() -> Self {
        Paged {
            pages: Vec::new(),
            head: 0,
            len: 0,
            spare: Vec::new(),
        }
    }
}

impl<T: Default> Paged<T> {
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Value `i`'s page and slot.
    #[inline]
    fn place(&self, i: usize) -> (usize, usize) {
        let j = self.head + i;
        (j / PAGE, j % PAGE)
    }

    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        let (p, s) = self.place(i);
        Some(&self.pages[p][s])
    }

    #[inline]
    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.len {
            return None;
        }
        let (p, s) = self.place(i);
        Some(&mut self.pages[p][s])
    }

    #[inline]
    pub(super) fn front(&self) -> Option<&T> {
        self.get(0)
    }

    #[inline]
    pub(super) fn back(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        let (p, s) = self.place(self.len - 1);
        Some(&self.pages[p][s])
    }

    /// `v` at the back; its place there.
    #[inline]
    pub(super) fn push_back(&mut self, v: T) -> &mut T {
        let (p, s) = self.place(self.len);
        if p == self.pages.len() {
            self.grow();
        }
        self.len += 1;
        let slot = &mut self.pages[p][s];
        *slot = v;
        slot
    }

    /// A page at the back: a spare one, else a new one.
    #[cold]
    fn grow(&mut self) {
        let page = self.spare.pop().unwrap_or_else(|| {
            let page: Box<[T]> = (0..PAGE).map(|_| T::default()).collect();
            page.try_into().ok().expect("a page of PAGE slots")
        });
        self.pages.push(page);
    }

    /// A page no value is in, kept for reuse or freed.
    #[cold]
    fn release(&mut self, page: Box<[T; PAGE]>) {
        if self.spare.len() < SPARE {
            self.spare.push(page);
        }
    }

    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = std::mem::take(&mut self.pages[0][self.head]);
        self.len -= 1;
        self.head += 1;
        if self.head == PAGE || self.len == 0 {
            self.shed_front();
        }
        Some(v)
    }

    /// The first page, emptied by a pop, released (all of them if the queue is empty).
    #[cold]
    fn shed_front(&mut self) {
        if self.len == 0 {
            self.clear();
        } else {
            let page = self.pages.remove(0);
            self.release(page);
            self.head = 0;
        }
    }

    #[inline]
    pub(super) fn pop_back(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let (p, s) = self.place(self.len - 1);
        let v = std::mem::take(&mut self.pages[p][s]);
        self.len -= 1;
        if s == 0 || self.len == 0 {
            self.shed_back();
        }
        Some(v)
    }

    /// The last page, emptied by a pop, released (all of them if the queue is empty).
    #[cold]
    fn shed_back(&mut self) {
        if self.len == 0 {
            self.clear();
        } else {
            let page = self.pages.pop().expect("the last page");
            self.release(page);
        }
    }

    /// Empty, its pages kept for reuse up to `SPARE` (the values dropped).
    pub(super) fn clear(&mut self) {
        for i in 0..self.len {
            let (p, s) = self.place(i);
            self.pages[p][s] = T::default();
        }
        while let Some(page) = self.pages.pop() {
            self.release(page);
        }
        self.head = 0;
        self.len = 0;
    }

    /// Its values in order, mutable.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        let (head, len) = (self.head, self.len);
        self.pages
            .iter_mut()
            .flat_map(|page| page.iter_mut())
            .skip(head)
            .take(len)
    }

    /// Its values in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.pages
            .iter()
            .flat_map(|page| page.iter())
            .skip(self.head)
            .take(self.len)
    }

    /// The invariant above, checked: its pages those its values need.
    pub(super) fn check(&self) -> Result<(), String> {
        let pages = (self.head + self.len).div_ceil(PAGE);
        if self.pages.len() != pages || self.head >= PAGE || (self.len == 0 && self.head != 0) {
            return Err(format!(
                "{} pages for {} values from slot {}",
                self.pages.len(),
                self.len,
                self.head
            ));
        }
        Ok(())
    }

    /// Whether a slot outside the queue holds other than `T::default()` (a value leaked).
    #[cfg(test)]
    fn leaks(&self) -> bool
    where
        T: PartialEq,
    {
        self.pages.iter().enumerate().any(|(p, page)| {
            page.iter().enumerate().any(|(s, v)| {
                let j = p * PAGE + s;
                (j < self.head || j >= self.head + self.len) && *v != T::default()
            })
        })
    }
}

impl<T: Default> std::ops::Index<usize> for Paged<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        self.get(i).expect("an index within the queue")
    }
}

impl<T: Default> std::ops::IndexMut<usize> for Paged<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.get_mut(i).expect("an index within the queue")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    proptest! {
        /// A paged queue holds what a `VecDeque` holds under pushes and pops at both ends (runs of
        /// them cross pages), and its pages are only those its values need.
        #[test]
        fn a_paged_queue_holds_what_a_vec_deque_holds(
            ops in proptest::collection::vec((0u8..4, 1usize..3000), 1..40)
        ) {
            let mut q: Paged<Option<u64>> = Paged::default();
            let mut model: VecDeque<Option<u64>> = VecDeque::new();
            let mut n = 0u64;
            for (kind, times) in ops {
                for _ in 0..times {
                    match kind {
                        0 => {
                            n += 1;
                            q.push_back(Some(n));
                            model.push_back(Some(n));
                        }
                        1 => {
                            n += 1;
                            *q.push_back(None) = Some(n);
                            model.push_back(Some(n));
                        }
                        2 => prop_assert_eq!(q.pop_front(), model.pop_front()),
                        _ => prop_assert_eq!(q.pop_back(), model.pop_back()),
                    }
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.front(), model.front());
                prop_assert_eq!(q.back(), model.back());
                prop_assert!(q.iter().eq(model.iter()));
                prop_assert_eq!(q.iter_mut().count(), model.len());
                if let Some(i) = model.len().checked_sub(1).map(|l| l / 2) {
                    prop_assert_eq!(q[i], model[i]);
                }
                if let Err(e) = q.check() {
                    return Err(TestCaseError::fail(e));
                }
                prop_assert!(q.spare.len() <= SPARE && !q.leaks());
            }
            q.clear();
            prop_assert!(q.len() == 0 && q.pages.is_empty());
        }
    }
}
