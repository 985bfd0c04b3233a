//! A hybrid model's tier, the waiting side (the twin of `python/kvsim/reference/engine/offload_hybrid.py`'s
//! lookup, loads and resumption; `offload/waiting.rs` is a single group's): a waiting request's lookup
//! (`h_tier_head`; its hits continued into the tier group by group, `h_tier_hit`, over vLLM's prefix and
//! sliding-window runs), its load's admission (`h_admit_load`: the full-prompt gate, the watermark and
//! what the requests still prefilling need), a landed load's keys (`h_land`) and its resumption
//! (`h_resume_loaded`).

use super::{cdiv, load_window};
use crate::cpu_tier::{CpuTier, MISS, PENDING};
use crate::engine::admission::{GpuHits, gate_tokens};
use crate::engine::offload::private_hi;
use crate::engine::timing::Transfer;
use crate::engine::{Engine, Memory, event};
use crate::{BlockId, BlockKey};

/// vLLM's `_maximal_prefix_lookup` over `keys`: how many the tier holds from the first, None if one of
/// them is pending.
fn prefix_run(cpu: &CpuTier, keys: impl Iterator<Item = BlockKey>) -> Option<u64> {
    let mut pending = false;
    let mut n = 0;
    for key in keys {
        let got = cpu.lookup(key);
        if got == MISS {
            break;
        }
        n += 1;
        pending |= got == PENDING;
    }
    (!pending).then_some(n)
}

/// vLLM's `_sliding_window_lookup` over chunks `0..len` of a range (`key` names them): where the last run
/// of `window` chunks the tier holds ends, scanning from the right (the first run needing `first`), a
/// shorter run reaching the range's start counting; 0 if none; None if a chunk of the run found is pending.
fn window_run(
    cpu: &CpuTier,
    len: u64,
    key: impl Fn(u64) -> BlockKey,
    window: u64,
    first: u64,
) -> Option<u64> {
    let (mut run, mut pending, mut required) = (0, false, first);
    for c in (0..len).rev() {
        let got = cpu.lookup(key(c));
        if got == MISS {
            run = 0;
            pending = false;
            required = window;
        } else {
            run += 1;
            pending |= got == PENDING;
        }
        if run == required {
            return (!pending).then_some(c + required);
        }
    }
    (!pending).then_some(run)
}

impl Engine<'_> {
    /// `tier_head` for a hybrid model's waiting request `k`: its lookup (vLLM's
    /// `get_num_new_matched_tokens`: the connector's tables start over, every chunk is offered again;
    /// a transfer of its own in flight, a pending chunk in its hit or one another request is loading
    /// skip it), then a load's admission or an ordinary one (with the lookup made here: `Looked`).
    pub(in crate::engine::offload) fn h_tier_head(
        &mut self,
        k: usize,
        budget: u64,
        skipped_waiting: &mut Vec<usize>,
    ) -> Option<u64> {
        let n_groups = self.tier_groups().len();
        {
            let hs = self.slab[k].hybrid.get_or_insert_with(Box::default);
            hs.conn = None;
            hs.next_stores.clear();
            hs.next_stores.resize(n_groups, 0);
        }
        if self.slab[k].jobs > 0 {
            return self.skip_head(k, skipped_waiting);
        }
        let local = self.hybrid_lookup(k);
        let (found, boundary) = self.h_tier_hit(k, local);
        if let Some(ext) = found
            && boundary > local + ext
            && boundary > self.lookup.junction
            && self.tier_ref().cfg.hit_junction
        {
            // A hit a sparse group cut short: the full-attention groups' boundary is the junction (vLLM
            // 0.34.0's `_maybe_register_shared_prefix_junction`; never lowering the GPU lookup's).
            self.lookup.junction = boundary;
        }
        match found {
            None => self.skip_head(k, skipped_waiting),
            Some(0) => Some(self.try_admit_after(k, budget, GpuHits::Looked)),
            Some(ext) => {
                let admitted = self.h_admit_load(k, ext);
                self.hold_head(k, admitted)
            }
        }
    }

    /// The tokens beyond `local` GPU hits every group's chunks in the tier serve (vLLM's
    /// `_lookup_complete_chunks`): 0 for less than a chunk, None to defer; and the full-attention
    /// groups' boundary (the bound when the lookup first reached a window or state group; 0 if it did
    /// not, or had no full-attention group, or deferred in one before).
    fn h_tier_hit(&mut self, k: usize, local: u64) -> (Option<u64>, u64) {
        let groups = self.tier_groups();
        let ch = self.chunking();
        let total = self.slab[k].num_tokens();
        let content = self.content_keys(k, total / ch.bs);
        let key = |g: usize, c: u64| ch.key(&content, g, c);
        let wins = ch.windows();
        let full: Vec<usize> = (0..wins.len()).filter(|&g| wins[g].is_none()).collect();
        let mut windowed: Vec<usize> = (0..wins.len()).filter(|&g| wins[g].is_some()).collect();
        windowed.sort_by_key(|&g| std::cmp::Reverse(wins[g]));
        let order: Vec<usize> = full.iter().chain(&windowed).copied().collect();
        let cpu = &self.tier_ref().cpu;
        let mut max_hit = if windowed.is_empty() {
            total
        } else {
            total - 1
        };
        if let Some(state) = ch.state_chunk() {
            max_hit = max_hit / state * state;
        }
        let mut hit_tokens = 0;
        let mut defer = false;
        let mut boundary: Option<u64> = None;
        let mut todo = order.clone();
        while !todo.is_empty() {
            let mut looked_windowed = false;
            let current = std::mem::take(&mut todo);
            for g in current {
                let tpc = ch.tpc(g);
                let num_keys = total / tpc;
                max_hit = max_hit.min(num_keys * tpc);
                if max_hit < local + tpc {
                    return (Some(0), boundary.unwrap_or(0));
                }
                if wins[g].is_some() && boundary.is_none() {
                    boundary = Some(if !full.is_empty() && !defer {
                        max_hit
                    } else {
                        0
                    });
                }
                let num_chunks = cdiv(max_hit, tpc).min(num_keys);
                let start = local / tpc;
                let found = match wins[g] {
                    None => prefix_run(cpu, (start..num_chunks).map(|c| key(g, c))),
                    Some(window) => {
                        let spec = &groups.specs()[g];
                        let first = load_window(spec, tpc, max_hit.min(num_chunks * tpc))
                            .expect("a window");
                        window_run(
                            cpu,
                            num_chunks - start,
                            |c| key(g, start + c),
                            window,
                            first,
                        )
                    }
                };
                match found {
                    Some(0) => return (Some(0), boundary.unwrap_or(0)),
                    None => defer = true,
                    Some(n) => max_hit = max_hit.min(tpc * (start + n)),
                }
                if max_hit < local + tpc {
                    return (Some(0), boundary.unwrap_or(0));
                }
                let new = max_hit - local;
                if new < hit_tokens {
                    if defer {
                        defer = false;
                        todo.clone_from(&order);
                    } else if looked_windowed && todo.is_empty() {
                        todo.clone_from(&windowed);
                    }
                }
                looked_windowed |= wins[g].is_some();
                hit_tokens = new;
            }
        }
        if defer {
            return (None, 0);
        }
        let tier = self.tier_ref();
        if !tier.loading.is_empty() {
            let end = local + hit_tokens;
            for g in 0..wins.len() {
                let tpc = ch.tpc(g);
                let mut from = local / tpc;
                let to = cdiv(end, tpc);
                if let Some(span) = load_window(&groups.specs()[g], tpc, end) {
                    from = from.max(to.saturating_sub(span));
                }
                if (from..to).any(|c| tier.loading.contains_key(&key(g, c))) {
                    return (None, 0);
                }
            }
        }
        (Some(hit_tokens), boundary.unwrap_or(0))
    }

    /// What the requests still prefilling (running or held) need to hold their whole sequences, the
    /// windows capped (vLLM's `_request_remaining_blocks`).
    fn h_inflight_reserved(&self) -> u64 {
        let groups = self.tier_groups();
        let Memory::Paged(pool) = &self.mem else {
            unreachable!("hybrid pools are paged")
        };
        self.prefilling_to_finish()
            .map(|(k, tokens)| {
                let s = &self.slab[k];
                let tables = &s.hybrid.as_ref().expect("tables").tables;
                let checkpoint =
                    groups.needs_checkpoint(s.num_computed, tokens, s.num_tokens(), s.prompt_len);
                groups.need(
                    pool,
                    Some(tables),
                    tokens,
                    None,
                    s.num_computed,
                    true,
                    checkpoint,
                    &self.step_keys,
                )
            })
            .sum()
    }

    /// Whether a load whose hits and loaded tokens end at `end` (of a request of `total` tokens and a
    /// prompt of `prompt`; its GPU hit in `self.lookup`) fits: the full-prompt gate, the watermark and
    /// the blocks the requests still prefilling need.
    pub(in crate::engine::offload) fn h_load_fits(
        &self,
        total: u64,
        prompt: u64,
        end: u64,
    ) -> bool {
        let cfg = self.cfg;
        let groups = self.tier_groups();
        let watermark = self.admission_watermark();
        let reserved = self.h_inflight_reserved();
        let Memory::Paged(pool) = &self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let free = u64::from(pool.num_free_blocks());
        let full = gate_tokens(cfg, total);
        let keyed = &self.step_keys;
        let hit = Some(&self.lookup);
        let checkpoint = groups.needs_checkpoint(end, full, total, prompt);
        if cfg.full_prompt_gate
            && groups.need(pool, None, full, hit, end, true, checkpoint, keyed) + watermark > free
        {
            return false;
        }
        (groups.need(pool, None, end, hit, end, false, false, keyed) + watermark)
            .saturating_add(reserved)
            <= free
    }

    /// A held request's tables up to `end` tokens after the GPU hit (in `self.lookup`), if they fit
    /// (`h_load_fits`): each group's positions its window skipped at `end` null, its hits above them
    /// taken, new blocks (in `self.group_new`) for the rest (`Groups::admit_loading`). A CPU tier's load
    /// and a decode replica's transfer (`h_admit_remote`) hold them alike; false changes nothing.
    pub(in crate::engine::offload) fn h_hold_tables(&mut self, k: usize, end: u64) -> bool {
        let groups = self.cfg.groups.as_ref().expect("a hybrid pool");
        let total = self.slab[k].num_tokens();
        if !self.h_load_fits(total, self.slab[k].prompt_len, end) {
            return false;
        }
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let s = &mut self.slab[k];
        s.sync_output();
        let prompt = s.prompt_len;
        let hs = s.hybrid.get_or_insert_with(Box::default);
        self.group_new.clear();
        groups.admit_loading(
            pool,
            &mut hs.tables,
            &mut hs.keys,
            &s.segs,
            &self.lookup,
            end,
            prompt,
            &mut self.step_keys,
            &mut self.group_new,
        );
        true
    }

    /// Admits the load of `ext` tokens after the GPU hit (in `self.lookup`) if its blocks fit (the
    /// full-prompt gate, the watermark and the blocks the requests still prefilling need); false changes
    /// nothing. The load reads every group's chunks its blocks need: full attention all of them, a window
    /// its last.
    fn h_admit_load(&mut self, k: usize, ext: u64) -> bool {
        let groups = self.tier_groups();
        let ch = self.chunking();
        let latency = self.tier_ref().cfg.latency_ps;
        let local = self.lookup.tokens;
        let end = local + ext;
        if !self.h_hold_tables(k, end) {
            return false;
        }
        let s = &mut self.slab[k];
        let hs = s.hybrid.as_mut().expect("tables just held");
        let row = s.row;
        self.step_keys.hand_off(k);
        // The load's chunks, group by group: from each group's first block it fills.
        let mut starts = Vec::with_capacity(groups.len());
        let mut per_group = Vec::with_capacity(groups.len()); // (each group's blocks at its own time)
        let mut blocks = 0;
        for (g, table) in hs.tables.tables.iter().enumerate() {
            let bs = groups.specs()[g].block_size;
            let (first_block, stop) = (cdiv(local, bs), cdiv(end, bs));
            let begin = (first_block..stop)
                .find(|&i| table.blocks[i as usize] != BlockId::NULL)
                .unwrap_or(stop);
            let last = cdiv(end, ch.tpc(g));
            starts.push((begin < stop).then_some((begin / ch.bpc, last)));
            blocks += stop - begin;
            per_group.push(stop - begin);
            hs.next_stores[g] = last; // vLLM's chunk-level policy: stores resume after the loaded chunks
        }
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        for t in &hs.tables.tables {
            tier.touched
                .extend(t.blocks.iter().filter(|&&b| b != BlockId::NULL));
        }
        if self.log.is_some() {
            self.log_hybrid_admission(row, end);
        }
        // (up to the end of each group's last chunk: a load may end inside it)
        let spanned = starts
            .iter()
            .enumerate()
            .filter_map(|(g, s)| s.map(|(_, last)| last * ch.per(g)))
            .max()
            .unwrap_or(0);
        let content = self.content_keys(k, spanned);
        let mut load: Vec<(BlockKey, u64)> = Vec::new();
        for (g, start) in starts.iter().enumerate() {
            if let Some((first, last)) = *start {
                load.extend((first..last).map(|c| (ch.key(&content, g, c), ch.pos(g, c))));
            }
        }
        let tier = self.tier_ref();
        let start = self.t.max(tier.load_free);
        let mut charge = (0, 0);
        for (g, &n) in per_group.iter().enumerate() {
            tier.charge_group(&mut charge, g, n);
        }
        let (link_ps, bytes) = charge;
        let link_end = self.link_end_or_overflow(Transfer::Load, start, latency, (blocks, link_ps));
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        tier.cpu.prepare_load(private_hi(row), &load);
        for &(key, _) in &load {
            *tier.loading.entry(key).or_insert(0) += 1;
        }
        tier.load_free = link_end;
        let listed: Vec<BlockKey> = load.iter().map(|&(key, _)| key).collect();
        let chunks = listed.len();
        self.hold_for_landing(k, (listed, false), (link_end, blocks, link_ps), end);
        let c = &mut self.out.counters;
        c.num_loads += 1;
        c.loaded_group_bytes += i128::from(bytes);
        self.progress += 1;
        c.loaded_blocks += i128::from(blocks);
        let hit = ext; // (a hybrid model's hit ends short of the prompt: nothing computed again)
        c.cpu_hit_tokens += i128::from(hit);
        self.out.cpu_hit_tokens[row - self.out_base] += hit as i64;
        self.log_count(event::CPU_HIT, row, -1, hit as i64);
        self.log_count(event::LOAD, row, -1, chunks as i64);
        self.note_admission(k, local, self.slab[k].num_tokens(), hit);
        true
    }

    /// A held request whose load has landed, admitted as a resumed one over a hybrid pool: the first
    /// time the pass reaches it, its states' keys count as keyed in this step and its states are handed
    /// off (vLLM's `_update_waiting_for_remote_kv`); its chunk cut to the Mamba groups' block boundaries
    /// (`hybrid_split`), the full-prompt gate, then the blocks its windows left behind freed and its
    /// next chunk's allocated if the watermark allows (`hybrid_grow`, a running sequence's growth with
    /// the watermark, a checkpoint reserved as for any prefill chunk); the tokens it computes, 0 if it
    /// cannot start now, or `NEVER`.
    pub(in crate::engine::offload) fn h_resume_loaded(&mut self, k: usize, budget: u64) -> u64 {
        let cfg = self.cfg;
        let groups = self.tier_groups();
        self.h_adopt_landed(k);
        let total = self.slab[k].num_tokens();
        let computed = self.slab[k].num_computed;
        let prompt = self.slab[k].prompt_len;
        let mut num_new = match self.resumed_chunk(k, budget) {
            Ok(num_new) => num_new,
            Err(answer) => return answer,
        };
        if groups.align() {
            num_new = self.hybrid_split(k, num_new);
            if num_new == 0 {
                return 0; // no block boundary within reach: the waiting phase stops here
            }
        }
        let watermark = self.admission_watermark();
        let Memory::Paged(pool) = &self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let hs = self.slab[k]
            .hybrid
            .as_ref()
            .expect("a held request holds tables");
        let full = gate_tokens(cfg, total);
        if cfg.full_prompt_gate
            && groups.need(
                pool,
                Some(&hs.tables),
                full,
                None,
                computed,
                true,
                groups.needs_checkpoint(computed, full, total, prompt),
                &self.step_keys,
            ) + watermark
                > u64::from(pool.num_free_blocks())
        {
            return 0;
        }
        if !self.hybrid_grow(k, num_new, watermark) {
            return 0;
        }
        num_new
    }

    /// The waiting pass reached `k`, held, for the first time since its load landed: its state keys
    /// (`h_land`'s) count as keyed in this step and its states are handed off (DESIGN.md §CPU tier, "A
    /// Mamba group").
    fn h_adopt_landed(&mut self, k: usize) {
        let Some(hs) = self.slab[k].hybrid.as_mut() else {
            return;
        };
        if hs.landed.is_empty() {
            return;
        }
        for st in hs.landed.drain(..) {
            self.step_keys.adopt(k, st);
        }
        self.tier_hot.pending = true; // (the step's offer takes them, scheduled or not)
    }

    /// A held request's load landed over a hybrid pool: its blocks up to the loaded tokens take their
    /// keys; the state blocks keyed wait for the waiting pass to reach it (`h_adopt_landed`).
    pub(in crate::engine::offload) fn h_land(&mut self, k: usize) {
        debug_assert!(
            self.slab[k].num_computed < self.slab[k].num_tokens(),
            "a hybrid hit ends short"
        );
        self.h_cache_loaded(k);
        let hs = self.slab[k].hybrid.as_mut().expect("tables just keyed");
        hs.landed.extend(self.step_keys.take_fresh());
    }

    /// A held request's blocks up to its computed tokens keyed as its transfer landed (`cache_loaded`,
    /// vLLM's `cache_blocks` in `_update_waiting_for_remote_kv`): a CPU tier's load (`h_land`) and a
    /// decode replica's transfer of a whole prompt (`h_land_whole`) alike.
    pub(in crate::engine::offload) fn h_cache_loaded(&mut self, k: usize) {
        let groups = self.tier_groups();
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let s = &mut self.slab[k];
        s.sync_output();
        let hs = s.hybrid.as_mut().expect("a held request holds tables");
        groups.cache_loaded(
            pool,
            &mut hs.tables,
            &mut hs.keys,
            &s.segs,
            s.num_computed,
            &mut self.step_keys,
        );
    }
}
