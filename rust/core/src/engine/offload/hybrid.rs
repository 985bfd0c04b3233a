//! The CPU tier for a model of several KV-cache groups (DESIGN.md §CPU tier, "A hybrid model"; the twin
//! of `python/kvsim/reference/engine/offload_hybrid.py`): a waiting request's hits continued into the
//! tier group by group (full attention a prefix, a window a run from the right, to a fixed point), its
//! load over every group, the stores a step offers per group (a sliding window's only at the replay
//! boundary and the shared-prefix junction), the connector's copy of each table whose window blocks
//! reused since go stale, and the fences a window's store makes at once. Such a run takes full steps, and
//! every path here is the general one: the tier's keys are listed, never runs of private names.

use std::collections::HashSet;

use super::{Job, Stored, Tier, What, private_hi};
use crate::cpu_tier::{CpuTier, MISS, PENDING};
use crate::engine::admission::{GpuHits, NEVER};
use crate::engine::timing::Transfer;
use crate::engine::{Engine, Memory, event};
use crate::kv_groups::{GroupKind, GroupSpec, Groups};
use crate::{BlockId, BlockKey};

/// A chunk's key: its last block's content key with the low byte its group's index (vLLM's
/// `OffloadKey`, the block hash then the group index: one content's keys order as their groups).
const GROUP_BITS: u32 = 8;

#[inline]
fn chunk_key(content: BlockKey, g: usize) -> BlockKey {
    BlockKey((content.0 >> GROUP_BITS << GROUP_BITS) | g as u128)
}

#[inline]
fn cdiv(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// What a hybrid model's request finished in the step before needs for its last offer (it has left the
/// slab): its connector tables, next chunks, content keys and junction.
#[derive(Debug)]
pub(in crate::engine) struct HLast {
    row: usize,
    prompt_len: u64,
    num_tokens: u64,
    next_stores: Vec<u64>,
    conn: Vec<Vec<BlockId>>,
    keys: Vec<BlockKey>,
    junction: u64,
}

/// A request whose chunks a step offers: its tables, next chunks, keys, and what bounds them.
struct Offerer<'a> {
    row: usize,
    /// Its slab slot while it runs (None: finished in the step before).
    k: Option<usize>,
    prompt_len: u64,
    num_tokens: u64,
    /// Its offloadable tokens after this step.
    n: u64,
    junction: u64,
    conn: &'a [Vec<BlockId>],
    next_stores: &'a mut [u64],
    keys: &'a [BlockKey],
}

/// The groups' chunks as the connector sees them: a chunk of group `g` holds `blocks_per_chunk` of its
/// blocks (`tpc(g)` tokens, vLLM's `tokens_per_chunk`: the groups' block sizes may differ, each a
/// multiple of the engine's `bs`), named by the content key of the engine block it ends with (one chain
/// for every group) and ranked by where it ends.
struct Chunking<'g> {
    groups: &'g Groups,
    bs: u64,
    bpc: u64,
}

impl Chunking<'_> {
    #[inline]
    fn tpc(&self, g: usize) -> u64 {
        self.groups.specs()[g].block_size * self.bpc
    }

    /// Engine blocks a chunk of group `g` spans.
    #[inline]
    fn per(&self, g: usize) -> u64 {
        self.tpc(g) / self.bs
    }

    /// Chunk `i` of group `g`'s key, from `content` (the engine blocks' content keys).
    #[inline]
    fn key(&self, content: &[BlockKey], g: usize, i: u64) -> BlockKey {
        chunk_key(content[((i + 1) * self.per(g) - 1) as usize], g)
    }

    /// Chunk `i` of group `g`'s position for the tier's ranking: where it ends, in engine blocks (vLLM
    /// ranks a request's keys by the tokens their chunks end at, whatever their group).
    #[inline]
    fn pos(&self, g: usize, i: u64) -> u64 {
        (i + 1) * self.per(g)
    }

    /// Each group's window in chunks (vLLM's `sliding_window_size_in_chunks`): None for full
    /// attention, `ceil(W / C)` for a sliding window of W tokens, `ceil(A / C)` for local chunks of A.
    fn windows(&self) -> Vec<Option<u64>> {
        (0..self.groups.len())
            .map(|g| {
                let spec = &self.groups.specs()[g];
                (spec.kind != GroupKind::Full).then(|| cdiv(spec.window, self.tpc(g)))
            })
            .collect()
    }

    /// vLLM's `alignment_tokens` for the offloading: the full-attention groups' chunk when they share
    /// one; with no full-attention group the largest chunk; None if they differ.
    fn align(&self) -> Option<u64> {
        let full: Vec<u64> = (0..self.groups.len())
            .filter(|&g| self.groups.specs()[g].kind == GroupKind::Full)
            .map(|g| self.tpc(g))
            .collect();
        match full.first() {
            None => (0..self.groups.len()).map(|g| self.tpc(g)).max(),
            Some(&c) => full.iter().all(|&d| d == c).then_some(c),
        }
    }
}

/// The chunks a load into a group ending at `num_tokens` reads (`load_window_size_in_chunks`): a
/// sliding window widened by the hit's partial last chunk.
fn load_window(spec: &GroupSpec, tpc: u64, num_tokens: u64) -> Option<u64> {
    match spec.kind {
        GroupKind::Full => None,
        GroupKind::SlidingWindow => {
            let pad = (tpc - num_tokens % tpc) % tpc;
            Some(cdiv(spec.window, tpc).max(cdiv(spec.window - 1 + pad, tpc)))
        }
        _ => Some(cdiv(spec.window, tpc)),
    }
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

impl<'a> Engine<'a> {
    #[inline]
    fn tier_groups(&self) -> &'a Groups {
        let cfg: &'a _ = self.cfg;
        cfg.groups.as_ref().expect("a hybrid pool")
    }

    /// `k`'s content keys of its first `blocks` engine blocks (a group of the engine's block size
    /// keeps their chain: the tier refuses a layout without one), a copy.
    fn content_keys(&mut self, k: usize, blocks: u64) -> Vec<BlockKey> {
        let groups = self.tier_groups();
        let bs = self.cfg.block_size;
        let g = (0..groups.len())
            .find(|&g| groups.specs()[g].block_size == bs)
            .expect("a group of the engine's block size");
        let s = &mut self.slab[k];
        s.sync_output();
        let hs = s.hybrid.get_or_insert_with(Box::default);
        groups
            .content_keys(&mut hs.keys, &s.segs, g, blocks)
            .to_vec()
    }

    /// The groups' chunks (`Chunking`).
    fn chunking(&self) -> Chunking<'a> {
        self.chunking_of(self.tier_ref())
    }

    /// `chunking` of `tier` (taken out of the engine).
    fn chunking_of(&self, tier: &Tier) -> Chunking<'a> {
        Chunking {
            groups: self.tier_groups(),
            bs: self.cfg.block_size,
            bpc: tier.cfg.blocks_per_chunk,
        }
    }

    /// `tier_head` for a hybrid model's waiting request `k`: its lookup (vLLM's
    /// `get_num_new_matched_tokens`: the connector's tables start over, every chunk is offered again;
    /// a transfer of its own in flight, a pending chunk in its hit or one another request is loading
    /// skip it), then a load's admission or an ordinary one.
    pub(super) fn h_tier_head(
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
            self.waiting.pop_front();
            skipped_waiting.push(k);
            return None;
        }
        let groups = self.tier_groups();
        let Memory::Paged(pool) = &self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let s = &mut self.slab[k];
        let total = s.num_tokens();
        s.sync_output();
        let hs = s.hybrid.get_or_insert_with(Box::default);
        groups.lookup(pool, &s.segs, &mut hs.keys, total - 1, &mut self.lookup);
        let local = self.lookup.tokens;
        match self.h_tier_hit(k, local) {
            None => {
                self.waiting.pop_front();
                skipped_waiting.push(k);
                None
            }
            Some(0) => Some(self.try_admit_after(k, budget, GpuHits::Ask)),
            Some(ext) => {
                if self.h_admit_load(k, ext) {
                    self.waiting.pop_front();
                    self.tier_mut().skipped_held.push(k);
                    return None;
                }
                Some(0)
            }
        }
    }

    /// The tokens beyond `local` GPU hits every group's chunks in the tier serve (vLLM's
    /// `_lookup_complete_chunks`): 0 for less than a chunk, None to defer.
    fn h_tier_hit(&mut self, k: usize, local: u64) -> Option<u64> {
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
        let mut hit_tokens = 0;
        let mut defer = false;
        let mut todo = order.clone();
        while !todo.is_empty() {
            let mut looked_windowed = false;
            let current = std::mem::take(&mut todo);
            for g in current {
                let tpc = ch.tpc(g);
                let num_keys = total / tpc;
                max_hit = max_hit.min(num_keys * tpc);
                if max_hit < local + tpc {
                    return Some(0);
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
                    Some(0) => return Some(0),
                    None => defer = true,
                    Some(n) => max_hit = max_hit.min(tpc * (start + n)),
                }
                if max_hit < local + tpc {
                    return Some(0);
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
            return None;
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
                    return None;
                }
            }
        }
        Some(hit_tokens)
    }

    /// What the requests still prefilling (running or held) need to hold their whole sequences, the
    /// windows capped (vLLM's `_request_remaining_blocks`).
    fn h_inflight_reserved(&self) -> u64 {
        let groups = self.tier_groups();
        let Memory::Paged(pool) = &self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let mml = self.cfg.max_model_len;
        let tier = self.tier_ref();
        let mut out = 0;
        for &k in self
            .running
            .iter()
            .chain(&tier.held)
            .chain(&tier.skipped_held)
        {
            let s = &self.slab[k];
            if s.prefilling {
                let tokens = mml.map_or(s.num_tokens(), |m| s.num_tokens().min(m));
                let tables = &s.hybrid.as_ref().expect("tables").tables;
                out += groups.need(
                    pool,
                    Some(tables),
                    tokens,
                    None,
                    s.num_computed,
                    true,
                    false,
                    &self.step_keys,
                );
            }
        }
        out
    }

    /// Whether a load whose hits and loaded tokens end at `end` (of a request of `total` tokens; its GPU
    /// hit in `self.lookup`) fits: the full-prompt gate, the watermark and the blocks the requests still
    /// prefilling need.
    fn h_load_fits(&self, total: u64, end: u64) -> bool {
        let cfg = self.cfg;
        let groups = self.tier_groups();
        let watermark = self.admission_watermark();
        let reserved = self.h_inflight_reserved();
        let Memory::Paged(pool) = &self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let free = u64::from(pool.num_free_blocks());
        let full = cfg.max_model_len.map_or(total, |m| total.min(m));
        let keyed = &self.step_keys;
        let hit = Some(&self.lookup);
        if cfg.full_prompt_gate
            && groups.need(pool, None, full, hit, end, true, false, keyed) + watermark > free
        {
            return false;
        }
        (groups.need(pool, None, end, hit, end, false, false, keyed) + watermark)
            .saturating_add(reserved)
            <= free
    }

    /// Admits the load of `ext` tokens after the GPU hit (in `self.lookup`) if its blocks fit (the
    /// full-prompt gate, the watermark and the blocks the requests still prefilling need); false changes
    /// nothing. The load reads every group's chunks its blocks need: full attention all of them, a window
    /// its last.
    fn h_admit_load(&mut self, k: usize, ext: u64) -> bool {
        let groups = self.tier_groups();
        let ch = self.chunking();
        let (latency, per_block) = {
            let t = self.tier_ref();
            (t.cfg.latency_ps, t.cfg.ps_per_block)
        };
        let local = self.lookup.tokens;
        let total = self.slab[k].num_tokens();
        let end = local + ext;
        if !self.h_load_fits(total, end) {
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
        let row = s.row;
        // The load's chunks, group by group: from each group's first block it fills.
        let mut starts = Vec::with_capacity(groups.len());
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
            hs.next_stores[g] = last; // vLLM's chunk-level policy: stores resume after the loaded chunks
        }
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        for t in &hs.tables.tables {
            tier.touched
                .extend(t.blocks.iter().filter(|&&b| b != BlockId::NULL));
        }
        if self.log.is_some() {
            self.h_log_admission(row, end);
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
        let start = self.t.max(self.tier_ref().load_free);
        let link_end =
            self.transfer_end_or_overflow(Transfer::Load, start, latency, blocks, per_block);
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        tier.cpu.prepare_load(private_hi(row), &load);
        for &(key, _) in &load {
            *tier.loading.entry(key).or_insert(0) += 1;
        }
        tier.load_free = link_end;
        let listed: Vec<BlockKey> = load.iter().map(|&(key, _)| key).collect();
        let chunks = listed.len();
        self.hold_for_landing(k, (listed, false), link_end, end);
        let c = &mut self.out.counters;
        c.num_loads += 1;
        self.progress += 1;
        c.loaded_blocks += i128::from(blocks);
        let hit = ext; // (a hybrid model's hit ends short of the prompt: nothing computed again)
        c.cpu_hit_tokens += i128::from(hit);
        self.out.cpu_hit_tokens[row - self.out_base] += hit as i64;
        self.log_count(event::CPU_HIT, row, -1, hit as i64);
        self.log_count(event::LOAD, row, -1, chunks as i64);
        self.note_admission(k, local, total, hit);
        true
    }

    /// A load's admission logged: the request's hits its windows kept as of `end` tokens, then its new
    /// blocks (`self.group_new`).
    fn h_log_admission(&mut self, row: usize, end: u64) {
        let groups = self.tier_groups();
        self.log(event::ADMIT, row, -1);
        for g in 0..groups.len() {
            let spec = &groups.specs()[g];
            let skipped = spec.skipped(end) / spec.block_size;
            for i in skipped as usize..self.lookup.hits[g].len() {
                let b = self.lookup.hits[g][i];
                if b != BlockId::NULL {
                    self.log_count(event::PREFIX_HIT, row, i64::from(b.0), g as i64);
                }
            }
        }
        self.log_group_allocations(row);
    }

    /// A held request whose load has landed, admitted as a resumed one over a hybrid pool: the
    /// full-prompt gate, then the blocks its windows left behind freed and its next chunk's allocated if
    /// the watermark allows; the tokens it computes, 0 if it cannot start now, or `NEVER`.
    pub(super) fn h_resume_loaded(&mut self, k: usize, budget: u64) -> u64 {
        let cfg = self.cfg;
        let groups = self.tier_groups();
        let total = self.slab[k].num_tokens();
        let computed = self.slab[k].num_computed;
        let mut num_new = total - computed;
        if cfg.chunked_prefill {
            num_new = num_new.min(budget);
        } else if num_new > cfg.max_num_batched_tokens {
            return NEVER;
        } else if num_new > budget {
            return 0;
        }
        let watermark = self.admission_watermark();
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let s = &mut self.slab[k];
        let hs = s.hybrid.as_mut().expect("a held request holds tables");
        let full = cfg.max_model_len.map_or(total, |m| total.min(m));
        if cfg.full_prompt_gate
            && groups.need(
                pool,
                Some(&hs.tables),
                full,
                None,
                computed,
                true,
                false,
                &self.step_keys,
            ) + watermark
                > u64::from(pool.num_free_blocks())
        {
            return 0;
        }
        self.group_new.clear();
        groups.remove_skipped(pool, &mut hs.tables, computed, &mut self.group_new);
        let row = s.row;
        if self.log.is_some() {
            for i in 0..self.group_new.len() {
                let (b, g) = self.group_new[i];
                self.log_count(event::WINDOW, row, i64::from(b.0), g as i64);
            }
        }
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!()
        };
        let s = &mut self.slab[k];
        let end = computed + num_new;
        let hs = s.hybrid.as_mut().expect("a held request holds tables");
        if groups.need(
            pool,
            Some(&hs.tables),
            end,
            None,
            computed,
            false,
            false,
            &self.step_keys,
        ) + watermark
            > u64::from(pool.num_free_blocks())
        {
            return 0;
        }
        s.sync_output();
        let hs = s.hybrid.as_mut().expect("a held request holds tables");
        self.group_new.clear();
        groups.grow(
            pool,
            &mut hs.tables,
            &mut hs.keys,
            &s.segs,
            end,
            end,
            false,
            &mut self.step_keys,
            &mut self.group_new,
        );
        s.num_computed = end;
        if self.log.is_some() {
            self.log_group_allocations(row);
        }
        num_new
    }

    /// A held request's load landed over a hybrid pool: its blocks up to the loaded tokens take their
    /// keys.
    pub(super) fn h_land(&mut self, k: usize) {
        let groups = self.tier_groups();
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("hybrid pools are paged")
        };
        let s = &mut self.slab[k];
        debug_assert!(s.num_computed < s.num_tokens(), "a hybrid hit ends short");
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

    /// A hybrid model's request finished: the blocks its windows left behind are freed first (vLLM's
    /// `_connector_finished` does so before the connector sees its tables), the blocks of its stores in
    /// flight a window's fence did not watch yet are watched (vLLM's `request_finished`: the deferred
    /// fences), and what its last offer reads is kept.
    pub(super) fn h_tier_finished(&mut self, k: usize) {
        let groups = self.tier_groups();
        let bs = self.cfg.block_size;
        {
            let Memory::Paged(pool) = &mut self.mem else {
                unreachable!("hybrid pools are paged")
            };
            let s = &mut self.slab[k];
            let computed = s.num_computed;
            let hs = s.hybrid.as_mut().expect("a finished request holds tables");
            self.group_new.clear();
            groups.remove_skipped(pool, &mut hs.tables, computed, &mut self.group_new);
        }
        let row = self.slab[k].row;
        if self.log.is_some() {
            for i in 0..self.group_new.len() {
                let (b, g) = self.group_new[i];
                self.log_count(event::WINDOW, row, i64::from(b.0), g as i64);
            }
        }
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
    pub(super) fn h_offer_stores(&mut self, step_end: i64) -> (bool, i64) {
        self.flush_occupancy(); // (the offers may change it)
        let mut tier = self.tier.take().expect("a CPU tier");
        let observation = self.tier_hot.observed + 1;
        let touched: HashSet<BlockId> = tier.touched.iter().copied().collect();
        let mut h_last = std::mem::take(&mut tier.h_last);
        self.h_sync_tables(&tier, &touched, &mut h_last);
        let mut flushed: Vec<u64> = Vec::new();
        for &k in &tier.preempted_now {
            let row = self.slab[k].row;
            flushed.extend(tier.stores.iter().filter(|j| j.row == row).map(|j| j.id));
        }
        tier.preempted_now.clear();
        if !tier.fences.is_empty() {
            for b in &tier.touched {
                if let Some(ids) = tier.fences.get(b) {
                    flushed.extend_from_slice(ids);
                }
            }
        }
        let prompt_only = tier.cfg.prompt_only;
        let offloadable = |n: u64, prompt: u64| if prompt_only { n.min(prompt) } else { n };
        let mut planned = false;
        for i in 0..self.scheduled.len() {
            let k = self.scheduled[i].0;
            let keys = {
                let n = self.slab[k].num_tokens() / self.cfg.block_size;
                self.content_keys(k, n)
            };
            let s = &mut self.slab[k];
            let n = offloadable(s.num_computed.min(s.num_tokens()), s.prompt_len);
            let (row, prompt_len, num_tokens) = (s.row, s.prompt_len, s.num_tokens());
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
        let flush_end = self.apply_flushes(&mut tier, &flushed, observation);
        self.tier = Some(tier);
        (planned, flush_end)
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
        for (g, (&(start, num), c)) in ranges.iter().zip(who.conn).enumerate() {
            let out = if groups.specs()[g].kind == GroupKind::Full {
                &mut rest
            } else {
                &mut blocks
            };
            for i in start..num {
                if chosen.contains(&ch.key(who.keys, g, i)) {
                    let chunk = &c[(i * bpc) as usize..((i + 1) * bpc) as usize];
                    out.extend(chunk.iter().filter(|&&b| b != BlockId::NULL));
                }
            }
        }
        advance(who.next_stores);
        let windowed = blocks.len();
        blocks.extend_from_slice(&rest);
        let id = self.h_queue_store(tier, (who.k, row), stored, (blocks, windowed), step_end);
        if who.k.is_none() && rest.iter().any(|b| touched.contains(b)) {
            flushed.push(id); // (a finished request's store reading a block this step allocated)
        }
        true
    }

    /// A store of `stored` (request `k`, None once finished, of row `row`) from `blocks`, the first
    /// `windowed` of them its window groups': on the link from the step's end, counted and logged, its
    /// window blocks fenced (all of them if its request finished). Returns its id.
    fn h_queue_store(
        &mut self,
        tier: &mut Tier,
        (k, row): (Option<usize>, usize),
        stored: Vec<BlockKey>,
        (blocks, windowed): (Vec<BlockId>, usize),
        step_end: i64,
    ) -> u64 {
        let n = blocks.len() as u64;
        let begin = step_end.max(tier.store_free);
        let (latency, per_block) = (tier.cfg.latency_ps, tier.cfg.ps_per_block);
        tier.store_free =
            self.transfer_end_or_overflow(Transfer::Store, begin, latency, n, per_block);
        tier.next_job += 1;
        let id = tier.next_job;
        self.out.counters.num_stores += 1;
        self.out.counters.stored_blocks += i128::from(n);
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
            if num <= start {
                continue;
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
