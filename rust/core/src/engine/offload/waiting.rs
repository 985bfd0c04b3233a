//! The CPU tier's waiting phase (DESIGN.md §CPU tier): held requests and skips, a waiting request's
//! hits continued into the tier, its load's admission (or a decode replica's transfer), a landed
//! load's resumption.

use super::{Job, What, private_hi};
use crate::BlockKey;
use crate::block_table::{BlockTable, blocks_for, div_bs};
use crate::cpu_tier::{MISS, PENDING};
use crate::engine::admission::{GpuHits, NEVER, gate_tokens};
use crate::engine::timing::Transfer;
use crate::engine::{Engine, Memory, event, reject};

/// What a waiting request's lookup found: skip it, or its GPU hits (in `Engine::hits`) with their
/// last key, their tokens and the tokens to load beyond them (0: an ordinary admission).
enum Found {
    Skip,
    Hits {
        last_key: Option<BlockKey>,
        local: u64,
        ext: u64,
    },
}

impl Engine<'_> {
    /// The waiting phase with a CPU tier (vLLM's waiting loop): held requests first, then the waiting
    /// queue; a request that cannot be decided now is skipped and put back at the head of its queue, in
    /// order, after the pass; a load admitted joins the held ones.
    #[inline(never)]
    pub(in crate::engine) fn tier_admit_waiting(&mut self, mut budget: u64) {
        let cfg = self.cfg;
        let mut skipped_waiting: Vec<usize> = Vec::new();
        while budget > 0 {
            // (`held_empty` as the last pass left it: this pass adds none before its end)
            let from_held = !self.tier_hot.held_empty && !self.tier_ref().held.is_empty();
            let k = if from_held {
                self.tier_mut().held[0]
            } else {
                match self.waiting_head() {
                    Some(k) => k,
                    None => break,
                }
            };
            if self.running.len() as u64 >= cfg.max_num_seqs {
                break;
            }
            let num_new = if !from_held && self.tier_has_nothing_for(k) {
                // (`tier_lookup` would find no chunk: an ordinary admission, the usual head)
                self.slab[k].next_store = 0;
                self.try_admit_after(k, budget, GpuHits::Ask)
            } else {
                match self.tier_head(k, budget, from_held, &mut skipped_waiting) {
                    Some(num_new) => num_new,
                    None => continue,
                }
            };
            if num_new == NEVER {
                if from_held {
                    self.tier_mut().held.pop_front();
                    self.release(k);
                    let row = self.slab[k].row;
                    // (a held request loaded: it has its accesses' record, no own run)
                    debug_assert_eq!(self.slab[k].tier_own, 0);
                    self.tier_mut().cpu.finish_unnamed(private_hi(row));
                } else {
                    self.waiting.pop_front();
                }
                self.reject_seq(k, reject::EXCEEDS_STEP_BUDGET);
                continue;
            }
            if num_new == 0 {
                let tier = self.tier_ref();
                // (blocks held for a load, or by a finisher behind the batch in flight, come back)
                if self.running.is_empty()
                    && tier.held.is_empty()
                    && tier.skipped_held.is_empty()
                    && !tier.batches.holds_blocks()
                {
                    self.waiting.pop_front();
                    self.reject_seq(k, reject::NEVER_ADMITTED);
                    continue;
                }
                break; // head-of-line blocking: a waiting request never preempts
            }
            if from_held {
                self.tier_mut().held.pop_front();
            } else {
                self.waiting.pop_front();
            }
            self.tier_admitted(k, num_new);
            budget -= num_new;
            if self.cancelled() {
                break;
            }
        }
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        while let Some(k) = tier.skipped_held.pop() {
            tier.held.push_front(k);
        }
        self.tier_hot.held_empty = tier.held.is_empty();
        for &k in skipped_waiting.iter().rev() {
            self.waiting.push_front(k);
        }
    }

    /// `tier_admit_waiting`'s head `k` that the tier may hold something for, or a held request
    /// (`from_held`): its admission's tokens (0: it cannot start now, `NEVER`: it never can), or None
    /// when it left its queue for the pass's skipped ones (a held request not loaded yet, a request to
    /// skip, a load admitted). Kept out of the loop (cold): the usual head is an ordinary admission.
    #[cold]
    #[inline(never)]
    fn tier_head(
        &mut self,
        k: usize,
        budget: u64,
        from_held: bool,
        skipped_waiting: &mut Vec<usize>,
    ) -> Option<u64> {
        if from_held {
            if !self.slab[k].loaded {
                let tier = self.tier_mut();
                tier.held.pop_front();
                tier.skipped_held.push(k);
                return None;
            }
            return Some(self.try_resume_loaded(k, budget));
        }
        if self.cfg.groups.is_some() {
            if !self.tier_ref().has_cpu {
                return self.h_remote_head(k, budget);
            }
            return self.h_tier_head(k, budget, skipped_waiting);
        }
        match self.tier_lookup(k) {
            Found::Skip => self.skip_head(k, skipped_waiting),
            Found::Hits {
                last_key,
                local,
                ext,
            } if ext > 0 => {
                let admitted = self.admit_transfer(k, last_key, local, ext);
                self.hold_head(k, admitted)
            }
            Found::Hits { last_key: l, .. } => {
                Some(self.try_admit_after(k, budget, GpuHits::Taken(l)))
            }
        }
    }

    /// The waiting head `k` set aside until the pass ends (`skipped_waiting`): it cannot be decided now
    /// (a transfer of its own in flight, a chunk of its hit pending or being loaded). None: it left.
    #[inline]
    pub(in crate::engine::offload) fn skip_head(
        &mut self,
        k: usize,
        skipped_waiting: &mut Vec<usize>,
    ) -> Option<u64> {
        self.waiting.pop_front();
        skipped_waiting.push(k);
        None
    }

    /// The waiting head `k` after its transfer's admission was tried (a load from the tier or a decode
    /// replica's transfer, `admitted` if its blocks were held): admitted, it leaves the waiting queue for
    /// the pass's held requests (None); else it cannot start now (0: head-of-line blocking).
    #[inline]
    pub(in crate::engine::offload) fn hold_head(
        &mut self,
        k: usize,
        admitted: bool,
    ) -> Option<u64> {
        if !admitted {
            return Some(0);
        }
        self.waiting.pop_front();
        self.tier_mut().skipped_held.push(k);
        None
    }

    /// Waiting or held request `k` (out of its queue) admitted with `num_new` tokens this step.
    /// Keep in step with its inlined copy for a head the tier holds nothing for, in `admit_loop`'s
    /// tier-on branch (`admission.rs`).
    #[inline]
    pub(in crate::engine) fn tier_admitted(&mut self, k: usize, num_new: u64) {
        self.note_remote_admitted(k);
        let s = &mut self.slab[k];
        s.held = false;
        s.remote = false; // one transfer per request (vLLM clears `do_remote_prefill` once allocated)
        s.prefilling = s.num_computed < s.num_tokens();
        s.adm_no = self.next_adm;
        self.running.push(k);
        self.scheduled.push((k, num_new));
        self.next_adm += crate::engine::ADM_STRIDE;
        let row = self.slab[k].row;
        if self.out.first_scheduled[row - self.out_base] < 0 {
            self.out.first_scheduled[row - self.out_base] = self.t;
        }
        if let Some(hs) = &self.slab[k].hybrid {
            // A hybrid model's: always watched (a window's store fences its blocks from its creation,
            // and the connector's tables go stale where a block is taken again).
            let tier = self.tier.as_deref_mut().expect("a CPU tier");
            for t in &hs.tables.tables {
                tier.touched
                    .extend(t.blocks.iter().filter(|&&b| b != crate::BlockId::NULL));
            }
        } else if self.tier_hot.pending && self.tier_ref().may_fence() {
            self.tier_watch_blocks(k);
        }
    }

    /// Admitted `k`'s blocks watched while a store may fence them (vLLM's flush): a fence, or a
    /// request finished with chunks left to offer, is known before the step's admissions.
    #[inline(never)]
    pub(in crate::engine) fn tier_watch_blocks(&mut self, k: usize) {
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        tier.touched.extend_from_slice(self.slab[k].table.blocks());
    }

    /// A remote request admitted with no transfer (`ext = 0`): its prefill replica's blocks are freed
    /// now (vLLM's full local hit notifies the prefill side at once).
    #[inline]
    fn note_remote_admitted(&mut self, k: usize) {
        if self.slab[k].remote {
            let (row, t) = (self.slab[k].row, self.t);
            self.tier_mut().sends_decided.push((row, t));
        }
    }

    /// Whether waiting request `k`'s lookup (`tier_lookup`) would find nothing in the tier whatever its
    /// GPU hits: never admitted (it stored nothing, and nobody else names its private chunks), local
    /// to this replica, and its first chunk already private (deferred keys: no content key to look up).
    #[inline]
    pub(in crate::engine) fn tier_has_nothing_for(&self, k: usize) -> bool {
        let s = &self.slab[k];
        let tier = self.tier_ref();
        !s.admitted_before
            && !s.remote
            && self.defer_keys // (false for a hybrid pool)
            && tier.has_cpu
            && s.private_from < tier.tpc // (its first chunk's blocks, `blocks_per_chunk`, not all hashed)
    }

    /// A waiting request's GPU prefix hits (into `self.hits`) and the tokens the tier holds beyond them
    /// (vLLM's `get_num_new_matched_tokens`); `Skip` for a store of its own in flight, a chunk of its
    /// hit still being stored, or one another request is loading.
    fn tier_lookup(&mut self, k: usize) -> Found {
        let bs = self.cfg.block_size;
        if !self.tier_ref().has_cpu || self.slab[k].remote {
            // A decode replica's request: its GPU hits and, if remote, the tokens up to its prompt's
            // last full block beyond them.
            let total = self.slab[k].num_tokens();
            let last_key = self.gpu_hits(k);
            let local = self.hits.len() as u64 * bs;
            let ext = if self.slab[k].remote {
                (total / bs * bs).saturating_sub(local)
            } else {
                0
            };
            return Found::Hits {
                last_key,
                local,
                ext,
            };
        }
        self.slab[k].next_store = 0; // a lookup starts it over: every chunk is offered again
        if self.slab[k].jobs > 0 {
            return Found::Skip;
        }
        let total = self.slab[k].num_tokens();
        let last_key = self.gpu_hits(k);
        let local = self.hits.len() as u64 * bs;
        let (tpc, bpc) = {
            let t = self.tier_ref();
            (t.tpc, t.cfg.blocks_per_chunk)
        };
        let num_chunks = total / tpc;
        if num_chunks * tpc < local + tpc {
            return Found::Hits {
                last_key,
                local,
                ext: 0,
            };
        }
        let start = local / tpc;
        let s = &self.slab[k];
        if !s.admitted_before
            && self.defer_keys
            && (start + 1) * bpc > (s.tier_keys.len() as u64).max(div_bs(s.private_from, bs))
        {
            // Never admitted, its first chunk past its GPU hits private (the loop below stops
            // there): nothing to look up, no keys to hash.
            return Found::Hits {
                last_key,
                local,
                ext: 0,
            };
        }
        self.ensure_tier_keys(k, num_chunks * bpc);
        let mut count = 0;
        let mut pending = false;
        // A request never admitted has stored nothing: none of its private chunks (past its hashed
        // keys: named by its row, `tier_key`) is held.
        let s = &self.slab[k];
        let nothing_private = (!s.admitted_before).then_some(s.tier_keys.len() as u64);
        for c in start..num_chunks {
            if nothing_private.is_some_and(|hashed| (c + 1) * bpc > hashed) {
                debug_assert_eq!(self.tier_ref().cpu.lookup(self.chunk_key(k, c)), MISS);
                break;
            }
            let found = self.tier_ref().cpu.lookup(self.chunk_key(k, c));
            if found == MISS {
                break;
            }
            count += 1;
            pending |= found == PENDING;
        }
        if count == 0 {
            return Found::Hits {
                last_key,
                local,
                ext: 0,
            };
        }
        if pending {
            return Found::Skip;
        }
        let ext = (start + count) * tpc - local;
        if ext < tpc {
            return Found::Hits {
                last_key,
                local,
                ext: 0,
            };
        }
        let tier = self.tier_ref();
        if !tier.loading.is_empty()
            && (start..start + count).any(|c| tier.loading.contains_key(&self.chunk_key(k, c)))
        {
            return Found::Skip;
        }
        Found::Hits {
            last_key,
            local,
            ext,
        }
    }

    /// The requests still prefilling (running, held, or held and set aside in this pass), each with the
    /// tokens it must hold to finish (its sequence, capped at `max_model_len`): what a transfer's
    /// admission leaves room for (`inflight_reserved`, `h_inflight_reserved`).
    #[inline]
    pub(in crate::engine::offload) fn prefilling_to_finish(
        &self,
    ) -> impl Iterator<Item = (usize, u64)> + '_ {
        let mml = self.cfg.max_model_len;
        let tier = self.tier_ref();
        self.running
            .iter()
            .chain(&tier.held)
            .chain(&tier.skipped_held)
            .filter(|&&k| self.slab[k].prefilling)
            .map(move |&k| {
                let total = self.slab[k].num_tokens();
                (k, mml.map_or(total, |m| total.min(m)))
            })
    }

    /// Blocks the requests still prefilling (running or held) need to finish their prompts (vLLM's
    /// `_inflight_prefill_reserved_blocks`).
    fn inflight_reserved(&self) -> u64 {
        let bs = self.cfg.block_size;
        self.prefilling_to_finish()
            .map(|(k, tokens)| {
                blocks_for(tokens, bs).saturating_sub(self.slab[k].table.blocks().len() as u64)
            })
            .sum()
    }

    /// Holds the blocks for a transfer of `ext` tokens after `local` GPU hits (in `self.hits`) if they
    /// fit (the full-prompt gate, the watermark and the blocks the requests still prefilling need): the
    /// table started, the blocks touched for the stores, the admission logged; the new blocks are in
    /// `self.new_blocks`. Returns `(row, end, total)`, or None, changing nothing. A tier's load and a
    /// remote request's transfer alike (`admit_load`, `admit_remote`).
    fn hold_for_transfer(
        &mut self,
        k: usize,
        last_key: Option<BlockKey>,
        local: u64,
        ext: u64,
    ) -> Option<(usize, u64, u64)> {
        let cfg = self.cfg;
        let bs = cfg.block_size;
        let total = self.slab[k].num_tokens();
        let watermark = self.admission_watermark();
        let Memory::Paged(pool) = &self.mem else {
            unreachable!("a CPU tier or a decode replica is paged")
        };
        let free = u64::from(pool.num_free_blocks());
        let num_hits = self.hits.len() as u64;
        let evictable = BlockTable::num_evictable(pool, &self.hits);
        let full = gate_tokens(cfg, total);
        if cfg.full_prompt_gate && blocks_for(full, bs) - num_hits + evictable + watermark > free {
            return None;
        }
        let end = local + ext;
        let reserved = self.inflight_reserved();
        if (end / bs - num_hits + evictable + watermark).saturating_add(reserved) > free {
            return None;
        }
        self.new_blocks.clear();
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!()
        };
        let buffer = std::mem::take(&mut self.slab[k].table.blocks);
        let table = BlockTable::start(
            pool,
            bs,
            &self.hits,
            last_key,
            end - local,
            &mut self.new_blocks,
            0,
            buffer,
        );
        let s = &mut self.slab[k];
        s.table = table;
        s.keys.clear();
        s.keys_for = 0;
        let row = s.row;
        if self.tier_hot.pending {
            // Watched only while a store may fence blocks, as an ordinary admission's (`tier_admitted`):
            // else this step's offer checks no block, and a lockstep step that offers nothing
            // (`tier_idle`) would leave them for a later step's offer to find.
            let tier = self.tier.as_deref_mut().expect("a CPU tier or a connector");
            tier.touched.extend_from_slice(&self.hits);
            tier.touched.extend_from_slice(&self.new_blocks);
        }
        if self.log.is_some() {
            self.log_admission(row);
        }
        Some((row, end, total))
    }

    /// Admits the load of `ext` tokens from the tier after `local` GPU hits (in `self.hits`) if its
    /// blocks fit (`hold_for_transfer`); false changes nothing.
    fn admit_load(&mut self, k: usize, last_key: Option<BlockKey>, local: u64, ext: u64) -> bool {
        let Some((row, end, total)) = self.hold_for_transfer(k, last_key, local, ext) else {
            return false;
        };
        let chunks = self.start_load(k, local, end);
        // Hits count the tokens the request does not compute: a load of its whole prompt leaves the
        // last token to compute again, as the GPU's hits stop one token short.
        let hit = ext - u64::from(end == total);
        let c = &mut self.out.counters;
        c.cpu_hit_tokens += i128::from(hit);
        self.out.cpu_hit_tokens[row - self.out_base] += hit as i64;
        self.log_count(event::CPU_HIT, row, -1, hit as i64);
        self.log_count(event::LOAD, row, -1, chunks as i64);
        self.note_admission(k, local, total, hit);
        true
    }

    /// A request's load from the tier, or a remote request's transfer (`admit_load`, `admit_remote`).
    fn admit_transfer(
        &mut self,
        k: usize,
        last_key: Option<BlockKey>,
        local: u64,
        ext: u64,
    ) -> bool {
        if self.slab[k].remote {
            self.admit_remote(k, last_key, local, ext)
        } else {
            self.admit_load(k, last_key, local, ext)
        }
    }

    /// A decode replica admits a remote request's transfer of `ext` tokens (its prompt's full blocks
    /// after `local` GPU hits, in `self.hits`) if the blocks fit, by a load's rules
    /// (`hold_for_transfer`); the transfer queues on the inbound link. False changes nothing.
    fn admit_remote(&mut self, k: usize, last_key: Option<BlockKey>, local: u64, ext: u64) -> bool {
        let Some((_, end, _)) = self.hold_for_transfer(k, last_key, local, ext) else {
            return false;
        };
        let bs = self.cfg.block_size;
        self.queue_remote(k, end / bs - local / bs, local, end);
        true
    }

    /// `tier_head` for waiting request `k` on a hybrid decode replica (its connector, no CPU tier): a
    /// remote request's GPU hit every group agrees on (within `prompt_len - 1` tokens) and its transfer
    /// up to the scheduler's last full block of its prompt (with a Mamba group: up to its last token but
    /// one), admitted by a hybrid load's rules
    /// (`h_admit_remote`); otherwise (not remote, or nothing to transfer: with the lookup made here,
    /// `Looked`) an ordinary admission.
    fn h_remote_head(&mut self, k: usize, budget: u64) -> Option<u64> {
        if !self.slab[k].remote {
            return Some(self.try_admit_after(k, budget, GpuHits::Ask));
        }
        let cfg = self.cfg;
        let groups = cfg.groups.as_ref().expect("a hybrid pool");
        let local = self.hybrid_lookup(k);
        let end = groups.remote_end(self.slab[k].num_tokens());
        if end <= local {
            return Some(self.try_admit_after(k, budget, GpuHits::Looked));
        }
        let admitted = self.h_admit_remote(k, end);
        self.hold_head(k, admitted)
    }

    /// `admit_remote` over a hybrid pool (DESIGN.md §Prefill/decode disaggregation, a hybrid model): the
    /// transfer's blocks up to `end` after the GPU hit (in `self.lookup`) held if they fit (the
    /// full-prompt gate with the windows' caps, the watermark and what the requests still prefilling
    /// need): each group's positions its window skipped at `end` null, its hits above them taken, new
    /// blocks for the rest, which the transfer moves. False changes nothing.
    fn h_admit_remote(&mut self, k: usize, end: u64) -> bool {
        let local = self.lookup.tokens;
        if !self.h_hold_tables(k, end) {
            return false;
        }
        let row = self.slab[k].row;
        if self.log.is_some() {
            self.log_hybrid_admission(row, end);
        }
        let blocks = self.group_new.len() as u64;
        self.queue_remote(k, blocks, local, end);
        true
    }

    /// A remote request's transfer of `blocks` blocks (held for it), tokens `local..end` after its GPU
    /// hits: queued on the inbound link, its end handed to the prefill side, `k` held until it lands.
    fn queue_remote(&mut self, k: usize, blocks: u64, local: u64, end: u64) {
        let (row, total) = (self.slab[k].row, self.slab[k].num_tokens());
        let t = self.t;
        let tier = self.tier_ref();
        let (latency, per_block) = tier.pd_link.expect("a decode replica's link");
        let start = t.max(tier.pd_free);
        let link_end =
            self.transfer_end_or_overflow(Transfer::Remote, start, latency, blocks, per_block);
        let duration = latency.saturating_add(blocks.saturating_mul(per_block));
        let tier = self.tier.as_deref_mut().expect("a connector");
        tier.pd_free = link_end;
        tier.sends_decided.push((row, tier.pd_free));
        let link_ps = blocks.saturating_mul(per_block);
        self.hold_for_landing(k, (Vec::new(), true), (link_end, blocks, link_ps), end);
        self.slab[k].remote = false;
        let c = &mut self.out.counters;
        c.pd_transfers += 1;
        self.progress += 1;
        c.pd_transfer_blocks += i128::from(blocks);
        c.pd_link_busy_ps += i128::from(duration);
        self.note_admission(k, local, total, 0);
    }

    /// A transfer into `k`'s blocks just allocated (its `keys`, the tier's chunks a load reads, or a
    /// decode replica's `remote` transfer) on the link until `link_end` (`blocks` blocks, `link_ps` of
    /// it theirs: `Job::link_ps`): `k` held until it lands, its tokens up to `end` computed then.
    pub(super) fn hold_for_landing(
        &mut self,
        k: usize,
        (keys, remote): (Vec<BlockKey>, bool),
        (link_end, blocks, link_ps): (i64, u64, u64),
        end: u64,
    ) {
        let row = self.slab[k].row;
        let tier = self.tier.as_deref_mut().expect("a CPU tier or a connector");
        tier.next_job += 1;
        debug_assert!(!remote || keys.is_empty());
        tier.loads.push(Job {
            id: tier.next_job,
            k,
            row,
            end: link_end,
            avail: self.tier_hot.observed + 1,
            blocks,
            link_ps,
            what: if remote {
                What::Remote
            } else {
                What::Load(keys)
            },
        });
        self.tier_hot.min_end = self.tier_hot.min_end.min(link_end);
        let s = &mut self.slab[k];
        s.jobs += 1;
        s.held = true;
        s.prefilling = true;
        s.loaded = false;
        s.load_at = self.t;
        s.num_computed = end;
    }

    /// The load of `k`'s chunks holding tokens `local..end` (its blocks just allocated, in
    /// `self.new_blocks`): the chunks pinned, the transfer on the link from now, the request held.
    /// Returns the chunks it loads.
    fn start_load(&mut self, k: usize, local: u64, end: u64) -> usize {
        let bs = self.cfg.block_size;
        let (tpc, bpc, latency, per_block) = {
            let t = self.tier_ref();
            (
                t.tpc,
                t.cfg.blocks_per_chunk,
                t.cfg.latency_ps,
                t.cfg.ps_per_block,
            )
        };
        let first = div_bs(local, bs) / bpc;
        let num_chunks = end / tpc;
        self.ensure_tier_keys(k, num_chunks * bpc);
        let keys: Vec<(BlockKey, u64)> = (first..num_chunks)
            .map(|c| (self.chunk_key(k, c), c))
            .collect();
        let blocks = end / bs - local / bs;
        let (t, row) = (self.t, self.slab[k].row);
        let start = t.max(self.tier_ref().load_free);
        let link_end =
            self.transfer_end_or_overflow(Transfer::Load, start, latency, blocks, per_block);
        let tier = self.tier.as_deref_mut().expect("a CPU tier");
        tier.cpu.prepare_load(private_hi(row), &keys);
        for &(key, _) in &keys {
            *tier.loading.entry(key).or_insert(0) += 1;
        }
        tier.load_free = link_end;
        let listed = keys.iter().map(|&(key, _)| key).collect();
        let link_ps = blocks.saturating_mul(per_block);
        self.hold_for_landing(k, (listed, false), (link_end, blocks, link_ps), end);
        self.slab[k].next_store = num_chunks; // vLLM's chunk-level policy: stores resume after the loaded chunks
        let c = &mut self.out.counters;
        c.num_loads += 1;
        self.progress += 1;
        c.loaded_blocks += i128::from(blocks);
        keys.len()
    }

    /// A held request whose load has landed, admitted as a resumed one: its next chunk allocated after
    /// the full-prompt gate and the watermark; the tokens it computes, 0 if it cannot start now, or
    /// `NEVER`.
    fn try_resume_loaded(&mut self, k: usize, budget: u64) -> u64 {
        if self.cfg.groups.is_some() {
            return self.h_resume_loaded(k, budget);
        }
        let num_new = match self.resumed_chunk(k, budget) {
            Ok(num_new) => num_new,
            Err(answer) => return answer,
        };
        let cfg = self.cfg;
        let bs = cfg.block_size;
        let total = self.slab[k].num_tokens();
        let computed = self.slab[k].num_computed;
        let watermark = self.admission_watermark();
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("the CPU tier is paged")
        };
        let s = &mut self.slab[k];
        let table = s.table.blocks().len() as u64;
        let free = u64::from(pool.num_free_blocks());
        let full = gate_tokens(cfg, total);
        if cfg.full_prompt_gate && blocks_for(full, bs) - table + watermark > free {
            return 0;
        }
        if blocks_for(computed + num_new, bs) - table + watermark > free {
            return 0;
        }
        self.new_blocks.clear();
        let grown = s.table.grow(pool, bs, num_new, &mut self.new_blocks);
        debug_assert!(grown == Some(false), "capacity was checked");
        s.sync_output();
        let phantom = self.defer_keys.then_some(s.private_from);
        s.table
            .register_full_blocks_cached(pool, bs, &s.segs, &s.tier_keys, phantom);
        s.num_computed = computed + num_new;
        let row = s.row;
        if self.log.is_some() && !self.new_blocks.is_empty() {
            self.log_allocations(row, event::ALLOCATE);
        }
        num_new
    }

    /// The tokens a held request whose load has landed computes out of those it has left (vLLM's waiting
    /// loop for a request with computed tokens): with chunked prefill as many as `budget` takes;
    /// without, all of them, or `Err(NEVER)` over a step's budget and `Err(0)` over what is left of it
    /// (it cannot start now). A single group's resumption (`try_resume_loaded`) and a hybrid pool's
    /// (`h_resume_loaded`) alike.
    #[inline]
    pub(in crate::engine::offload) fn resumed_chunk(
        &self,
        k: usize,
        budget: u64,
    ) -> Result<u64, u64> {
        let cfg = self.cfg;
        let s = &self.slab[k];
        let num_new = s.num_tokens() - s.num_computed;
        if cfg.chunked_prefill {
            Ok(num_new.min(budget))
        } else if num_new > cfg.max_num_batched_tokens {
            Err(NEVER)
        } else if num_new > budget {
            Err(0)
        } else {
            Ok(num_new)
        }
    }

    /// A held request's load is observed complete: its blocks take their keys; a load of the whole
    /// prompt leaves its last token to compute (vLLM's `_update_waiting_for_remote_kv`).
    pub(super) fn land(&mut self, k: usize) {
        if self.cfg.groups.is_some() {
            self.slab[k].loaded = true;
            if self.slab[k].num_computed == self.slab[k].num_tokens() {
                self.h_land_whole(k);
            } else {
                self.h_land(k);
            }
            return self.note_load_wait(k);
        }
        let bs = self.cfg.block_size;
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("the CPU tier is paged")
        };
        let s = &mut self.slab[k];
        s.loaded = true;
        s.sync_output();
        let phantom = self.defer_keys.then_some(s.private_from);
        s.table
            .register_full_blocks_cached(pool, bs, &s.segs, &s.tier_keys, phantom);
        if s.num_computed == s.num_tokens() {
            s.num_computed -= 1;
            s.table.num_computed_tokens -= 1;
        }
        self.note_load_wait(k);
    }

    /// A hybrid decode replica's transfer of a whole prompt landed: its blocks keyed up to its tokens,
    /// then its last token left to compute again (vLLM's `_update_waiting_for_remote_kv`, in that order).
    fn h_land_whole(&mut self, k: usize) {
        self.h_cache_loaded(k);
        self.slab[k].num_computed -= 1;
    }

    /// A landed load's wait counted (`load_wait_ps`).
    fn note_load_wait(&mut self, k: usize) {
        let s = &self.slab[k];
        let wait = self.t - s.load_at;
        let row = s.row;
        self.out.counters.load_wait_ps += i128::from(wait);
        self.out.load_wait_ps[row - self.out_base] += wait;
    }
}
