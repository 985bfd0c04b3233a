//! A hybrid model's tier, the stores side (the twin of `python/kvsim/reference/engine/offload_hybrid.py`'s
//! stores and `h_finished`; `offload/stores.rs` is a single group's): the step's offer
//! (`h_offer_stores`), the connector's copies of the tables brought up to date (`h_sync_tables`), the
//! chunks each request may store, per group and within a sliding window's mask (`h_offer_list`), offered
//! to the tier (`h_offer`) and queued on the link with their fences (`h_queue_store`), a Mamba group's
//! states offered one by one as the GPU's cache keyed them (`h_offer_states`), and a finished request's
//! tables and deferred fences (`h_tier_finished`).

use std::collections::HashSet;

use super::{HLast, cdiv};
use crate::engine::offload::{Job, Stored, Tier, What, private_hi};
use crate::engine::timing::Transfer;
use crate::engine::{Engine, event};
use crate::kv_groups::{GroupKind, GroupSpec, StateKeyed};
use crate::{BlockId, BlockKey};

/// A request whose chunks a step offers: its tables, next chunks, keys, and what bounds them.
struct Offerer<'a> {
    row: usize,
    /// Its slab slot while it runs (None: finished in the step before).
    k: Option<usize>,
    prompt_len: u64,
    /// Its tokens the scheduler knows (they bound the chunks keyed, vLLM's `storable_chunks`).
    num_tokens: u64,
    /// Its offloadable tokens after this step.
    n: u64,
    junction: u64,
    conn: &'a [Vec<BlockId>],
    next_stores: &'a mut [u64],
    keys: &'a [BlockKey],
}

/// Which of chunks `start..end`'s blocks a group may store (vLLM's `reachable_block_mask` with the
/// offloading's alignment `align`, the full-attention chunk; retention 0): a sliding window only the
/// blocks a hit at the replay boundary or the junction needs; None for all (also where the alignment is
/// no multiple of the group's block, which the mask cannot say).
fn store_mask(
    spec: &GroupSpec,
    (bpc, align): (u64, Option<u64>),
    (prompt_len, junction): (u64, u64),
    start: u64,
    end: u64,
) -> Option<Vec<bool>> {
    let bs = spec.block_size;
    let tpc = align.filter(|a| a % bs == 0)?;
    if spec.kind != GroupKind::SlidingWindow {
        return None;
    }
    let need = cdiv(spec.window - 1, bs);
    let (first, stop) = (start * bpc, end * bpc);
    let mut mask = vec![false; (stop - first) as usize];
    for (i, boundary) in [prompt_len.saturating_sub(1), junction]
        .into_iter()
        .enumerate()
    {
        if i == 1 && junction == 0 {
            continue;
        }
        let edge = boundary / tpc * tpc / bs;
        for j in first.max(edge.saturating_sub(need))..stop.min(edge) {
            mask[(j - first) as usize] = true;
        }
    }
    Some(mask)
}

impl Engine<'_> {
    /// A hybrid model's request finished: the blocks its windows left behind are freed first (vLLM's
    /// `_connector_finished` does so before the connector sees its tables), the blocks of its stores in
    /// flight a window's fence did not watch yet are watched (vLLM's `request_finished`: the deferred
    /// fences), and what its last offer reads is kept.
    pub(in crate::engine::offload) fn h_tier_finished(&mut self, k: usize) {
        let bs = self.cfg.block_size;
        debug_assert!(
            self.slab[k].hybrid.is_some(),
            "a finished request holds tables"
        );
        self.hybrid_remove_skipped(k);
        let row = self.slab[k].row;
        let num_tokens = self.slab[k].num_tokens();
        let keys = self.content_keys(k, num_tokens / bs);
        let s = &mut self.slab[k];
        let hs = s.hybrid.as_mut().expect("a finished request holds tables");
        let last = HLast {
            row,
            prompt_len: s.prompt_len,
            num_tokens,
            next_stores: std::mem::take(&mut hs.next_stores),
            conn: hs.conn.take().unwrap_or_default(),
            keys,
            junction: hs.tables.junction,
        };
        let in_flight = s.jobs > 0;
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        if in_flight {
            let Tier { stores, fences, .. } = tier;
            for j in stores.iter().filter(|j| j.row == row) {
                let What::Stored(st) = &j.what else {
                    unreachable!("a hybrid model's store is listed")
                };
                for &b in &st.blocks[st.windowed..] {
                    fences.entry(b).or_default().push(j.id);
                }
            }
        }
        tier.h_last.push(last);
        self.tier_hot.pending = true;
    }

    /// Step part 4 over a hybrid pool (vLLM's `build_connector_meta`): the connector's tables brought up
    /// to date (`h_sync_tables`), the flushes of the requests preempted and of the fences this step's
    /// blocks meet, then the stores each scheduled request and each one finished in the step before
    /// offers (`h_offer`), and the finished ones done with the tier. Returns whether a store was planned
    /// and when the last store the step waits for ends (0 if none).
    pub(in crate::engine::offload) fn h_offer_stores(&mut self, step_end: i64) -> (bool, i64) {
        self.flush_occupancy(); // (the offers may change it)
        let mut tier = self.tier.take().expect("a CPU tier");
        let observation = self.tier_hot.observed + 1;
        let before = (tier.store_free, tier.next_job); // (a flushing step times its stores again)
        let touched: HashSet<BlockId> = tier.touched.iter().copied().collect();
        let mut h_last = std::mem::take(&mut tier.h_last);
        self.h_sync_tables(&tier, &touched, &mut h_last);
        let mut flushed = self.flushes_due(&mut tier);
        let prompt_only = tier.cfg.prompt_only;
        let offloadable = |n: u64, prompt: u64| if prompt_only { n.min(prompt) } else { n };
        let mut planned = self.h_offer_states(&mut tier, step_end);
        for i in 0..self.scheduled.len() {
            let k = self.scheduled[i].0;
            let keys = {
                let n = self.slab[k].num_tokens() / self.cfg.block_size;
                self.content_keys(k, n)
            };
            // (the chunks keyed: under async_scheduling the tokens that have arrived)
            let num_tokens = self.known_tokens(k);
            let s = &mut self.slab[k];
            let n = offloadable(s.num_computed.min(s.num_tokens()), s.prompt_len);
            let (row, prompt_len) = (s.row, s.prompt_len);
            let hs = s.hybrid.as_mut().expect("a scheduled request holds tables");
            let conn = hs.conn.take().expect("synced");
            let mut next = std::mem::take(&mut hs.next_stores);
            let junction = hs.tables.junction;
            let mut who = Offerer {
                row,
                k: Some(k),
                prompt_len,
                num_tokens,
                n,
                junction,
                conn: &conn,
                next_stores: &mut next,
                keys: &keys,
            };
            planned |= self.h_offer(&mut tier, &mut who, step_end, &touched, &mut flushed);
            let hs = self.slab[k].hybrid.as_mut().expect("tables");
            hs.conn = Some(conn);
            hs.next_stores = next;
        }
        for last in &mut h_last {
            let n = offloadable(
                last.prompt_len
                    .max(last.num_tokens - 1)
                    .min(last.num_tokens),
                last.prompt_len,
            );
            let mut who = Offerer {
                row: last.row,
                k: None,
                prompt_len: last.prompt_len,
                num_tokens: last.num_tokens,
                n,
                junction: last.junction,
                conn: &last.conn,
                next_stores: &mut last.next_stores,
                keys: &last.keys,
            };
            planned |= self.h_offer(&mut tier, &mut who, step_end, &touched, &mut flushed);
        }
        for last in &h_last {
            tier.cpu.finish(private_hi(last.row));
        }
        tier.touched.clear();
        self.out.counters.stores_skipped = i128::from(tier.cpu.num_stores_skipped());
        self.tier_hot.pending = !tier.fences.is_empty();
        let flush_end = self.apply_flushes(&mut tier, &flushed, observation, (step_end, before));
        self.tier = Some(tier);
        (planned, flush_end)
    }

    /// The step's state hand-offs (`StepKeys::take_handed`; vLLM's `_build_aligned_boundary_store_jobs`, before every
    /// other store), request by request in the order of each one's first, each request's group by group,
    /// each group's in keying order: a state keyed at a boundary that is a multiple of its group's chunk
    /// and within its request's offloadable tokens is offered alone, reused if ready in the tier, else
    /// stored (one block, fenced at once: the state is freed at its request's next allocation) or failed
    /// (the hand-off is gone); returns whether a store was planned.
    fn h_offer_states(&mut self, tier: &mut Tier, step_end: i64) -> bool {
        let mut states = std::mem::take(&mut tier.h_states);
        self.step_keys.take_handed(&mut states);
        if states.is_empty() {
            tier.h_states = states;
            return false;
        }
        let mut groups_keyed: Vec<usize> = states.iter().map(|(_, st)| st.group).collect();
        groups_keyed.sort_unstable();
        groups_keyed.dedup();
        let mut order: Vec<(usize, Vec<StateKeyed>)> = Vec::new();
        for g in groups_keyed {
            for &(k, st) in states.iter().filter(|(_, st)| st.group == g) {
                match order.iter_mut().find(|(j, _)| *j == k) {
                    Some((_, list)) => list.push(st),
                    None => order.push((k, vec![st])),
                }
            }
        }
        let ch = self.chunking_of(tier);
        let prompt_only = tier.cfg.prompt_only;
        let mut planned = false;
        let (mut stored, mut evicted) = (Vec::new(), Vec::new());
        for (k, list) in order {
            let s = &self.slab[k];
            let row = s.row;
            let limit = if prompt_only {
                s.num_tokens().min(s.prompt_len)
            } else {
                s.num_tokens()
            };
            for st in list {
                let tpc = ch.tpc(st.group);
                if st.boundary > limit || st.boundary % tpc != 0 {
                    continue;
                }
                let i = st.boundary / tpc - 1;
                let content = self.content_keys(k, (i + 1) * ch.per(st.group));
                let offer = [(ch.key(&content, st.group, i), ch.pos(st.group, i))];
                stored.clear();
                evicted.clear();
                let before = tier.cpu.num_evicted();
                if tier
                    .cpu
                    .prepare_store(private_hi(row), &offer, &mut stored, &mut evicted)
                    .is_none()
                {
                    self.out.counters.stores_failed += 1;
                    continue;
                }
                self.log_evictions(tier.cpu.num_evicted() - before, row);
                if stored.is_empty() {
                    continue;
                }
                let keys = std::mem::take(&mut stored);
                let mut charge = (0, 0);
                tier.charge_group(&mut charge, st.group, 1);
                let blocks = (vec![st.block], 1);
                self.h_queue_store(tier, (Some(k), row), keys, blocks, charge, step_end);
                planned = true;
            }
        }
        states.clear();
        tier.h_states = states; // (its buffer kept)
        planned
    }

    /// vLLM's `_update_req_states`: each scheduled request's copy of its tables takes the blocks its
    /// step added (its whole tables if it was admitted since its lookup); then in every copy a window
    /// group's entry not offered yet whose block this step allocated (it left the window and was taken
    /// again) is zeroed, never to be stored.
    fn h_sync_tables(&mut self, tier: &Tier, touched: &HashSet<BlockId>, h_last: &mut [HLast]) {
        let groups = self.tier_groups();
        let bpc = tier.cfg.blocks_per_chunk;
        let mut before: Vec<(usize, Vec<usize>)> = Vec::with_capacity(self.scheduled.len());
        for &(k, _) in &self.scheduled {
            let hs = self.slab[k]
                .hybrid
                .as_mut()
                .expect("a scheduled request holds tables");
            let tables = &hs.tables.tables;
            match &mut hs.conn {
                None => {
                    debug_assert_eq!(hs.next_stores.len(), tables.len(), "a lookup started it");
                    hs.next_stores.resize(tables.len(), 0);
                    hs.conn = Some(tables.iter().map(|t| t.blocks.clone()).collect());
                    before.push((k, vec![0; tables.len()]));
                }
                Some(conn) => {
                    before.push((k, conn.iter().map(Vec::len).collect()));
                    for (c, t) in conn.iter_mut().zip(tables) {
                        let have = c.len();
                        c.extend_from_slice(&t.blocks[have..]);
                    }
                }
            }
        }
        if touched.is_empty() {
            return;
        }
        let windowed: Vec<usize> = (0..groups.len())
            .filter(|&g| groups.specs()[g].kind != GroupKind::Full)
            .collect();
        let zero = |conn: &mut [Vec<BlockId>], next: &[u64], ends: Option<&Vec<usize>>| {
            for &g in &windowed {
                let c = &mut conn[g];
                let to = ends.map_or(c.len(), |e| e[g]);
                let from = (next[g] * bpc) as usize;
                for b in c.iter_mut().take(to).skip(from) {
                    if touched.contains(b) {
                        *b = BlockId::NULL;
                    }
                }
            }
        };
        for &k in &self.running {
            let hs = self.slab[k]
                .hybrid
                .as_mut()
                .expect("a running request holds tables");
            let Some(conn) = hs.conn.as_mut() else {
                continue;
            };
            let ends = before.iter().find(|(j, _)| *j == k).map(|(_, e)| e);
            zero(conn, &hs.next_stores, ends);
        }
        for last in h_last {
            zero(&mut last.conn, &last.next_stores, None);
        }
    }

    /// The chunks of every group `who` may store up to its offloadable tokens, offered to the tier in one
    /// call, group by group (vLLM's `_build_store_jobs`); returns whether a store was planned.
    fn h_offer(
        &mut self,
        tier: &mut Tier,
        who: &mut Offerer<'_>,
        step_end: i64,
        touched: &HashSet<BlockId>,
        flushed: &mut Vec<u64>,
    ) -> bool {
        let (ranges, offer) = self.h_offer_list(tier, who);
        let advance = |next: &mut [u64]| {
            for (g, &(_, num)) in ranges.iter().enumerate() {
                next[g] = next[g].max(num);
            }
        };
        if offer.is_empty() {
            advance(who.next_stores);
            return false;
        }
        let (mut stored, mut evicted) = (Vec::new(), Vec::new());
        let before = tier.cpu.num_evicted();
        let row = who.row;
        if tier
            .cpu
            .prepare_store(private_hi(row), &offer, &mut stored, &mut evicted)
            .is_none()
        {
            self.out.counters.stores_failed += 1;
            return false;
        }
        self.log_evictions(tier.cpu.num_evicted() - before, row);
        if stored.is_empty() {
            advance(who.next_stores);
            return false;
        }
        // The blocks of the chunks stored: the window groups' first (fenced at once), then the rest.
        let groups = self.tier_groups();
        let ch = self.chunking_of(tier);
        let bpc = ch.bpc;
        let chosen: HashSet<BlockKey> = stored.iter().copied().collect();
        let (mut blocks, mut rest) = (Vec::new(), Vec::new());
        let mut charge = (0, 0); // (each group's blocks at its own time on the link and bytes)
        for (g, (&(start, num), c)) in ranges.iter().zip(who.conn).enumerate() {
            if groups.specs()[g].kind == GroupKind::Mamba {
                continue; // (a state group's chunks are its hand-offs: `h_offer_states`)
            }
            let out = if groups.specs()[g].kind == GroupKind::Full {
                &mut rest
            } else {
                &mut blocks
            };
            let before = out.len();
            for i in start..num {
                if chosen.contains(&ch.key(who.keys, g, i)) {
                    let chunk = &c[(i * bpc) as usize..((i + 1) * bpc) as usize];
                    out.extend(chunk.iter().filter(|&&b| b != BlockId::NULL));
                }
            }
            tier.charge_group(&mut charge, g, (out.len() - before) as u64);
        }
        advance(who.next_stores);
        let windowed = blocks.len();
        blocks.extend_from_slice(&rest);
        let id = self.h_queue_store(
            tier,
            (who.k, row),
            stored,
            (blocks, windowed),
            charge,
            step_end,
        );
        if who.k.is_none() && rest.iter().any(|b| touched.contains(b)) {
            flushed.push(id); // (a finished request's store reading a block this step allocated)
        }
        true
    }

    /// A store of `stored` (request `k`, None once finished, of row `row`) from `blocks`, the first
    /// `windowed` of them its window groups', taking `link_ps` on the link and moving `bytes` (each
    /// group's blocks at their own: `Tier::charge_group`): on the link from the step's end, counted and
    /// logged, its window blocks fenced (all of them if its request finished). Returns its id.
    fn h_queue_store(
        &mut self,
        tier: &mut Tier,
        (k, row): (Option<usize>, usize),
        stored: Vec<BlockKey>,
        (blocks, windowed): (Vec<BlockId>, usize),
        (link_ps, bytes): (u64, u64),
        step_end: i64,
    ) -> u64 {
        let n = blocks.len() as u64;
        let begin = step_end.max(tier.store_free);
        let latency = tier.cfg.latency_ps;
        tier.store_free = self.link_end_or_overflow(Transfer::Store, begin, latency, (n, link_ps));
        tier.next_job += 1;
        let id = tier.next_job;
        self.out.counters.num_stores += 1;
        self.out.counters.stored_blocks += i128::from(n);
        self.out.counters.stored_group_bytes += i128::from(bytes);
        self.log_count(event::STORE, row, -1, stored.len() as i64);
        if let Some(k) = k {
            self.slab[k].jobs += 1;
            tier.fence(id, &blocks[..windowed]);
        } else {
            tier.fence(id, &blocks);
        }
        let avail = self.tier_hot.observed + 2;
        let what = What::Stored(Box::new(Stored {
            keys: stored,
            run: None,
            blocks,
            table: None,
            windowed,
        }));
        tier.push_store(
            &mut self.tier_hot,
            Job {
                id,
                k: k.unwrap_or(usize::MAX),
                row,
                end: tier.store_free,
                avail,
                blocks: n,
                link_ps,
                what,
            },
        );
        id
    }

    /// What `h_offer` offers: per group the range of chunks it considers (from its next to those the
    /// offloadable tokens fill), and the chunks it may store among them, group by group, as `(key,
    /// chunk)`: not one whose last block, or a block its group's mask keeps, is null (a window's left,
    /// or gone stale), nor one the mask keeps no block of.
    #[allow(clippy::type_complexity)]
    fn h_offer_list(
        &self,
        tier: &Tier,
        who: &Offerer<'_>,
    ) -> (Vec<(u64, u64)>, Vec<(BlockKey, u64)>) {
        let groups = self.tier_groups();
        let ch = self.chunking_of(tier);
        let (bpc, align) = (ch.bpc, ch.align());
        let mut ranges = Vec::with_capacity(groups.len());
        let mut offer: Vec<(BlockKey, u64)> = Vec::new();
        for (g, c) in who.conn.iter().enumerate() {
            let tpc = ch.tpc(g);
            let num = (who.n / tpc)
                .min(c.len() as u64 / bpc)
                .min(who.num_tokens / tpc);
            let start = who.next_stores[g];
            ranges.push((start, num));
            if num <= start || groups.specs()[g].kind == GroupKind::Mamba {
                continue; // (a state group's chunks are its hand-offs: `h_offer_states`)
            }
            let mask = store_mask(
                &groups.specs()[g],
                (bpc, align),
                (who.prompt_len, who.junction),
                start,
                num,
            );
            for i in start..num {
                if c[((i + 1) * bpc - 1) as usize] == BlockId::NULL {
                    continue;
                }
                let at = ((i - start) * bpc) as usize;
                let marked = |b: usize| mask.as_ref().is_none_or(|m| m[at + b]);
                if !(0..bpc as usize).any(marked) {
                    continue;
                }
                if (0..bpc as usize)
                    .any(|b| c[(i * bpc) as usize + b] == BlockId::NULL && marked(b))
                {
                    continue;
                }
                offer.push((ch.key(who.keys, g, i), ch.pos(g, i)));
            }
        }
        (ranges, offer)
    }
}
