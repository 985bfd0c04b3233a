//! A CPU tier's access bookkeeping: a request's accesses recorded once per key (`record`, which the
//! LRU ranks by), its one-run records (`Chunks::recs`) and their promotion to an `Access`, and the
//! store threshold's offer counts (`count_offers`).

use std::cmp::Reverse;

use super::access::{Access, INSERTED, REUSED};
use super::{CpuTier, Eviction, KeySet, Span};
use crate::BlockKey;

impl CpuTier {
    /// Records `rid`'s first access to each key (vLLM's `_record_request_cache_access`): under LRU a
    /// held chunk moves up to `(request rank, -position)` if that is newer; `reused` keys count as reuses
    /// unless this request inserted them.
    /// `absent[i]` (when given) says that `keys[i]` is not held: no rank to move up.
    pub(super) fn record(
        &mut self,
        rid: u64,
        keys: &[(BlockKey, u64)],
        absent: Option<&[bool]>,
        reused: &[BlockKey],
    ) {
        let arc = self.eviction == Eviction::Arc;
        self.promote(rid);
        let spare = &mut self.spare_orders;
        let a = self.accesses.entry(rid).or_insert_with(|| {
            let mut a = Access::new(arc);
            a.order = spare.pop().unwrap_or_default();
            a
        });
        a.unspan();
        if a.order.is_empty() {
            a.order.reserve(keys.len());
        }
        for (i, &(key, pos)) in keys.iter().enumerate() {
            if !arc && absent.is_some_and(|absent| absent[i]) {
                // LRU, a key not held: no rank moves; recorded unchecked (a repeat of an earlier
                // access is dropped when checked), and the request takes its rank.
                a.push_unchecked(key, pos);
                if a.rank == 0 {
                    self.next_rank += 1;
                    a.rank = self.next_rank;
                }
                continue;
            }
            if !a.first_seen(key, pos) || arc {
                continue;
            }
            // LRU: a held chunk moves up to this request's rank and its position, if newer.
            if a.rank == 0 {
                self.next_rank += 1;
                a.rank = self.next_rank;
            }
            let Some(c) = self.chunks.get_mut(key) else {
                continue;
            };
            let rank = (a.rank, Reverse(pos));
            if c.rank() >= rank {
                continue;
            }
            c.set_rank(rank);
            if self.heap_live && c.evictable() {
                self.heap.push(Reverse((rank, key)));
            }
        }
        if self.eviction == Eviction::Arc {
            // Only ARC reads the reuses (and the inserts and store misses that decide them).
            for &key in reused {
                if !a.has(key, INSERTED) {
                    a.set(key, REUSED);
                }
            }
        }
        self.compact_heap();
    }

    /// Request `rid`'s record under LRU (made on its first access, with a spare vector), ranked: a request
    /// takes the next rank at its first recorded access.
    pub(super) fn lru_access(&mut self, rid: u64) -> &mut Access {
        self.promote(rid);
        let spare = &mut self.spare_orders;
        let a = self.accesses.entry(rid).or_insert_with(|| {
            let mut a = Access::new(false);
            a.order = spare.pop().unwrap_or_default();
            a
        });
        if a.rank == 0 {
            self.next_rank += 1;
            a.rank = self.next_rank;
        }
        a
    }

    /// Moves `rid`'s one-run record (`Chunks::recs`) to `accesses` (a span kept as the `Access`'s),
    /// if it is there.
    #[inline]
    fn promote(&mut self, rid: u64) {
        if !self.chunks.recs.is_empty()
            && let Some(rec) = self.chunks.recs.remove(rid)
        {
            let a = self.span_access(rec.rank.get(), (rid, rec.lo, rec.n, rec.pos));
            self.accesses.insert(rid, a);
        }
    }

    /// An LRU record of rank `rank` that is the run `span`.
    pub(super) fn span_access(&mut self, rank: u64, span: Span) -> Access {
        let mut a = Access::new(false);
        a.order = self.spare_orders.pop().unwrap_or_default();
        a.rank = rank;
        a.span = Some(span);
        a
    }

    /// `record` under LRU of keys none of which is held: recorded unchecked, the request ranked.
    pub(super) fn record_absent(&mut self, rid: u64, keys: &[(BlockKey, u64)]) {
        if keys.is_empty() {
            return;
        }
        self.lru_access(rid).extend_unchecked(keys);
    }

    /// The threshold's count of `rid`'s offer of `keys` (`count_offers`, under a threshold): the keys
    /// `rid` counted before, taken out while the offer decides, under `count_per_request`; else None.
    pub(super) fn count_offer(&mut self, rid: u64, keys: &[(BlockKey, u64)]) -> Option<KeySet> {
        if self.threshold == 0 {
            return None;
        }
        let counted = self
            .per_request
            .then(|| self.counted.remove(&rid).unwrap_or_default());
        self.count_offers(keys, counted.as_ref());
        counted
    }

    /// After `count_offer`: every key of the offer is now one `rid` counted (vLLM 0.34.0's
    /// `counted_keys.update`).
    pub(super) fn keep_counted(
        &mut self,
        rid: u64,
        keys: &[(BlockKey, u64)],
        counted: Option<KeySet>,
    ) {
        if let Some(mut c) = counted {
            c.extend(keys.iter().map(|&(k, _)| k));
            self.counted.insert(rid, c);
        }
    }

    /// vLLM's `_record_accesses`: one more offer of each key, in a tracker of `tracker` keys. Keys
    /// already tracked move to its most recent end and are protected (one in `counted`, the keys the
    /// offering request counted before under `count_per_request`, without counting again); a new key
    /// displaces the least recent unprotected one when the tracker is full, or is not tracked if none
    /// is left.
    pub(super) fn count_offers(&mut self, keys: &[(BlockKey, u64)], counted: Option<&KeySet>) {
        let mut protected = KeySet::default();
        for &(key, _) in keys {
            if self.counts.move_to_end(key) {
                if !counted.is_some_and(|c| c.contains(&key))
                    && let Some((_, n)) = self.counts.slot.get_mut(&key)
                {
                    *n += 1;
                }
                protected.insert(key);
            }
        }
        let mut unprotected = self.counts.len() - protected.len();
        for &(key, _) in keys {
            if self.counts.contains(key) {
                continue;
            }
            if self.counts.len() >= self.tracker {
                if unprotected == 0 {
                    continue;
                }
                self.counts.pop_front();
                unprotected -= 1;
            }
            self.counts.set(key, 1);
        }
    }
}
