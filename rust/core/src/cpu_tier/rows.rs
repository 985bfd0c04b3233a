//! A map from rows (numbers below 2^48, mostly new ones a little above the last) to values: a window of
//! slots indexed by row, with the rows left behind it in a hash table (DESIGN.md §CPU tier, "rows'
//! window"). The tier keeps its rows' groups in one (`Chunks`): requests are stored in about the order
//! they came and evicted in about the order they were stored, so the held rows form a window that moves
//! forward, and a slot is found by subtraction, with no hashing, no probing and no table to regrow and
//! rehash (the hash table this replaced was most of a filling tier's page faults: results/README.md §CPU
//! tier).
//!
//! Invariants (`check`): a row below `base` is among the stragglers or absent; a row at or above it is in
//! its slot of the window or absent; the window spans at most `2 * live + SLACK` slots (`live` its
//! occupied ones), so memory stays O(rows held): when a removal leaves it sparser, its empty slots at
//! either end are dropped, then its first rows move to the stragglers until it is not (a removal
//! otherwise only empties a slot). What a map holds, and so every decision made from it, does not depend
//! on where a row is kept.

use std::collections::hash_map::{self, HashMap};
use std::hash::BuildHasherDefault;

use super::paged::Paged;
use super::{MAX_ROWS, ROW_NAMES};
use crate::block_pool::IdHasher;

/// Empty slots a window may span beyond twice its rows held: the running requests' records span the
/// rows from the oldest running to the newest, thousands on the million-request benchmark, tens of
/// them held. The core's tests use 4, so that their tiers' few rows also fall behind the window and
/// start it again.
#[cfg(not(test))]
const SLACK: usize = 4096;
#[cfg(test)]
const SLACK: usize = 4;

type Map<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

#[derive(Clone, Debug)]
pub(super) struct RowMap<V> {
    /// The row of `window[0]`.
    base: u64,
    /// (paged: it moves forward through as many rows as requests, holding a fraction of them)
    window: Paged<Option<V>>,
    /// The occupied slots of `window`.
    live: usize,
    /// Rows below `base`.
    stragglers: Map<V>,
}

impl<V> Default for RowMap<V> {
    fn default() -> Self {
        RowMap {
            base: 0,
            window: Paged::default(),
            live: 0,
            stragglers: Map::default(),
        }
    }
}

/// A row's place in a map, occupied or not (`HashMap::entry`'s).
pub(super) enum Entry<'a, V> {
    Occupied(OccupiedEntry<'a, V>),
    Vacant(VacantEntry<'a, V>),
}

pub(super) struct OccupiedEntry<'a, V>(Occupied<'a, V>);

enum Occupied<'a, V> {
    Map(hash_map::OccupiedEntry<'a, u64, V>),
    /// The window's slot `i`, occupied.
    Slot(&'a mut RowMap<V>, usize),
}

pub(super) struct VacantEntry<'a, V>(Vacant<'a, V>);

enum Vacant<'a, V> {
    Map(hash_map::VacantEntry<'a, u64, V>),
    /// A row at or above `base` (or any row, the map being empty).
    Slot(&'a mut RowMap<V>, u64),
}

impl<'a, V> From<hash_map::Entry<'a, u64, V>> for Entry<'a, V> {
    #[inline]
    fn from(e: hash_map::Entry<'a, u64, V>) -> Self {
        match e {
            hash_map::Entry::Occupied(e) => Entry::Occupied(OccupiedEntry(Occupied::Map(e))),
            hash_map::Entry::Vacant(e) => Entry::Vacant(VacantEntry(Vacant::Map(e))),
        }
    }
}

impl<'a, V> OccupiedEntry<'a, V> {
    #[inline]
    pub(super) fn get(&self) -> &V {
        match &self.0 {
            Occupied::Map(e) => e.get(),
            Occupied::Slot(m, i) => m.window[*i].as_ref().expect("an occupied slot"),
        }
    }

    #[inline]
    pub(super) fn get_mut(&mut self) -> &mut V {
        match &mut self.0 {
            Occupied::Map(e) => e.get_mut(),
            Occupied::Slot(m, i) => m.window[*i].as_mut().expect("an occupied slot"),
        }
    }

    #[inline]
    pub(super) fn into_mut(self) -> &'a mut V {
        match self.0 {
            Occupied::Map(e) => e.into_mut(),
            Occupied::Slot(m, i) => m.window[i].as_mut().expect("an occupied slot"),
        }
    }

    #[inline]
    pub(super) fn remove(self) -> V {
        match self.0 {
            Occupied::Map(e) => e.remove(),
            Occupied::Slot(m, i) => m.take(i).expect("an occupied slot"),
        }
    }
}

impl<'a, V> VacantEntry<'a, V> {
    #[inline]
    pub(super) fn insert(self, v: V) -> &'a mut V {
        match self.0 {
            Vacant::Map(e) => e.insert(v),
            Vacant::Slot(m, row) => m.place(row, v),
        }
    }
}

impl<V> RowMap<V> {
    /// Row `row`'s slot in the window, if the window reaches it.
    #[inline]
    fn slot(&self, row: u64) -> Option<usize> {
        let i = row.wrapping_sub(self.base);
        (row >= self.base && i < self.window.len() as u64).then_some(i as usize)
    }

    #[inline]
    pub(super) fn get(&self, row: u64) -> Option<&V> {
        if row < self.base {
            return self.stragglers.get(&row);
        }
        self.window[self.slot(row)?].as_ref()
    }

    #[inline]
    pub(super) fn get_mut(&mut self, row: u64) -> Option<&mut V> {
        if row < self.base {
            return self.stragglers.get_mut(&row);
        }
        let i = self.slot(row)?;
        self.window[i].as_mut()
    }

    #[inline]
    pub(super) fn entry(&mut self, row: u64) -> Entry<'_, V> {
        if row < self.base && !(self.live == 0 && self.stragglers.is_empty()) {
            return self.stragglers.entry(row).into();
        }
        match self.slot(row) {
            Some(i) if self.window[i].is_some() => {
                Entry::Occupied(OccupiedEntry(Occupied::Slot(self, i)))
            }
            _ => Entry::Vacant(VacantEntry(Vacant::Slot(self, row))),
        }
    }

    #[inline]
    pub(super) fn remove(&mut self, row: u64) -> Option<V> {
        if row < self.base {
            return self.stragglers.remove(&row);
        }
        self.take(self.slot(row)?)
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.live == 0 && self.stragglers.is_empty()
    }

    fn len(&self) -> usize {
        self.live + self.stragglers.len()
    }

    /// Every row held and its value: the window's in order, then the stragglers in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        let base = self.base;
        self.window
            .iter()
            .enumerate()
            .filter_map(move |(i, v)| v.as_ref().map(|v| (base + i as u64, v)))
            .chain(self.stragglers.iter().map(|(&row, v)| (row, v)))
    }

    /// `iter`, mutable.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut V)> + '_ {
        let base = self.base;
        self.window
            .iter_mut()
            .enumerate()
            .filter_map(move |(i, v)| v.as_mut().map(|v| (base + i as u64, v)))
            .chain(self.stragglers.iter_mut().map(|(&row, v)| (row, v)))
    }

    /// The most slots a window of `live` rows may span.
    #[inline]
    fn max_span(live: usize) -> usize {
        live.saturating_mul(2).saturating_add(SLACK)
    }

    /// `v` as row `row`'s (absent, at or above `base` unless the map is empty).
    #[inline]
    fn place(&mut self, row: u64, v: V) -> &mut V {
        if self.live == 0 {
            // (nothing at or above `row` is a straggler: see `entry`)
            self.window.clear();
            self.base = row;
        }
        let i = row - self.base;
        if i >= self.window.len() as u64 && i >= Self::max_span(self.live + 1) as u64 {
            // Too far past the window: its rows become stragglers and it starts again at `row`.
            let mut behind = self.base;
            while let Some(w) = self.window.pop_front() {
                if let Some(w) = w {
                    self.stragglers.insert(behind, w);
                }
                behind += 1;
            }
            self.live = 0;
            self.base = row;
        }
        let i = (row - self.base) as usize;
        while self.window.len() < i {
            self.window.push_back(None);
        }
        self.live += 1;
        if i == self.window.len() {
            return self
                .window
                .push_back(Some(v))
                .as_mut()
                .expect("just placed");
        }
        self.window[i].insert(v)
    }

    /// The window's slot `i` emptied, the window trimmed if it spans more than `max_span`.
    #[inline]
    fn take(&mut self, i: usize) -> Option<V> {
        let v = self.window[i].take()?;
        self.live -= 1;
        if self.window.len() > Self::max_span(self.live) {
            self.trim();
        }
        Some(v)
    }

    /// The window's empty slots at either end dropped, then its first rows moved to the stragglers
    /// while it spans more than `max_span`.
    #[cold]
    fn trim(&mut self) {
        while let Some(None) = self.window.back() {
            self.window.pop_back();
        }
        loop {
            while let Some(None) = self.window.front() {
                self.window.pop_front();
                self.base += 1;
            }
            if self.window.len() <= Self::max_span(self.live) {
                break;
            }
            // Too sparse: its first row joins the stragglers.
            if let Some(Some(w)) = self.window.pop_front() {
                self.stragglers.insert(self.base, w);
                self.live -= 1;
            }
            self.base += 1;
        }
    }

    /// The invariants above, checked.
    pub(super) fn check(&self) -> Result<(), String> {
        self.window.check()?;
        let live = self.window.iter().filter(|v| v.is_some()).count();
        if live != self.live {
            return Err(format!("{live} rows in the window, {} counted", self.live));
        }
        if self.window.len() > Self::max_span(self.live) {
            return Err(format!(
                "the rows' window spans {} slots for {} rows",
                self.window.len(),
                self.live
            ));
        }
        if let Some(row) = self.stragglers.keys().find(|&&r| r >= self.base) {
            return Err(format!(
                "straggler row {row} at or above the window's base {}",
                self.base
            ));
        }
        Ok(())
    }
}

/// Whether `name` is a row's (`super::row_name`).
#[inline]
fn is_row_name(name: u64) -> bool {
    name.wrapping_sub(ROW_NAMES) < MAX_ROWS
}

/// Values by a name (a key's upper half, a request's id in the tier): rows' names (`super::row_name`)
/// in a `RowMap`, any other in a hash table (placed at random). Which of the two holds a name depends
/// on the name alone, so any names are held exactly.
#[derive(Clone, Debug)]
pub(super) struct ByName<V> {
    rows: RowMap<V>,
    other: Map<V>,
}

impl<V> Default for ByName<V> {
    fn default() -> Self {
        ByName {
            rows: RowMap::default(),
            other: Map::default(),
        }
    }
}

impl<V> ByName<V> {
    #[inline]
    pub(super) fn get(&self, name: u64) -> Option<&V> {
        if is_row_name(name) {
            self.rows.get(name.wrapping_sub(ROW_NAMES))
        } else {
            self.other.get(&name)
        }
    }

    #[inline]
    pub(super) fn get_mut(&mut self, name: u64) -> Option<&mut V> {
        if is_row_name(name) {
            self.rows.get_mut(name.wrapping_sub(ROW_NAMES))
        } else {
            self.other.get_mut(&name)
        }
    }

    #[inline]
    pub(super) fn entry(&mut self, name: u64) -> Entry<'_, V> {
        if is_row_name(name) {
            self.rows.entry(name.wrapping_sub(ROW_NAMES))
        } else {
            self.other.entry(name).into()
        }
    }

    #[inline]
    pub(super) fn remove(&mut self, name: u64) -> Option<V> {
        if is_row_name(name) {
            self.rows.remove(name.wrapping_sub(ROW_NAMES))
        } else if self.other.is_empty() {
            None
        } else {
            self.other.remove(&name)
        }
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.other.is_empty()
    }

    /// How many names it holds.
    pub(super) fn len(&self) -> usize {
        self.rows.len() + self.other.len()
    }

    /// Every name held and its value, in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        let rows = self
            .rows
            .iter()
            .map(|(row, v)| (ROW_NAMES.wrapping_add(row), v));
        rows.chain(self.other.iter().map(|(&name, v)| (name, v)))
    }

    /// `iter`, mutable.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut V)> + '_ {
        let rows = self
            .rows
            .iter_mut()
            .map(|(row, v)| (ROW_NAMES.wrapping_add(row), v));
        rows.chain(self.other.iter_mut().map(|(&name, v)| (name, v)))
    }

    /// The rows' window's invariants (`RowMap::check`).
    pub(super) fn check(&self) -> Result<(), String> {
        self.rows.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An operation on a row near the last one named: `(kind, step)`, the row `last + step` (wrapping
    /// below 0 to a far row, so that the window restarts and rows fall behind it).
    fn ops() -> impl Strategy<Value = Vec<(u8, i64)>> {
        proptest::collection::vec(
            (
                0u8..5,
                prop_oneof![8 => -40i64..40, 1 => -20_000i64..20_000],
            ),
            1..400,
        )
    }

    proptest! {
        /// A map's contents are a `HashMap`'s under any inserts, updates and removals (the engine's
        /// mostly forward rows, and rows far behind and ahead), and its invariants hold after each.
        #[test]
        fn a_row_map_holds_what_a_hash_map_holds(ops in ops()) {
            let mut m: RowMap<u64> = RowMap::default();
            let mut model: HashMap<u64, u64> = HashMap::new();
            let mut last: i64 = 1000;
            for (n, (kind, step)) in ops.into_iter().enumerate() {
                last = (last + step).rem_euclid(100_000);
                let row = last as u64;
                let v = n as u64;
                match kind {
                    0 | 1 => match m.entry(row) {
                        // An insert, or (occupied) an update through the entry.
                        Entry::Vacant(e) => {
                            prop_assert!(!model.contains_key(&row));
                            prop_assert_eq!(*e.insert(v), v);
                            model.insert(row, v);
                        }
                        Entry::Occupied(mut e) => {
                            prop_assert_eq!(Some(e.get()), model.get(&row));
                            *e.get_mut() = v;
                            prop_assert_eq!(*e.into_mut(), v);
                            model.insert(row, v);
                        }
                    },
                    2 => prop_assert_eq!(m.remove(row), model.remove(&row)),
                    3 => {
                        if let Entry::Occupied(e) = m.entry(row) {
                            prop_assert_eq!(Some(e.remove()), model.remove(&row));
                        } else {
                            prop_assert!(!model.contains_key(&row));
                        }
                    }
                    _ => {
                        if let Some(x) = m.get_mut(row) {
                            *x += 1;
                        }
                        if let Some(x) = model.get_mut(&row) {
                            *x += 1;
                        }
                    }
                }
                prop_assert_eq!(m.get(row), model.get(&row));
                if let Err(e) = m.check() {
                    return Err(TestCaseError::fail(e));
                }
                let mut got: Vec<(u64, u64)> = m.iter().map(|(r, &v)| (r, v)).collect();
                let mut want: Vec<(u64, u64)> = model.iter().map(|(&r, &v)| (r, v)).collect();
                got.sort_unstable();
                want.sort_unstable();
                prop_assert_eq!(got, want);
            }
        }
    }

    /// Rows stored in order and removed oldest first (the engine's usual case) stay in the window; a
    /// window emptied of all but its first row (oldest last) sends that row behind it (memory O(rows
    /// held)); a row far past the window starts it again.
    #[test]
    fn a_forward_window_keeps_its_rows_and_stays_small() {
        let mut m: RowMap<u64> = RowMap::default();
        for row in 0..10_000u64 {
            if let Entry::Vacant(e) = m.entry(row) {
                e.insert(row);
            }
            if row >= 100 {
                assert_eq!(m.remove(row - 100), Some(row - 100));
            }
        }
        assert!(m.stragglers.is_empty());
        assert_eq!(m.live, 100);
        assert!(m.window.len() <= RowMap::<u64>::max_span(100) && m.base > 0);
        for row in (9_901..10_000).rev() {
            m.remove(row);
        }
        assert_eq!(
            (m.live, m.stragglers.len(), m.get(9_900)),
            (1, 0, Some(&9_900))
        );
        let mut m: RowMap<u64> = RowMap::default();
        let n = SLACK as u64 + 1_000;
        for row in 0..n {
            if let Entry::Vacant(e) = m.entry(row) {
                e.insert(row);
            }
        }
        for row in 1..n {
            m.remove(row);
            assert!(m.window.len() <= RowMap::<u64>::max_span(m.live));
        }
        assert_eq!(m.get(0), Some(&0));
        assert_eq!((m.live, m.stragglers.len()), (0, 1));
        m.check().unwrap();
        // A row far past the window starts it again there, its rows behind it.
        let mut m: RowMap<u64> = RowMap::default();
        for row in [5, 7, 1_000_000, 1_000_003, 6] {
            if let Entry::Vacant(e) = m.entry(row) {
                e.insert(row);
            }
            m.check().unwrap();
        }
        assert_eq!((m.base, m.window.len(), m.live), (1_000_000, 4, 2));
        let mut behind: Vec<u64> = m.stragglers.keys().copied().collect();
        behind.sort_unstable();
        assert_eq!(behind, [5, 6, 7]);
        assert_eq!(
            [m.get(6), m.get(1_000_003), m.get(8)],
            [Some(&6), Some(&1_000_003), None]
        );
    }
}
