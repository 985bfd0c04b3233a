//! The CPU tier's stores (`prepare_store`, its run forms `prepare_store_run` and `try_store_run`) and
//! their completions (`complete_store`, `complete_store_run`): vLLM 0.33.0's `prepare_store` and
//! `complete_store` in `vllm/v1/kv_offload/cpu/manager.py` (DESIGN.md §CPU tier).

use std::cmp::Reverse;

use super::access::{Access, INSERTED, STORE_MISS};
use super::group::{Chunk, run_key, run_of};
use super::{CpuTier, Eviction, KeySet};
use crate::BlockKey;

impl CpuTier {
    /// Offers request `rid`'s chunks (`prepare_store`; `(key, position)` pairs). Keys the tier lacks
    /// (and, with a threshold, has seen offered often enough) are stored as pending chunks, evicting
    /// others if needed, never one offered here. `Some(())`: `stored` holds the keys stored now, in offer
    /// order, and `evicted` the keys evicted for them, in eviction order (both are cleared first; LRU's
    /// evictions are only counted, `num_evicted`, once `count_evictions_only`).
    /// `None` when the tier cannot make room: nothing is stored or evicted, but the offers are counted
    /// and the accesses recorded, as in vLLM.
    pub fn prepare_store(
        &mut self,
        rid: u64,
        keys: &[(BlockKey, u64)],
        stored: &mut Vec<BlockKey>,
        evicted: &mut Vec<BlockKey>,
    ) -> Option<()> {
        stored.clear();
        evicted.clear();
        let counted = self.count_offer(rid, keys);
        // Scratch kept between calls: the keys to store, the ready ones offered again, the accesses.
        let mut to_store = std::mem::take(&mut self.scratch_store);
        let mut ready_existing = std::mem::take(&mut self.scratch_ready);
        let mut accessed = std::mem::take(&mut self.scratch_accessed);
        let mut absent = std::mem::take(&mut self.scratch_absent);
        to_store.clear();
        ready_existing.clear();
        accessed.clear();
        absent.clear();
        if self.eviction == Eviction::Lru
            && self.threshold == 0
            && let Some((hi, lo, n)) = run_of(keys.iter().map(|&(k, _)| k))
            && self.chunks.none_held(hi, lo, n as u64)
        {
            // One run of keys none of which is held (a request's private chunks): all to store.
            self.scratch_store = to_store;
            self.scratch_ready = ready_existing;
            self.scratch_accessed = accessed;
            self.scratch_absent = absent;
            let result = self.store_new_run(rid, keys, (hi, lo), stored, evicted);
            self.debug_check();
            return result;
        }
        let mut skipped = 0;
        let (threshold, counts) = (self.threshold, &self.counts);
        let seen = counted.as_ref();
        self.chunks
            .visit(keys.iter().map(|&(key, _)| key), |i, key, found| {
                let pos = keys[i].1;
                match found {
                    None => {
                        if threshold > 0 && counts.get(key).copied().unwrap_or(0) < threshold {
                            // (per request, a skip counts once per request and key)
                            if !seen.is_some_and(|c| c.contains(&key)) {
                                skipped += 1;
                            }
                            return;
                        }
                        to_store.push((key, pos));
                        if !ready_existing.is_empty() {
                            absent.push(true);
                            accessed.push((key, pos));
                        }
                    }
                    Some(c) if c.ready => {
                        if ready_existing.is_empty() {
                            // The accesses so far were all keys to store.
                            absent.resize(to_store.len(), true);
                            accessed.extend_from_slice(&to_store);
                        }
                        ready_existing.push(key);
                        absent.push(false);
                        accessed.push((key, pos));
                    }
                    Some(_) => {}
                }
                // Stored or reused: an access (a repeated key has the same fate each time); while
                // every access is a key to store, `to_store` holds them (`accessed` stays empty).
            });
        self.num_stores_skipped += skipped;
        self.keep_counted(rid, keys, counted);
        if self.eviction == Eviction::Arc {
            // Only ARC learns from store misses.
            let a = self
                .accesses
                .entry(rid)
                .or_insert_with(|| Access::new(true));
            let misses: Vec<BlockKey> = to_store
                .iter()
                .map(|&(k, _)| k)
                .filter(|&k| !a.has(k, STORE_MISS))
                .collect();
            for &(key, _) in &to_store {
                a.set(key, STORE_MISS);
            }
            if !misses.is_empty() {
                self.arc_store_misses(&misses);
            }
        }
        if ready_existing.is_empty() {
            // Every access a key to store (none held): under LRU nothing is re-ranked.
            if self.eviction == Eviction::Lru {
                self.record_absent(rid, &to_store);
            } else {
                absent.resize(to_store.len(), true);
                self.record(rid, &to_store, Some(&absent), &ready_existing);
            }
        } else {
            self.record(rid, &accessed, Some(&absent), &ready_existing);
        }
        let result = self.insert_stored(rid, keys, &to_store, stored, evicted);
        self.scratch_store = to_store;
        self.scratch_ready = ready_existing;
        self.scratch_accessed = accessed;
        self.scratch_absent = absent;
        self.debug_check();
        result
    }

    /// `prepare_store` of the `n` >= 1 keys `(hi, lo..lo + n)` at positions `pos..pos + n` (a request's
    /// private chunks), the same decisions: `Some(true)` when all of them were stored (as a run:
    /// `stored` left empty), `Some(false)` when `prepare_store` decided (`offer` then holds the keys
    /// offered and `stored` those stored), None when there is no room.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_store_run(
        &mut self,
        rid: u64,
        (hi, lo, n): (u64, u64, u64),
        pos: u64,
        offer: &mut Vec<(BlockKey, u64)>,
        stored: &mut Vec<BlockKey>,
        evicted: &mut Vec<BlockKey>,
    ) -> Option<bool> {
        stored.clear();
        evicted.clear();
        if self.try_store_run(rid, (hi, lo, n), pos, evicted) {
            return Some(true);
        }
        offer.clear();
        offer.extend((0..n).map(|i| (run_key(hi, lo.wrapping_add(i)), pos + i)));
        self.prepare_store(rid, offer, stored, evicted)
            .map(|()| false)
    }

    /// `prepare_store_run`'s common case, alone: true if the `n` keys `(hi, lo..lo + n)` at positions
    /// `pos..` were stored whole as pending chunks (none held, room for them or chunks enough to evict,
    /// LRU, no threshold: the decision `prepare_store` makes, a request's record made or extended, the
    /// chunks evicted for them appended to `evicted` in eviction order unless `count_evictions_only`);
    /// false, nothing changed, if
    /// `prepare_store_run` must decide otherwise.
    #[inline]
    pub fn try_store_run(
        &mut self,
        rid: u64,
        (hi, lo, n): (u64, u64, u64),
        pos: u64,
        evicted: &mut Vec<BlockKey>,
    ) -> bool {
        if !(self.eviction == Eviction::Lru
            && self.threshold == 0
            && n >= 1
            && lo.checked_add(n - 1).is_some()
            && self.chunks.singles.is_empty())
        {
            return false;
        }
        let (Ok(n32), Ok(pos32)) = (u32::try_from(n), u32::try_from(pos)) else {
            return false;
        };
        if pos32.checked_add(n32).is_none() {
            return false;
        }
        // `store_new_run`'s case (one run of keys none held), its keys unlisted: the request's own
        // keys (its id their upper half) with its record in their group, else the record in
        // `accesses`.
        let own = rid == hi && (self.accesses.is_empty() || !self.accesses.contains_key(&rid));
        let room = self.capacity - self.used();
        if n > room {
            // `insert_stored`'s eviction first (none of the keys held, so none protected), once
            // the store is known to go through.
            let fits = if own {
                self.chunks.own_run_fits(hi, lo, n, pos)
            } else {
                self.chunks.none_held(hi, lo, n)
            };
            if !fits || !self.make_room(n, evicted) {
                return false;
            }
        }
        if own {
            if self
                .chunks
                .store_own_run((hi, lo, n32, pos32), &mut self.next_rank)
            {
                self.debug_check();
                return true;
            }
        } else if self.chunks.none_held(hi, lo, n) {
            let a = self.lru_access(rid);
            a.extend_key_run(hi, lo, n, pos);
            let req = a.rank;
            self.chunks.insert_pending_run(hi, lo, n32, req, pos32);
            self.debug_check();
            return true;
        }
        debug_assert!(n <= room, "a store evicted for is made");
        false
    }

    /// `prepare_store` of `keys`, a run of keys starting at `(hi, lo)` none of which is held: recorded,
    /// and stored if there is room without evicting (else as `insert_stored` does).
    fn store_new_run(
        &mut self,
        rid: u64,
        keys: &[(BlockKey, u64)],
        (hi, lo): (u64, u64),
        stored: &mut Vec<BlockKey>,
        evicted: &mut Vec<BlockKey>,
    ) -> Option<()> {
        if (keys.len() as u64) > self.capacity - self.used() {
            self.record_absent(rid, keys);
            return self.insert_stored(rid, keys, keys, stored, evicted);
        }
        let a = self.lru_access(rid);
        a.extend_run(keys);
        let req = a.rank;
        let (first, last) = (keys[0].1, keys[keys.len() - 1].1);
        if last.checked_sub(first) == Some(keys.len() as u64 - 1)
            && keys.windows(2).all(|w| w[1].1 == w[0].1 + 1)
            && let (Ok(n), Ok(pos)) = (u32::try_from(keys.len()), u32::try_from(first))
            && pos.checked_add(n).is_some()
        {
            // Positions up by one as the keys (a request's private chunks): a run of slots.
            self.chunks.insert_pending_run(hi, lo, n, req, pos);
        } else {
            self.chunks.insert_run(
                hi,
                lo,
                keys.iter().map(|&(_, pos)| Chunk {
                    req,
                    pos: u32::try_from(pos).expect("a chunk position below 2^32"),
                    ..Chunk::default()
                }),
            );
        }
        stored.extend(keys.iter().map(|&(k, _)| k));
        Some(())
    }

    /// Room for `n` more chunks of a run none of whose keys is held (so none protected), evicting the
    /// least first (`try_store_run`'s and `store_own`'s): false, nothing evicted, if there are not
    /// enough evictable chunks.
    #[inline]
    pub(super) fn make_room(&mut self, n: u64, evicted: &mut Vec<BlockKey>) -> bool {
        self.make_room_keeping(n, KeySet::default, evicted)
    }

    /// `make_room` keeping the keys `protected` makes (built only if something must be evicted:
    /// `insert_stored`'s, the keys its store offered).
    #[inline]
    fn make_room_keeping(
        &mut self,
        n: u64,
        protected: impl FnOnce() -> KeySet,
        evicted: &mut Vec<BlockKey>,
    ) -> bool {
        let room = self.capacity - self.used();
        if n <= room {
            return true;
        }
        let need = n - room;
        if need > self.num_evictable || !self.evict(need as usize, &protected(), evicted) {
            return false;
        }
        self.num_evictable -= need; // (an eviction that goes through takes as many as asked)
        self.num_evicted += need;
        true
    }

    /// `prepare_store`'s second half: room for `to_store` (evicting chunks not offered in `keys`) and
    /// the pending chunks; None if there is no room.
    fn insert_stored(
        &mut self,
        rid: u64,
        keys: &[(BlockKey, u64)],
        to_store: &[(BlockKey, u64)],
        stored: &mut Vec<BlockKey>,
        evicted: &mut Vec<BlockKey>,
    ) -> Option<()> {
        if to_store.is_empty() {
            return Some(());
        }
        // (the keys offered are protected: none of them is evicted to store the others)
        let protected = || keys.iter().map(|&(k, _)| k).collect();
        if !self.make_room_keeping(to_store.len() as u64, protected, evicted) {
            return None;
        }
        let a = self.accesses.get_mut(&rid).expect("recorded above");
        let mut req = 0; // (the LRU's rank; unused under ARC)
        match self.eviction {
            Eviction::Lru => {
                if a.rank == 0 {
                    self.next_rank += 1;
                    a.rank = self.next_rank;
                }
                req = a.rank;
            }
            Eviction::Arc => {
                for &(key, _) in to_store {
                    self.b1.remove(key);
                    self.b2.remove(key);
                    self.t1.set(key, ());
                    a.set(key, INSERTED);
                }
            }
        }
        let chunk = |pos: u64| Chunk {
            req,
            pos: u32::try_from(pos).expect("a chunk position below 2^32"),
            ..Chunk::default()
        };
        if let Some((hi, lo, _)) = run_of(to_store.iter().map(|&(k, _)| k)) {
            // (none of them held: a prepared store's keys are absent)
            self.chunks
                .insert_run(hi, lo, to_store.iter().map(|&(_, pos)| chunk(pos)));
        } else {
            self.chunks
                .insert_many(to_store.iter().map(|&(key, pos)| (key, chunk(pos))));
        }
        stored.extend(to_store.iter().map(|&(key, _)| key));
        Some(())
    }

    /// Stores of `keys` are done: each pending chunk among them becomes ready (and evictable); keys
    /// not held or already ready are ignored.
    pub fn complete_store(&mut self, keys: &[BlockKey]) {
        let (heap, live) = (&mut self.heap, self.heap_live);
        let mut ready = 0;
        if let Some((hi, lo, n)) = run_of(keys.iter().copied())
            && let Some(ready) = self.chunks.ready_run(hi, lo, n, live.then_some(&mut *heap))
        {
            // One run inside its group's slots: the slots in a row (a run of slots in one write,
            // one span of the eviction order).
            self.num_evictable += ready;
            self.compact_heap();
            self.debug_check();
            return;
        }
        // (from the last key: a store's chunks rank down by position, so the eviction order takes
        // their entries in order, `RankQueue`)
        self.chunks.visit_mut(keys.iter().rev().copied(), |key, c| {
            if !c.ready {
                c.ready = true;
                ready += 1;
                if live {
                    heap.push(Reverse((c.rank(), key)));
                }
            }
        });
        self.num_evictable += ready;
        self.compact_heap();
        self.debug_check();
    }

    /// `complete_store` of the keys `(hi, lo..lo + n)`.
    pub fn complete_store_run(&mut self, hi: u64, lo: u64, n: u64) {
        let live = self.heap_live;
        if let Some(ready) =
            self.chunks
                .ready_run(hi, lo, n as usize, live.then_some(&mut self.heap))
        {
            // (`complete_store`'s case of one run inside its group's slots)
            self.num_evictable += ready;
            if live {
                self.compact_heap();
            }
            self.debug_check();
            return;
        }
        let keys: Vec<BlockKey> = (0..n).map(|i| run_key(hi, lo.wrapping_add(i))).collect();
        self.complete_store(&keys);
    }
}
