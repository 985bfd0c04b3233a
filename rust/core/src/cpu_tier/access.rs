//! A CPU tier's orders and records: `Recency` (Python's `OrderedDict`: ARC's lists, the threshold
//! tracker) and `Access` (a request's accesses, which the LRU ranks by).

use std::collections::BTreeMap;
use std::collections::hash_map::Entry;

use super::KeyMap;
use crate::BlockKey;

/// Keys in order, least recent first, with O(log n) move-to-end and removal: Python's `OrderedDict`
/// (ARC's T1/T2/B1/B2, the threshold tracker). Each key holds a stamp, unique and increasing with each
/// move to the end; `order` maps stamps back to keys.
#[derive(Clone, Debug)]
pub(super) struct Recency<V> {
    pub(super) slot: KeyMap<(u64, V)>,
    pub(super) order: BTreeMap<u64, BlockKey>,
    pub(super) next: u64,
}

impl<V> Default for Recency<V> {
    fn default() -> Self {
        Self {
            slot: KeyMap::default(),
            order: BTreeMap::new(),
            next: 0,
        }
    }
}

impl<V> Recency<V> {
    pub(super) fn len(&self) -> usize {
        self.slot.len()
    }

    pub(super) fn contains(&self, key: BlockKey) -> bool {
        self.slot.contains_key(&key)
    }

    pub(super) fn get(&self, key: BlockKey) -> Option<&V> {
        self.slot.get(&key).map(|(_, v)| v)
    }

    pub(super) fn stamp(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// `d[key] = value`: a new key goes to the end, a present one keeps its place.
    pub(super) fn set(&mut self, key: BlockKey, value: V) {
        let stamp = self.next + 1;
        match self.slot.entry(key) {
            Entry::Occupied(mut e) => e.get_mut().1 = value,
            Entry::Vacant(e) => {
                e.insert((stamp, value));
                self.next = stamp;
                self.order.insert(stamp, key);
            }
        }
    }

    /// `d.move_to_end(key)` for a present key; false (nothing changed) for an absent one.
    pub(super) fn move_to_end(&mut self, key: BlockKey) -> bool {
        let stamp = self.stamp();
        let Some((old, _)) = self.slot.get_mut(&key) else {
            return false;
        };
        self.order.remove(old);
        *old = stamp;
        self.order.insert(stamp, key);
        true
    }

    pub(super) fn remove(&mut self, key: BlockKey) -> Option<V> {
        let (stamp, value) = self.slot.remove(&key)?;
        self.order.remove(&stamp);
        Some(value)
    }

    /// `d.popitem(last=False)`: the least recent key.
    pub(super) fn pop_front(&mut self) -> Option<BlockKey> {
        let (_, key) = self.order.pop_first()?;
        self.slot.remove(&key);
        Some(key)
    }

    /// Keys whose stamp is at least `from`, least recent first, with their stamps.
    pub(super) fn since(&self, from: u64) -> impl Iterator<Item = (u64, BlockKey)> + '_ {
        self.order.range(from..).map(|(&s, &k)| (s, k))
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = BlockKey> + '_ {
        self.order.values().copied()
    }

    pub(super) fn check(&self, what: &str) -> std::result::Result<(), String> {
        if self.slot.len() != self.order.len() {
            return Err(format!(
                "{what} holds {} keys but orders {}",
                self.slot.len(),
                self.order.len()
            ));
        }
        for (&stamp, key) in &self.order {
            if self.slot.get(key).map(|s| s.0) != Some(stamp) {
                return Err(format!("{what} orders key {} under a stale stamp", key.0));
            }
        }
        Ok(())
    }
}

/// `Access::flags`: the key was accessed (it is in `order`), inserted by the request, reused by it, a
/// store miss of it (vLLM's `_RequestCacheAccess` sets). Only ARC reads the last three: under LRU they
/// are not kept.
pub(super) const SEEN: u8 = 1;
pub(super) const INSERTED: u8 = 2;
pub(super) const REUSED: u8 = 4;
pub(super) const STORE_MISS: u8 = 8;

/// What one live request did to the tier (vLLM's `_RequestCacheAccess` and the LRU's request rank);
/// dropped at its `finish`.
#[derive(Clone, Debug, Default)]
pub(super) struct Access {
    /// The LRU's request rank, 0 until first needed.
    pub(super) rank: u64,
    /// Keys seen, in order of first access, with their position then: `order[..checked]` distinct and
    /// indexed (by the filter or `flags`); after them (LRU) keys recorded while not held, unchecked
    /// (repeats possible), checked when a held key's access needs the set (`absorb`) or at `finish`.
    pub(super) order: Vec<(BlockKey, u64)>,
    pub(super) checked: usize,
    /// Whether the unchecked keys are consecutive keys of one group (`Chunks`): distinct, so they
    /// need no check at `finish` when they are all the keys (a row's private chunks, the usual case).
    pub(super) run: bool,
    /// Each key's `SEEN`, `INSERTED`, `REUSED` and `STORE_MISS` bits: vLLM's four sets in one map.
    pub(super) flags: KeyMap<u8>,
    /// Whether `flags` holds the keys seen: always under ARC; under LRU (which reads no other bit)
    /// once `order` is longer than `SCAN_SEEN`, below which a scan of `order` finds them for less.
    pub(super) mapped: bool,
    /// While scanning: a 256-bit filter of the keys in `order` (a clear bit: not seen, no scan).
    pub(super) filter: [u64; 4],
    /// A record that is one run of keys at consecutive positions, kept as the run (`order` empty,
    /// none checked): `(hi, lo, n, pos)` for keys `(hi, lo..lo + n)` at positions `pos..pos + n`, in that
    /// order (a request's private chunks offered, `extend_key_run`). Anything else done to the record
    /// lists it in `order` first (`unspan`).
    pub(super) span: Option<super::Span>,
}

/// A key's bit in `Access::filter`.
#[inline]
pub(super) fn filter_bit(key: BlockKey) -> (usize, u64) {
    let h = ((key.0 as u64) ^ ((key.0 >> 64) as u64)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56;
    ((h >> 6) as usize, 1 << (h & 63))
}

/// Keys seen a request's record finds by scanning `order` rather than hashing (LRU).
pub(super) const SCAN_SEEN: usize = 24;

impl Access {
    pub(super) fn new(arc: bool) -> Self {
        Access {
            mapped: arc,
            ..Access::default()
        }
    }

    /// Lists a `span` in `order` (the record unchanged).
    #[inline]
    pub(super) fn unspan(&mut self) {
        if let Some((hi, lo, n, pos)) = self.span.take() {
            let first = super::run_key(hi, lo);
            self.order
                .extend((0..n).map(|i| (BlockKey(first.0 + u128::from(i)), pos + i)));
            self.run = true;
        }
    }

    /// Records `key` at `pos` unchecked (LRU, a key not held). Unchecked keys that are not one run
    /// are checked once more than `SCAN_SEEN` wait (so that repeated offers of the same keys keep the
    /// record within twice its distinct keys and that many more).
    #[inline]
    pub(super) fn push_unchecked(&mut self, key: BlockKey, pos: u64) {
        self.unspan();
        let n = self.order.len();
        if n == self.checked {
            self.run = true;
        } else if self.run {
            let last = self.order[n - 1].0.0;
            self.run = key.0 == last.wrapping_add(1) && (key.0 >> 64) == (last >> 64);
        }
        self.order.push((key, pos));
        if !self.run && self.order.len() - self.checked > SCAN_SEEN {
            self.absorb();
        }
    }

    /// `push_unchecked` of each of `keys` (not empty).
    pub(super) fn extend_unchecked(&mut self, keys: &[(BlockKey, u64)]) {
        self.unspan();
        let n = self.order.len();
        let follows =
            |a: BlockKey, b: BlockKey| b.0 == a.0.wrapping_add(1) && (a.0 >> 64) == (b.0 >> 64);
        let joins = n == self.checked || self.run && follows(self.order[n - 1].0, keys[0].0);
        self.run = joins && keys.windows(2).all(|w| follows(w[0].0, w[1].0));
        self.order.extend_from_slice(keys);
        if !self.run && self.order.len() - self.checked > SCAN_SEEN {
            self.absorb();
        }
    }

    /// `extend_run` of the `n` >= 1 keys `(hi, lo..lo + n)` (no wrap) at positions `pos..pos + n`: kept
    /// as a `span` while the record is that one run (never across the lower half's wrap: `unspan`
    /// lists a span by adding to the whole key, so `(hi, u64::MAX)` then `(hi, 0)` are not one span).
    pub(super) fn extend_key_run(&mut self, hi: u64, lo: u64, n: u64, pos: u64) {
        if self.order.is_empty() && self.checked == 0 {
            match &mut self.span {
                None => {
                    self.span = Some((hi, lo, n, pos));
                    return;
                }
                Some((span_hi, span_lo, span_n, span_pos))
                    if *span_hi == hi
                        && span_lo.checked_add(*span_n) == Some(lo)
                        && *span_pos + *span_n == pos =>
                {
                    *span_n += n;
                    return;
                }
                Some(_) => self.unspan(),
            }
        }
        let len = self.order.len();
        let first = super::run_key(hi, lo);
        if len == self.checked {
            self.run = true;
        } else if self.run {
            let last = self.order[len - 1].0.0;
            self.run = first.0 == last.wrapping_add(1) && (first.0 >> 64) == (last >> 64);
        }
        self.order
            .extend((0..n).map(|i| (BlockKey(first.0 + u128::from(i)), pos + i)));
        if !self.run && self.order.len() - self.checked > SCAN_SEEN {
            self.absorb();
        }
    }

    /// `extend_unchecked` of `keys` known to be one run (consecutive keys of one group).
    pub(super) fn extend_run(&mut self, keys: &[(BlockKey, u64)]) {
        self.unspan();
        let n = self.order.len();
        if n == self.checked {
            self.run = true;
        } else if self.run {
            let (last, first) = (self.order[n - 1].0.0, keys[0].0.0);
            self.run = first == last.wrapping_add(1) && (first >> 64) == (last >> 64);
        }
        self.order.extend_from_slice(keys);
        if !self.run && self.order.len() - self.checked > SCAN_SEEN {
            self.absorb();
        }
    }

    /// Whether `key` is among the checked keys.
    #[inline]
    pub(super) fn seen(&self, key: BlockKey) -> bool {
        if self.mapped {
            return self.has(key, SEEN);
        }
        let (word, bit) = filter_bit(key);
        self.filter[word] & bit != 0 && self.order[..self.checked].iter().any(|&(k, _)| k == key)
    }

    /// Indexes `order[checked]` (a key not seen) and counts it checked.
    #[inline]
    pub(super) fn index_next(&mut self) {
        let key = self.order[self.checked].0;
        self.checked += 1;
        if self.mapped {
            self.set(key, SEEN);
            return;
        }
        let (word, bit) = filter_bit(key);
        self.filter[word] |= bit;
        if self.checked > SCAN_SEEN {
            self.mapped = true;
            self.flags.reserve(self.checked);
            for &(k, _) in &self.order[..self.checked] {
                *self.flags.entry(k).or_insert(0) |= SEEN;
            }
        }
    }

    /// Records a first access to `key` at `pos`; false if it was seen before. (Unchecked keys are
    /// checked first.)
    #[inline]
    pub(super) fn first_seen(&mut self, key: BlockKey, pos: u64) -> bool {
        self.absorb();
        if self.seen(key) {
            return false;
        }
        self.order.push((key, pos));
        self.index_next();
        true
    }

    /// Checks the unchecked keys in order, dropping the repeats (a key's first access stays).
    pub(super) fn absorb(&mut self) {
        self.unspan();
        let n = self.order.len();
        if self.checked == n {
            return;
        }
        if self.checked == 0 && self.run {
            // Consecutive keys of one group: distinct.
            if n <= SCAN_SEEN {
                for &(k, _) in &self.order {
                    let (word, bit) = filter_bit(k);
                    self.filter[word] |= bit;
                }
                self.checked = n;
                return;
            }
        }
        for r in self.checked..n {
            let e = self.order[r];
            if self.seen(e.0) {
                continue;
            }
            let w = self.checked;
            self.order[w] = e;
            self.index_next();
        }
        self.order.truncate(self.checked);
    }

    /// The keys in order, repeats dropped (the first access kept), taken out for `finish`.
    pub(super) fn take_distinct(&mut self) -> Vec<(BlockKey, u64)> {
        self.unspan();
        if !(self.checked == 0 && self.run) {
            self.absorb(); // (else distinct: no check needed)
        }
        self.checked = 0;
        std::mem::take(&mut self.order)
    }

    #[inline]
    pub(super) fn has(&self, key: BlockKey, flag: u8) -> bool {
        self.flags.get(&key).is_some_and(|f| f & flag != 0)
    }

    /// Sets `flag` on `key`; returns whether it was unset.
    #[inline]
    pub(super) fn set(&mut self, key: BlockKey, flag: u8) -> bool {
        self.unspan();
        let f = self.flags.entry(key).or_insert(0);
        let was = *f & flag == 0;
        *f |= flag;
        was
    }
}
