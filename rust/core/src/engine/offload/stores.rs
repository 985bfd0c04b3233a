//! The CPU tier's stores (DESIGN.md §CPU tier): the chunks a step offers to the tier, the transfers
//! they start, vLLM's flush, and a finished request's last stores.

use super::{Job, LastOffer, Stored, Tier, What, private_hi, tier_key};
use crate::engine::timing::Transfer;
use crate::engine::{Engine, event};
use crate::{BlockId, BlockKey};

/// What `offer_to_tier` stored: all of the chunks offered as one run of private chunks (`run`;
/// `Tier::stored` then empty), or else those in `Tier::stored`; how many, and their GPU blocks in order: listed, or (`in_table`, a
/// running request's chunks all stored) the range of its block table they are (the list then empty).
struct Offered {
    /// `(hi, lo, n)` when `whole`: the run's keys `(hi, lo..lo + n)`.
    run: Option<(u64, u64, u64)>,
    num: u64,
    blocks: Vec<BlockId>,
    table: Option<(usize, usize)>,
}

/// `offer_one`'s offer to the tier of chunks `start..num_chunks` of a request of row `row` (its
/// hashed keys `keys`, its block table `table`; `in_table`: a running request, whose table stays as it
/// is while it runs): None when the tier has no room.
#[inline]
fn offer_to_tier(
    tier: &mut Tier,
    keys: &[BlockKey],
    (table, in_table): (&[BlockId], bool),
    row: usize,
    start: u64,
    num_chunks: u64,
) -> Option<Offered> {
    let bpc = tier.cfg.blocks_per_chunk;
    let Tier {
        cpu,
        offer,
        stored,
        evicted,
        spare_blocks,
        ..
    } = &mut *tier;
    stored.clear();
    evicted.clear();
    // A run of the row's private chunks (one block a chunk, past its hashed keys): offered as the
    // run, which the tier may store whole without a list of its keys.
    let private_run = bpc == 1 && start >= keys.len() as u64;
    let hi = private_hi(row); // (also the request's id in the tier)
    let whole = if private_run {
        cpu.prepare_store_run(
            hi,
            (hi, start, num_chunks - start),
            start,
            offer,
            stored,
            evicted,
        )
    } else {
        offer.clear();
        offer.extend((start..num_chunks).map(|c| (tier_key(keys, row, (c + 1) * bpc - 1), c)));
        cpu.prepare_store(private_hi(row), offer, stored, evicted)
            .map(|()| false)
    };
    let whole = whole?;
    let run = whole.then_some((hi, start, num_chunks - start));
    // The blocks of the chunks stored (a subsequence of the offer), in order.
    let range = ((start * bpc) as usize, (num_chunks * bpc) as usize);
    if in_table && (whole || stored.len() as u64 == num_chunks - start) {
        // All of them, of a running request: a range of its table.
        return Some(Offered {
            run,
            num: num_chunks - start,
            blocks: Vec::new(),
            table: Some(range),
        });
    }
    let mut blocks = spare_blocks.pop().unwrap_or_default();
    let num = if whole {
        blocks.extend_from_slice(&table[range.0..range.1]);
        num_chunks - start
    } else {
        blocks.reserve(stored.len() * bpc as usize);
        stored_blocks(offer, stored, table, bpc as usize, &mut blocks);
        stored.len() as u64
    };
    Some(Offered {
        run,
        num,
        blocks,
        table: None,
    })
}

/// Appends to `blocks` the blocks (`bpc` a chunk, from `table`) of the chunks `stored` (a subsequence
/// of `offer`, `(key, chunk index)` pairs), in order.
fn stored_blocks(
    offer: &[(BlockKey, u64)],
    stored: &[BlockKey],
    table: &[BlockId],
    bpc: usize,
    blocks: &mut Vec<BlockId>,
) {
    if stored.len() == offer.len() {
        // Every chunk offered stored (the usual case): their blocks in one piece.
        if let (Some(&(_, first)), Some(&(_, last))) = (offer.first(), offer.last()) {
            blocks.extend_from_slice(&table[first as usize * bpc..(last as usize + 1) * bpc]);
        }
        return;
    }
    let mut j = 0;
    for &(key, c) in offer {
        if j < stored.len() && stored[j] == key {
            j += 1;
            blocks.extend_from_slice(&table[c as usize * bpc..(c as usize + 1) * bpc]);
        }
    }
}

impl Engine<'_> {
    /// Step part 4 (vLLM's `build_connector_meta`): the full chunks each scheduled request has computed
    /// after this step and each request finished in the step before has, prompt tokens only by default,
    /// offered to the tier from the first not offered yet; a store starts when the step ends. Then the
    /// finished ones are done with the tier. A store this step must wait for (a preempted request's, or
    /// one reading a block this step allocated: vLLM's flush) is seen at this step's end. Returns
    /// whether a store was planned and when the last store the step waits for ends (0 if none).
    /// Keep its dispatch in step with `tier_lockstep_stores` (`offload/observe.rs`), which inlines its
    /// usual cases (`offer_scheduled`, `finish_retired`, `offer_scheduled_then_finish`).
    #[inline(never)]
    pub(in crate::engine) fn offer_stores(&mut self, step_end: i64) -> (bool, i64) {
        if self.cfg.groups.is_some() && self.tier_ref().has_cpu {
            if self.nothing_to_offer() {
                return (false, 0); // (nothing was allocated either: `touched` is empty)
            }
            return self.h_offer_stores(step_end);
        }
        if self.nothing_to_offer() {
            self.tier_mut().touched.clear();
            return (false, 0);
        }
        if !self.tier_hot.pending {
            return self.offer_scheduled(step_end); // (nobody preempted or finished, no fence)
        }
        if self.tier_ref().finishes_only() {
            if self.scheduled.is_empty() {
                self.finish_retired();
                return (false, 0);
            }
            return self.offer_scheduled_then_finish(step_end);
        }
        self.offer_stores_now(step_end)
    }

    /// Requests finished in the step before and nothing else to offer for, none with a chunk left to
    /// offer, no request preempted nor a block fenced (`Tier::finishes_only`: the usual case): they are
    /// done with the tier (nothing offered, the occupancy as it was).
    #[inline]
    pub(super) fn finish_retired(&mut self) {
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        debug_assert!(tier.finishes_only());
        tier.finish_last();
        tier.touched.clear();
        self.tier_hot.pending = false; // (no fences: `finishes_only`)
    }

    /// `offer_stores_now` when only scheduled requests offer and the requests finished in the step
    /// before are done with the tier after them, none with a chunk left to offer, no request preempted
    /// nor a block fenced (`Tier::finishes_only`): `offer_scheduled`'s offers (no flush), then the
    /// finishes, in `offer_stores_now`'s order.
    #[inline]
    pub(super) fn offer_scheduled_then_finish(&mut self, step_end: i64) -> (bool, i64) {
        let planned = self.offer_scheduled(step_end);
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        debug_assert!(tier.finishes_only()); // (a scheduled request's offer fences nothing)
        tier.finish_last();
        self.tier_hot.pending = false;
        planned
    }

    /// `offer_stores_now` with only scheduled requests to offer for: no request preempted or
    /// finished, no fence, so no flush.
    #[inline(never)]
    pub(super) fn offer_scheduled(&mut self, step_end: i64) -> (bool, i64) {
        self.flush_occupancy(); // (the offers may change it)
        let mut tier = self.tier.take().expect("a CPU tier");
        let mut planned = false;
        if tier.has_cpu {
            let mut flushed = Vec::new(); // (stays empty: only a finished request's store fences)
            let mut all = true;
            for i in 0..self.scheduled.len() {
                let k = self.scheduled[i].0;
                let (p, offered) = self.offer_running(&mut tier, k, step_end, &mut flushed);
                (planned, all) = (planned | p, all & offered);
            }
            self.tier_hot.offered_all = all;
            debug_assert!(flushed.is_empty() && tier.fences.is_empty());
        } else {
            self.tier_hot.offered_all = true; // (a connector: nothing to offer, always quiet)
        }
        tier.touched.clear();
        self.tier = Some(tier);
        (planned, 0)
    }

    /// Most steps: nobody to offer for, nothing to flush (`offer_stores` returns at once).
    #[inline]
    pub(super) fn nothing_to_offer(&self) -> bool {
        // (`pending` covers the tier's preempted and finished requests and its fences)
        debug_assert!(
            self.tier_hot.pending || {
                let tier = self.tier_ref();
                tier.preempted_now.is_empty()
                    && tier.finished_last.is_empty()
                    && tier.fences.is_empty()
            }
        );
        self.scheduled.is_empty() && !self.tier_hot.pending
    }

    /// `offer_stores` with something to offer or flush.
    #[inline(never)]
    fn offer_stores_now(&mut self, step_end: i64) -> (bool, i64) {
        self.flush_occupancy(); // (the offers may change it)
        let mut tier = self.tier.take().expect("a CPU tier");
        if !tier.has_cpu {
            // A decode replica's connector: no stores.
            tier.preempted_now.clear();
            tier.finished_last.clear();
            tier.last_offers.clear();
            tier.touched.clear();
            self.tier_hot.pending = false; // (a connector fences nothing)
            self.tier = Some(tier);
            return (false, 0);
        }
        let observation = self.tier_hot.observed + 1;
        let before = (tier.store_free, tier.next_job); // (a flushing step times its stores again)
        let mut flushed = self.flushes_due(&mut tier);
        let mut planned = false;
        let mut last_offers = std::mem::take(&mut tier.last_offers);
        let mut all = true;
        for i in 0..self.scheduled.len() {
            let k = self.scheduled[i].0;
            let (p, offered) = self.offer_running(&mut tier, k, step_end, &mut flushed);
            (planned, all) = (planned | p, all & offered);
        }
        self.tier_hot.offered_all = all;
        for last in &last_offers {
            planned |= self.offer_one(&mut tier, None, Some(last), step_end, &mut flushed);
        }
        last_offers.clear();
        tier.last_offers = last_offers; // (its buffer kept)
        tier.finish_last();
        tier.touched.clear();
        self.tier_hot.pending = !tier.fences.is_empty();
        let flush_end = self.apply_flushes(&mut tier, &flushed, observation, (step_end, before));
        self.tier = Some(tier);
        (planned, flush_end)
    }

    /// Whether scheduled request `k` has offered every chunk of its prompt (`tier_stays_quiet`).
    #[inline]
    fn offered_prompt(&self, tier: &Tier, k: usize) -> bool {
        let s = &self.slab[k];
        s.next_store >= tier.per_chunk(s.prompt_len)
    }

    /// `offer_one` of scheduled request `k`: its new chunks, when they are a run of its private chunks
    /// that the tier stores whole (`CpuTier::try_store_run`: the usual case), become one store here;
    /// anything else is `offer_one`'s. Returns whether it planned a store and whether `k` has offered
    /// its whole prompt now (`offered_prompt`, told without dividing when its prompt is computed).
    #[inline(always)]
    #[allow(clippy::inline_always)] // one call a request: measured (results/README.md §CPU tier)
    fn offer_running(
        &mut self,
        tier: &mut Tier,
        k: usize,
        step_end: i64,
        flushed: &mut Vec<u64>,
    ) -> (bool, bool) {
        let bpc = tier.cfg.blocks_per_chunk;
        let s = &self.slab[k];
        let mut n = s.num_computed.min(s.num_tokens());
        let prompt = n >= s.prompt_len; // (its prompt computed: `offered_prompt` once offered)
        if tier.cfg.prompt_only {
            n = n.min(s.prompt_len);
        }
        let (num_chunks, start) = (tier.per_chunk(n), s.next_store);
        if num_chunks <= start {
            return (false, prompt || self.offered_prompt(tier, k));
        }
        if bpc == 1 {
            // A fresh request (`OWN_FRESH`: admitted by the plain loop, its first chunk private, so
            // `defer_keys` hashes none of its keys) needs no keys made.
            let fresh = self.slab[k].tier_own == crate::cpu_tier::OWN_FRESH;
            if !fresh {
                self.ensure_tier_keys(k, num_chunks);
            }
            let s = &self.slab[k];
            debug_assert!(!fresh || (self.defer_keys && s.private_from < self.cfg.block_size));
            let (row, count) = (s.row, num_chunks - start);
            let hi = private_hi(row); // (also the request's id in the tier)
            let before = tier.cpu.num_evicted();
            let what = if start >= s.tier_keys.len() as u64 {
                // Its own run kept apart in the tier (the usual store: `CpuTier::store_own`), else
                // a run of its private chunks the tier stores whole (`try_store_run`).
                let own = &mut self.slab[k].tier_own;
                if tier.cpu.store_own(own, hi, start, count, &mut tier.evicted) {
                    Some(What::Own {
                        h: *own,
                        lo: start,
                        n: count,
                    })
                } else if tier
                    .cpu
                    .try_store_run(hi, (hi, start, count), start, &mut tier.evicted)
                {
                    Some(What::Run {
                        hi,
                        lo: start,
                        n: count,
                    })
                } else {
                    None
                }
            } else {
                None
            };
            if let Some(what) = what {
                // (as `offer_one` does with a run stored whole: its blocks a range of its table)
                self.log_evictions(tier.cpu.num_evicted() - before, row);
                self.slab[k].next_store = num_chunks;
                let begin = step_end.max(tier.store_free);
                let (latency, per_block) = (tier.cfg.latency_ps, tier.cfg.ps_per_block);
                tier.store_free = self.transfer_end_or_overflow(
                    Transfer::Store,
                    begin,
                    latency,
                    count,
                    per_block,
                );
                tier.next_job += 1;
                self.out.counters.num_stores += 1;
                self.out.counters.stored_blocks += i128::from(count);
                self.log_count(event::STORE, row, -1, count as i64);
                self.slab[k].jobs += 1;
                let avail = self.tier_hot.observed + 2;
                tier.push_store(
                    &mut self.tier_hot,
                    Job {
                        id: tier.next_job,
                        k,
                        row,
                        end: tier.store_free,
                        avail,
                        blocks: count,
                        link_ps: count.saturating_mul(per_block),
                        what,
                    },
                );
                return (true, prompt || self.offered_prompt(tier, k));
            }
        }
        let planned = self.offer_one(tier, Some(k), None, step_end, flushed);
        (planned, self.offered_prompt(tier, k))
    }

    /// One request's offer (`offer_stores`): scheduled `k`, or `retired` (finished in the step before).
    /// Returns whether it planned a store.
    fn offer_one(
        &mut self,
        tier: &mut Tier,
        k: Option<usize>,
        retired: Option<&LastOffer>,
        step_end: i64,
        flushed: &mut Vec<u64>,
    ) -> bool {
        let (tpc, bpc) = (tier.tpc, tier.cfg.blocks_per_chunk);
        let (mut n, start, row) = match (k, retired) {
            (Some(k), _) => {
                let s = &self.slab[k];
                (s.num_computed.min(s.num_tokens()), s.next_store, s.row)
            }
            (None, Some(r)) => (
                r.prompt_len.max(r.num_tokens - 1).min(r.num_tokens),
                r.next_store,
                r.row,
            ),
            (None, None) => unreachable!("a request to offer"),
        };
        if tier.cfg.prompt_only {
            n = n.min(match (k, retired) {
                (Some(k), _) => self.slab[k].prompt_len,
                (_, Some(r)) => r.prompt_len,
                _ => unreachable!(),
            });
        }
        let num_chunks = n / tpc;
        if num_chunks <= start {
            return false;
        }
        if let Some(k) = k {
            self.ensure_tier_keys(k, num_chunks * bpc);
        }
        if let Some(k) = k
            && self.slab[k].tier_own != 0
        {
            // (its own run, if the tier still keeps it apart, where the general path finds it)
            let own = std::mem::take(&mut self.slab[k].tier_own);
            tier.cpu.demote_own(own, private_hi(row));
        }
        let (keys, table): (&[BlockKey], &[BlockId]) = match (k, retired) {
            (Some(k), _) => (&self.slab[k].tier_keys, self.slab[k].table.blocks()),
            (_, Some(r)) => (&r.keys, &r.blocks),
            _ => unreachable!(),
        };
        let before = tier.cpu.num_evicted();
        let offered = offer_to_tier(tier, keys, (table, k.is_some()), row, start, num_chunks);
        // (the only offer that may skip chunks under a store threshold: the fast path's own runs and
        // runs never do)
        self.out.counters.stores_skipped = i128::from(tier.cpu.num_stores_skipped());
        let Some(Offered {
            run,
            num: num_stored,
            blocks,
            table,
        }) = offered
        else {
            self.out.counters.stores_failed += 1;
            return false;
        };
        self.log_evictions(tier.cpu.num_evicted() - before, row);
        if let Some(k) = k {
            self.slab[k].next_store = num_chunks;
        }
        if num_stored == 0 {
            if blocks.capacity() > 0 {
                tier.spare_blocks.push(blocks); // (empty)
            }
            return false;
        }
        let begin = step_end.max(tier.store_free);
        let n = num_stored * bpc;
        let (latency, per_block) = (tier.cfg.latency_ps, tier.cfg.ps_per_block);
        tier.store_free =
            self.transfer_end_or_overflow(Transfer::Store, begin, latency, n, per_block);
        tier.next_job += 1;
        let id = tier.next_job;
        self.out.counters.num_stores += 1;
        self.out.counters.stored_blocks += i128::from(n);
        self.log_count(event::STORE, row, -1, num_stored as i64);
        if let Some(k) = k {
            self.slab[k].jobs += 1;
        } else {
            tier.fence(id, &blocks);
            self.tier_hot.pending = true;
            if blocks.iter().any(|b| tier.touched.contains(b)) {
                flushed.push(id);
            }
        }
        let what = tier.store_what(run, blocks, table);
        let avail = self.tier_hot.observed + 2;
        tier.push_store(
            &mut self.tier_hot,
            Job {
                id,
                k: k.unwrap_or(usize::MAX),
                row,
                end: tier.store_free,
                avail,
                blocks: n,
                link_ps: n.saturating_mul(per_block),
                what,
            },
        );
        true
    }

    /// `num` chunks evicted from the tier for a store of row `row`: counted, and a `cpu-evict` row each.
    #[inline]
    pub(super) fn log_evictions(&mut self, num: u64, row: usize) {
        self.out.counters.cpu_evictions += i128::from(num);
        if num > 0 && self.log.is_some() {
            // (the event log on: tested once, not for each chunk)
            for _ in 0..num {
                self.log(event::CPU_EVICT, row, -1);
            }
        }
    }

    /// A request finishes (its blocks are about to be freed): the stores it has in flight fence the
    /// blocks they read, and what its last stores need is kept for the next step.
    #[inline]
    pub(in crate::engine) fn tier_finished(&mut self, k: usize) {
        if let Some(tier) = self.tier.as_deref_mut()
            && tier.has_cpu
            && tier.cfg.prompt_only
            && self.cfg.groups.is_none()
        {
            let s = &self.slab[k];
            if s.jobs == 0 && s.next_store >= tier.per_chunk(s.prompt_len) {
                // The usual finish (prompt-only: its prompt offered, no store in flight): no last
                // offer, nothing to fence, its own run kept (`tier_finished_now`'s outcome). Keep the
                // chunk count in step with `tier_keys_for_finish`'s prompt-only one.
                tier.finished_last.push((s.row, s.tier_own));
                self.tier_hot.pending = true;
                return;
            }
        }
        self.tier_finished_now(k);
    }

    /// `tier_finished` of any request.
    #[inline(never)]
    fn tier_finished_now(&mut self, k: usize) {
        if !self.tier_ref().has_cpu {
            if self.cfg.groups.is_some() {
                // A hybrid decode replica's connector (DESIGN.md §Prefill/decode disaggregation).
                self.hybrid_connector_finished(k);
            }
            return;
        }
        if self.cfg.groups.is_some() {
            return self.h_tier_finished(k);
        }
        let offers = self.tier_keys_for_finish(k);
        let s = &self.slab[k];
        // What its last offer needs only if it has chunks to offer (`offer_one` reads them then).
        let last = offers.then(|| LastOffer {
            row: s.row,
            prompt_len: s.prompt_len,
            num_tokens: s.num_tokens(),
            next_store: s.next_store,
            keys: s.tier_keys.clone(),
            blocks: s.table.blocks().to_vec(),
        });
        let (row, in_flight, mut own) = (s.row, s.jobs > 0, s.tier_own);
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        if in_flight || last.is_some() {
            // Its own run, if still kept apart, where the general path finds it: for its stores in
            // flight, listed below, and its last offer (`offer_one`).
            tier.cpu.demote_own(own, private_hi(row));
            own = 0;
        }
        if in_flight {
            // Its stores in flight (none else of its row is: a finished request's own are listed).
            let table = self.slab[k].table.blocks();
            let Tier { stores, fences, .. } = tier;
            for j in stores.iter_mut().filter(|j| j.row == row) {
                if let What::Run { lo, n, .. } | What::Own { lo, n, .. } = j.what {
                    let hi = private_hi(row);
                    // (its blocks listed, as it will outlive its request's table)
                    j.what = What::Stored(Box::new(Stored {
                        run: Some((hi, lo, n)),
                        table: Some((lo as usize, (lo + n) as usize)),
                        ..Stored::default()
                    }));
                }
                let What::Stored(st) = &mut j.what else {
                    unreachable!("a store")
                };
                if let Some((first, last)) = st.table.take() {
                    st.blocks.extend_from_slice(&table[first..last]);
                }
                for &b in &st.blocks {
                    fences.entry(b).or_default().push(j.id);
                }
            }
        }
        tier.finished_last.push((row, own));
        if let Some(last) = last {
            tier.last_offers.push(last);
        }
        self.tier_hot.pending = true;
    }

    /// The keys a finished request's last stores need: its chunks up to its offloadable tokens. Returns
    /// whether it has chunks left to offer. Keep its prompt-only chunk count in step with
    /// `tier_finished`'s fast path, which tests it inline.
    #[inline]
    fn tier_keys_for_finish(&mut self, k: usize) -> bool {
        let tier = self.tier_ref();
        let (bpc, prompt_only) = (tier.cfg.blocks_per_chunk, tier.cfg.prompt_only);
        let s = &self.slab[k];
        // Its tokens but the last (all of its prompt's at least), prompt tokens only by default: then
        // its prompt's, as it has computed at least its prompt.
        let n = if prompt_only {
            s.prompt_len
        } else {
            let tokens = s.num_tokens();
            s.prompt_len.max(tokens - 1).min(tokens)
        };
        let num_chunks = tier.per_chunk(n);
        if num_chunks > s.next_store {
            self.ensure_tier_keys(k, num_chunks * bpc);
            return true;
        }
        false
    }
}
