//! The CPU tier in the engine (DESIGN.md §CPU tier; `kvsim.reference.engine.offload` is the executable
//! spec): the waiting phase with held requests and skips, a waiting request's hits continued into the
//! tier and its load's admission, a landed load's resumption, the stores a step offers, the transfers on
//! the host link and when the engine observes them, vLLM's flush, and the stall of an engine that waits
//! for nothing but transfers.

use std::collections::{HashMap, VecDeque};

use super::admission::{GpuHits, NEVER};
use super::config::TierConfig;
use super::timing::{Transfer, transfer_end, transfer_overflow_message};
use super::{Engine, MAX_TIME_PS, Memory, event, reject};
use crate::block_table::{BlockTable, blocks_for, div_bs};
use crate::cpu_tier::{CpuTier, MISS, PENDING};
use crate::hash::BlockKeys;
use crate::{BlockId, BlockKey};

/// Salt of the tier's names for private blocks (`ensure_tier_keys`): a row's, apart from content keys.
const PRIVATE_KEY_SALT: u64 = 0x7469_6572_5f70_7276;

/// A transfer on the host link: a load (CPU to GPU) or a store (GPU to CPU) of a request's chunks.
#[derive(Debug)]
pub(super) struct Job {
    id: u64,
    /// The request's slab slot and row (a finished request's slot may hold another row by the end).
    k: usize,
    row: usize,
    keys: Vec<BlockKey>,
    /// A store of one run of a row's private chunks: `(hi, lo, n)`, keys `(hi, lo..lo + n)` (`keys`
    /// then empty).
    run: Option<(u64, u64, u64)>,
    /// The GPU blocks it reads (a store; fenced once its request finished).
    blocks: Vec<BlockId>,
    /// When its last byte has moved (ps).
    end: i64,
    /// The first observation (numbered from 1) that may see it complete.
    avail: u64,
    /// A decode replica's transfer from the prefill pool (no tier chunks).
    remote: bool,
}

/// A request that finished in the step before: what its last stores need (it has left the slab).
#[derive(Debug)]
pub(super) struct Retired {
    row: usize,
    prompt_len: u64,
    num_tokens: u64,
    next_store: u64,
    keys: Vec<BlockKey>,
    blocks: Vec<BlockId>,
}

/// The engine's CPU tier and the transfers in flight.
pub(super) struct Tier {
    pub(super) cfg: TierConfig,
    pub(super) cpu: CpuTier,
    /// Tokens per chunk.
    tpc: u64,
    /// vLLM's `kv_holding_waiting`: requests holding blocks for a load, in order.
    pub(super) held: VecDeque<usize>,
    loads: Vec<Job>,
    stores: Vec<Job>,
    /// No transfer in flight ends before this (i64::MAX: none in flight): an observation before it
    /// sees nothing (`observe`'s fast path).
    min_end: i64,
    /// Chunks loads in flight read (vLLM's `_chunks_being_loaded`), with their counts.
    loading: HashMap<BlockKey, u32>,
    load_free: i64,
    store_free: i64,
    num_observed: u64,
    next_job: u64,
    pub(super) finished_last: Vec<Retired>,
    /// The last step scheduled nothing and changed nothing: the engine waits for a transfer or an
    /// arrival (`resolve_stall`).
    pub(super) stalled: bool,
    /// vLLM's flush: blocks read by stores of finished requests, with those stores' ids.
    fences: HashMap<BlockId, Vec<u64>>,
    /// Blocks this step allocated or took as hits.
    pub(super) touched: Vec<BlockId>,
    /// Requests preempted in this step (their stores in flight are flushed).
    pub(super) preempted_now: Vec<usize>,
    /// The waiting phase's held requests set aside in this pass (held all the same: reserved for).
    skipped_held: Vec<usize>,
    /// Scratch of a store's offer.
    offer: Vec<(BlockKey, u64)>,
    stored: Vec<BlockKey>,
    evicted: Vec<BlockKey>,
    /// A CPU tier (false: a decode replica's connector only, no chunks, no stores).
    has_cpu: bool,
    /// A decode replica's inbound link: (latency ps, ps per block), and when it is free again.
    pd_link: Option<(u64, u64)>,
    pd_free: i64,
    /// The steps' time since the tier's occupancy last changed, and whether a step was recorded in it
    /// (`tier_record`: the occupancy's weighted sum and peak take it when it changes or the run pauses).
    occ_dt: u128,
    occ_recorded: bool,
    /// A decode replica: (row, transfer end) of each remote request decided since the driver last
    /// took them (admitted with or without a transfer, or rejected): its prefill replica frees then.
    pub(super) sends_decided: Vec<(usize, i64)>,
    /// Vectors of stores seen complete, for later stores' keys and blocks.
    spare_keys: Vec<Vec<BlockKey>>,
    spare_blocks: Vec<Vec<BlockId>>,
}

impl Tier {
    /// A decode replica's connector (DESIGN.md §Prefill/decode disaggregation): the held queue and the
    /// transfers over its inbound link, no CPU tier.
    pub(super) fn connector(latency_ps: u64, ps_per_block: u64, block_size: u64) -> Self {
        let cfg = TierConfig {
            chunks: 0,
            eviction: crate::cpu_tier::Eviction::Lru,
            prompt_only: true,
            blocks_per_chunk: 1,
            store_threshold: 0,
            ps_per_block: 0,
            latency_ps: 0,
        };
        Tier {
            has_cpu: false,
            pd_link: Some((latency_ps, ps_per_block)),
            ..Tier::new(cfg, block_size)
        }
    }

    pub(super) fn new(cfg: TierConfig, block_size: u64) -> Self {
        Tier {
            has_cpu: true,
            pd_link: None,
            pd_free: 0,
            sends_decided: Vec::new(),
            cfg,
            cpu: CpuTier::new(cfg.chunks, cfg.eviction, cfg.store_threshold),
            tpc: block_size * cfg.blocks_per_chunk,
            held: VecDeque::new(),
            loads: Vec::new(),
            stores: Vec::new(),
            min_end: i64::MAX,
            loading: HashMap::new(),
            load_free: 0,
            store_free: 0,
            num_observed: 0,
            next_job: 0,
            finished_last: Vec::new(),
            stalled: false,
            fences: HashMap::new(),
            touched: Vec::new(),
            preempted_now: Vec::new(),
            skipped_held: Vec::new(),
            offer: Vec::new(),
            stored: Vec::new(),
            evicted: Vec::new(),
            spare_keys: Vec::new(),
            spare_blocks: Vec::new(),
            occ_dt: 0,
            occ_recorded: false,
        }
    }

    /// The keys just stored (`stored`, which takes a spare vector in their place).
    fn stored_keys(&mut self) -> Vec<BlockKey> {
        let spare = self.spare_keys.pop().unwrap_or_default();
        std::mem::replace(&mut self.stored, spare)
    }

    /// A store on the link from now.
    fn push_store(&mut self, job: Job) {
        self.min_end = self.min_end.min(job.end);
        self.stores.push(job);
    }

    fn fence(&mut self, id: u64, blocks: &[BlockId]) {
        for &b in blocks {
            self.fences.entry(b).or_default().push(id);
        }
    }

    fn unfence(&mut self, id: u64, blocks: &[BlockId]) {
        if self.fences.is_empty() {
            return; // (a prompt-only tier's usual case: nothing fenced)
        }
        for b in blocks {
            if let Some(ids) = self.fences.get_mut(b) {
                if let Some(p) = ids.iter().position(|&j| j == id) {
                    ids.remove(p);
                }
                if ids.is_empty() {
                    self.fences.remove(b);
                }
            }
        }
    }
}

/// `offer_one`'s offer to the tier of chunks `start..num_chunks` of a request of row `row` (its
/// hashed keys `keys`, its block table `table`): None when the tier has no room; else whether it
/// stored them all as one run of private chunks (`Tier::stored` then empty), how many it stored, and
/// their GPU blocks in order.
#[inline]
fn offer_to_tier(
    tier: &mut Tier,
    keys: &[BlockKey],
    table: &[BlockId],
    row: usize,
    start: u64,
    num_chunks: u64,
) -> Option<(bool, u64, Vec<BlockId>)> {
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
    let hi = private_hi(row);
    let whole = if private_run {
        cpu.prepare_store_run(
            row as u64,
            (hi, start, num_chunks - start),
            start,
            offer,
            stored,
            evicted,
        )
    } else {
        offer.clear();
        offer.extend((start..num_chunks).map(|c| (tier_key(keys, row, (c + 1) * bpc - 1), c)));
        cpu.prepare_store(row as u64, offer, stored, evicted)
            .map(|()| false)
    };
    let whole = whole?;
    // The blocks of the chunks stored (a subsequence of the offer), in order.
    let mut blocks = spare_blocks.pop().unwrap_or_default();
    let num_stored = if whole {
        let (first, last) = ((start * bpc) as usize, (num_chunks * bpc) as usize);
        blocks.extend_from_slice(&table[first..last]);
        num_chunks - start
    } else {
        blocks.reserve(stored.len() * bpc as usize);
        stored_blocks(offer, stored, table, bpc as usize, &mut blocks);
        stored.len() as u64
    };
    Some((whole, num_stored, blocks))
}

/// The upper half of row `row`'s private block keys (`ensure_tier_keys`).
#[inline]
fn private_hi(row: usize) -> u64 {
    crate::hash::mix64(row as u64 ^ PRIVATE_KEY_SALT)
}

/// The tier key of block `i` of a request of row `row` whose hashed keys are `hashed`: the hashed one,
/// or past them its private name (row, index) (`ensure_tier_keys` must cover `i`).
#[inline]
fn tier_key(hashed: &[BlockKey], row: usize, i: u64) -> BlockKey {
    match hashed.get(i as usize) {
        Some(&key) => key,
        None => BlockKey((u128::from(private_hi(row)) << 64) | u128::from(i)),
    }
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
    #[inline]
    fn tier_mut(&mut self) -> &mut Tier {
        self.tier.as_deref_mut().expect("a CPU tier")
    }

    /// Makes `k`'s tier keys cover its first `blocks` blocks (all full): `Seq::tier_keys` holds the
    /// hashed ones, `tier_key` names the rest.
    ///
    /// With deferred keys (no prompt quotes an output), a block holding content private to the sequence
    /// (from its `private_from` on: no other row's prompt has it) can only ever be looked up by the
    /// sequence itself, so it is named by the row and its index, not hashed: the same equalities as the
    /// content's keys, for less work; those names are not kept, only computed (`private_key`).
    #[inline]
    fn ensure_tier_keys(&mut self, k: usize, blocks: u64) {
        let s = &self.slab[k];
        let have = s.tier_keys.len() as u64;
        if have >= blocks
            || (self.defer_keys && have >= div_bs(s.private_from, self.cfg.block_size))
        {
            return; // (covered, or the rest private: named, not hashed)
        }
        self.hash_tier_keys(k, blocks);
    }

    /// `ensure_tier_keys`'s hashing.
    #[inline(never)]
    fn hash_tier_keys(&mut self, k: usize, blocks: u64) {
        let bs = self.cfg.block_size;
        let private = self.defer_keys;
        let s = &mut self.slab[k];
        let have = s.tier_keys.len() as u64;
        let hashed = if private {
            blocks.min(div_bs(s.private_from, bs)).max(have)
        } else {
            blocks
        };
        if hashed > have {
            s.sync_output();
            let last = s.tier_keys.last().copied();
            let keys = BlockKeys::new(&s.segs, bs, have, last, hashed - have);
            s.tier_keys.extend(keys);
        }
    }

    /// The key of `k`'s chunk `c` (its last block's; `ensure_tier_keys` must cover it).
    #[inline]
    fn chunk_key(&self, k: usize, c: u64) -> BlockKey {
        let bpc = self.cfg.tier.expect("a CPU tier").blocks_per_chunk;
        let s = &self.slab[k];
        tier_key(&s.tier_keys, s.row, (c + 1) * bpc - 1)
    }

    /// The waiting phase with a CPU tier (vLLM's waiting loop): held requests first, then the waiting
    /// queue; a request that cannot be decided now is skipped and put back at the head of its queue, in
    /// order, after the pass; a load admitted joins the held ones.
    #[inline(never)]
    pub(super) fn tier_admit_waiting(&mut self, mut budget: u64) {
        let cfg = self.cfg;
        let mut skipped_waiting: Vec<usize> = Vec::new();
        while budget > 0 {
            let from_held = !self.tier_mut().held.is_empty();
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
            let num_new = if from_held {
                if !self.slab[k].loaded {
                    let tier = self.tier_mut();
                    tier.held.pop_front();
                    tier.skipped_held.push(k);
                    continue;
                }
                self.try_resume_loaded(k, budget)
            } else {
                match self.tier_lookup(k) {
                    Found::Skip => {
                        self.waiting.pop_front();
                        skipped_waiting.push(k);
                        continue;
                    }
                    Found::Hits {
                        last_key,
                        local,
                        ext,
                    } if ext > 0 => {
                        if self.admit_transfer(k, last_key, local, ext) {
                            self.waiting.pop_front();
                            self.tier_mut().skipped_held.push(k);
                            continue;
                        }
                        0
                    }
                    Found::Hits { last_key: l, .. } => {
                        self.try_admit_after(k, budget, GpuHits::Taken(l))
                    }
                }
            };
            if num_new == NEVER {
                if from_held {
                    self.tier_mut().held.pop_front();
                    self.release(k);
                    let row = self.slab[k].row;
                    self.tier_mut().cpu.finish(row as u64);
                } else {
                    self.waiting.pop_front();
                }
                self.reject_seq(k, reject::EXCEEDS_STEP_BUDGET);
                continue;
            }
            if num_new == 0 {
                let tier = self.tier_ref();
                if self.running.is_empty() && tier.held.is_empty() && tier.skipped_held.is_empty() {
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
            self.note_remote_admitted(k);
            let s = &mut self.slab[k];
            s.held = false;
            s.remote = false; // one transfer per request (vLLM clears `do_remote_prefill` once allocated)
            s.prefilling = s.num_computed < s.num_tokens();
            s.adm_no = self.next_adm;
            self.running.push(k);
            self.scheduled.push((k, num_new));
            budget -= num_new;
            self.next_adm += super::ADM_STRIDE;
            let row = self.slab[k].row;
            if self.out.first_scheduled[row - self.out_base] < 0 {
                self.out.first_scheduled[row - self.out_base] = self.t;
            }
            let tier = self.tier.as_deref_mut().expect("a CPU tier");
            tier.touched.extend_from_slice(self.slab[k].table.blocks());
            if self.cancelled() {
                break;
            }
        }
        let tier = self.tier_mut();
        while let Some(k) = tier.skipped_held.pop() {
            tier.held.push_front(k);
        }
        for &k in skipped_waiting.iter().rev() {
            self.waiting.push_front(k);
        }
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
        self.ensure_tier_keys(k, num_chunks * bpc);
        let start = local / tpc;
        let mut count = 0;
        let mut pending = false;
        for c in start..num_chunks {
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

    /// When a transfer on a link ends (`transfer_end`); one that would end past the clock's range
    /// stops the run after this step with its error (`overflow`), and never ends (`i64::MAX`).
    #[inline]
    fn transfer_end_or_overflow(
        &mut self,
        what: Transfer,
        start: i64,
        latency: u64,
        blocks: u64,
        per_block: u64,
    ) -> i64 {
        transfer_end(start, latency, blocks, per_block).unwrap_or_else(|| {
            self.overflow(transfer_overflow_message(what, blocks, start));
            i64::MAX
        })
    }

    #[inline]
    fn tier_ref(&self) -> &Tier {
        self.tier.as_deref().expect("a CPU tier")
    }

    /// Blocks the requests still prefilling (running or held) need to finish their prompts (vLLM's
    /// `_inflight_prefill_reserved_blocks`).
    fn inflight_reserved(&self) -> u64 {
        let (bs, mml) = (self.cfg.block_size, self.cfg.max_model_len);
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
                out += blocks_for(tokens, bs).saturating_sub(s.table.blocks().len() as u64);
            }
        }
        out
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
        let full = cfg.max_model_len.map_or(total, |m| total.min(m));
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
        {
            let tier = self.tier.as_deref_mut().expect("a CPU tier or a connector");
            tier.touched.extend_from_slice(&self.hits);
            tier.touched.extend_from_slice(&self.new_blocks);
        }
        if self.log.is_some() {
            self.log(event::ADMIT, row, -1);
            for i in 0..self.hits.len() {
                let b = i64::from(self.hits[i].0);
                self.log(event::PREFIX_HIT, row, b);
            }
            self.log_allocations(row, event::ALLOCATE);
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
        let Some((row, end, total)) = self.hold_for_transfer(k, last_key, local, ext) else {
            return false;
        };
        let bs = self.cfg.block_size;
        let t = self.t;
        let blocks = end / bs - local / bs;
        let tier = self.tier_ref();
        let (latency, per_block) = tier.pd_link.expect("a decode replica's link");
        let start = t.max(tier.pd_free);
        let link_end =
            self.transfer_end_or_overflow(Transfer::Remote, start, latency, blocks, per_block);
        let duration = latency.saturating_add(blocks.saturating_mul(per_block));
        let tier = self.tier.as_deref_mut().expect("a connector");
        tier.pd_free = link_end;
        tier.sends_decided.push((row, tier.pd_free));
        tier.next_job += 1;
        let job = Job {
            id: tier.next_job,
            k,
            row,
            keys: Vec::new(),
            run: None,
            blocks: self.new_blocks.clone(),
            end: tier.pd_free,
            avail: tier.num_observed + 1,
            remote: true,
        };
        tier.min_end = tier.min_end.min(job.end);
        tier.loads.push(job);
        let s = &mut self.slab[k];
        s.jobs += 1;
        s.held = true;
        s.prefilling = true;
        s.loaded = false;
        s.remote = false;
        s.load_at = t;
        s.num_computed = end;
        let c = &mut self.out.counters;
        c.pd_transfers += 1;
        c.pd_transfer_blocks += i128::from(blocks);
        c.pd_link_busy_ps += i128::from(duration);
        self.note_admission(k, local, total, 0);
        true
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
        tier.cpu.prepare_load(row as u64, &keys);
        for &(key, _) in &keys {
            *tier.loading.entry(key).or_insert(0) += 1;
        }
        tier.load_free = link_end;
        tier.next_job += 1;
        let job = Job {
            id: tier.next_job,
            k,
            row,
            keys: keys.iter().map(|&(key, _)| key).collect(),
            run: None,
            blocks: self.new_blocks.clone(),
            end: tier.load_free,
            avail: tier.num_observed + 1,
            remote: false,
        };
        tier.min_end = tier.min_end.min(job.end);
        tier.loads.push(job);
        let s = &mut self.slab[k];
        s.jobs += 1;
        s.held = true;
        s.prefilling = true;
        s.loaded = false;
        s.load_at = t;
        s.num_computed = end;
        s.next_store = num_chunks; // vLLM's chunk-level policy: stores resume after the loaded chunks
        let c = &mut self.out.counters;
        c.num_loads += 1;
        c.loaded_blocks += i128::from(blocks);
        keys.len()
    }

    /// A held request whose load has landed, admitted as a resumed one: its next chunk allocated after
    /// the full-prompt gate and the watermark; the tokens it computes, 0 if it cannot start now, or
    /// `NEVER`.
    fn try_resume_loaded(&mut self, k: usize, budget: u64) -> u64 {
        let cfg = self.cfg;
        let bs = cfg.block_size;
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
            unreachable!("the CPU tier is paged")
        };
        let s = &mut self.slab[k];
        let table = s.table.blocks().len() as u64;
        let free = u64::from(pool.num_free_blocks());
        let full = cfg.max_model_len.map_or(total, |m| total.min(m));
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

    /// A held request's load is observed complete: its blocks take their keys; a load of the whole
    /// prompt leaves its last token to compute (vLLM's `_update_waiting_for_remote_kv`).
    fn land(&mut self, k: usize) {
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
        let wait = self.t - s.load_at;
        let row = s.row;
        self.out.counters.load_wait_ps += i128::from(wait);
        self.out.load_wait_ps[row - self.out_base] += wait;
    }

    /// Step part 4 (vLLM's `build_connector_meta`): the full chunks each scheduled request has computed
    /// after this step and each request finished in the step before has, prompt tokens only by default,
    /// offered to the tier from the first not offered yet; a store starts when the step ends. Then the
    /// finished ones are done with the tier. A store this step must wait for (a preempted request's, or
    /// one reading a block this step allocated: vLLM's flush) is seen at this step's end. Returns
    /// whether a store was planned and when the last store the step waits for ends (0 if none).
    pub(super) fn offer_stores(&mut self, step_end: i64) -> (bool, i64) {
        if self.nothing_to_offer() {
            self.tier_mut().touched.clear();
            return (false, 0);
        }
        self.offer_stores_now(step_end)
    }

    /// Most steps: nobody to offer for, nothing to flush (`offer_stores` returns at once).
    #[inline]
    fn nothing_to_offer(&self) -> bool {
        let tier = self.tier_ref();
        self.scheduled.is_empty()
            && tier.preempted_now.is_empty()
            && tier.finished_last.is_empty()
            && tier.fences.is_empty()
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
            tier.touched.clear();
            self.tier = Some(tier);
            return (false, 0);
        }
        let observation = tier.num_observed + 1;
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
        let mut planned = false;
        let mut finished = std::mem::take(&mut tier.finished_last);
        for i in 0..self.scheduled.len() {
            let k = self.scheduled[i].0;
            planned |= self.offer_one(&mut tier, Some(k), None, step_end, &mut flushed);
        }
        for r in &finished {
            planned |= self.offer_one(&mut tier, None, Some(r), step_end, &mut flushed);
        }
        for r in &finished {
            tier.cpu.finish(r.row as u64);
        }
        finished.clear();
        tier.finished_last = finished; // (its buffer kept)
        tier.touched.clear();
        self.out.counters.stores_skipped = i128::from(tier.cpu.num_stores_skipped());
        let mut flush_end = 0;
        let mut seen: Vec<u64> = Vec::new();
        for id in flushed {
            if seen.contains(&id) {
                continue;
            }
            seen.push(id);
            if let Some(job) = tier.stores.iter_mut().find(|j| j.id == id) {
                job.avail = job.avail.min(observation);
                self.out.counters.num_flushes += 1;
                flush_end = flush_end.max(job.end);
            }
        }
        self.tier = Some(tier);
        (planned, flush_end)
    }

    /// One request's offer (`offer_stores`): scheduled `k`, or `retired` (finished in the step before).
    /// Returns whether it planned a store.
    fn offer_one(
        &mut self,
        tier: &mut Tier,
        k: Option<usize>,
        retired: Option<&Retired>,
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
        let (keys, table): (&[BlockKey], &[BlockId]) = match (k, retired) {
            (Some(k), _) => (&self.slab[k].tier_keys, self.slab[k].table.blocks()),
            (_, Some(r)) => (&r.keys, &r.blocks),
            _ => unreachable!(),
        };
        let Some((whole, num_stored, blocks)) =
            offer_to_tier(tier, keys, table, row, start, num_chunks)
        else {
            self.out.counters.stores_failed += 1;
            return false;
        };
        let num_evicted = tier.evicted.len();
        self.out.counters.cpu_evictions += num_evicted as i128;
        for _ in 0..num_evicted {
            self.log(event::CPU_EVICT, row, -1);
        }
        if let Some(k) = k {
            self.slab[k].next_store = num_chunks;
        }
        if num_stored == 0 {
            tier.spare_blocks.push(blocks); // (empty)
            return false;
        }
        let begin = step_end.max(tier.store_free);
        let (latency, per_block, n) = (tier.cfg.latency_ps, tier.cfg.ps_per_block, blocks.len());
        tier.store_free =
            self.transfer_end_or_overflow(Transfer::Store, begin, latency, n as u64, per_block);
        tier.next_job += 1;
        let id = tier.next_job;
        self.out.counters.num_stores += 1;
        self.out.counters.stored_blocks += blocks.len() as i128;
        self.log_count(event::STORE, row, -1, num_stored as i64);
        if let Some(k) = k {
            self.slab[k].jobs += 1;
        } else {
            tier.fence(id, &blocks);
            if blocks.iter().any(|b| tier.touched.contains(b)) {
                flushed.push(id);
            }
        }
        let (keys, run) = if whole {
            (Vec::new(), Some((private_hi(row), start, num_stored)))
        } else {
            (tier.stored_keys(), None)
        };
        tier.push_store(Job {
            id,
            k: k.unwrap_or(usize::MAX),
            row,
            keys,
            run,
            blocks,
            end: tier.store_free,
            avail: tier.num_observed + 2,
            remote: false,
        });
        true
    }

    /// A request finishes (its blocks are about to be freed): the stores it has in flight fence the
    /// blocks they read, and what its last stores need is kept for the next step.
    #[inline(never)]
    pub(super) fn tier_finished(&mut self, k: usize) {
        if !self.tier_ref().has_cpu {
            return;
        }
        let offers = self.tier_keys_for_finish(k);
        let s = &self.slab[k];
        // Its keys and blocks only if its last offer has chunks to offer (`offer_one` reads them then).
        let (keys, blocks) = if offers {
            (s.tier_keys.clone(), s.table.blocks().to_vec())
        } else {
            (Vec::new(), Vec::new())
        };
        let retired = Retired {
            row: s.row,
            prompt_len: s.prompt_len,
            num_tokens: s.num_tokens(),
            next_store: s.next_store,
            keys,
            blocks,
        };
        let row = s.row;
        let tier = self.tier_mut();
        let jobs: Vec<(u64, Vec<BlockId>)> = tier
            .stores
            .iter()
            .filter(|j| j.row == row)
            .map(|j| (j.id, j.blocks.clone()))
            .collect();
        for (id, blocks) in jobs {
            tier.fence(id, &blocks);
        }
        tier.finished_last.push(retired);
    }

    /// The keys a finished request's last stores need: its chunks up to its offloadable tokens. Returns
    /// whether it has chunks left to offer.
    fn tier_keys_for_finish(&mut self, k: usize) -> bool {
        let tier = self.tier_ref();
        let (tpc, bpc, prompt_only) = (tier.tpc, tier.cfg.blocks_per_chunk, tier.cfg.prompt_only);
        let s = &self.slab[k];
        let tokens = s.num_tokens();
        let mut n = s.prompt_len.max(tokens - 1).min(tokens);
        if prompt_only {
            n = n.min(s.prompt_len);
        }
        let num_chunks = n / tpc;
        if num_chunks > s.next_store {
            self.ensure_tier_keys(k, num_chunks * bpc);
            return true;
        }
        false
    }

    /// An observation point at `t` (a step's end, an idle jump, a stall's end): every transfer that has
    /// ended and that this observation may see completes. Returns whether one did.
    #[inline]
    pub(super) fn observe(&mut self) -> bool {
        let t = self.t;
        let tier = self.tier_mut();
        tier.num_observed += 1;
        if t < tier.min_end {
            return false; // (nothing in flight has ended: most observations)
        }
        self.observe_now()
    }

    /// `observe` when a transfer in flight may have ended.
    #[inline(never)]
    fn observe_now(&mut self) -> bool {
        let mut tier = self.tier.take().expect("a CPU tier");
        let (t, now) = (self.t, tier.num_observed);
        let mut seen = false;
        let done = |j: &Job| j.end <= t && j.avail <= now;
        if tier.loads.iter().any(done) {
            let loads = std::mem::take(&mut tier.loads);
            for job in loads {
                if !done(&job) {
                    tier.loads.push(job);
                    continue;
                }
                if job.remote {
                    self.slab[job.k].jobs -= 1;
                    self.land(job.k);
                    continue;
                }
                tier.cpu.complete_load(&job.keys);
                for key in &job.keys {
                    if let Some(n) = tier.loading.get_mut(key) {
                        *n -= 1;
                        if *n == 0 {
                            tier.loading.remove(key);
                        }
                    }
                }
                self.slab[job.k].jobs -= 1;
                self.land(job.k);
                self.log_count(event::LOAD_DONE, job.row, -1, job.keys.len() as i64);
            }
            seen = true;
        }
        if tier.stores.iter().any(done) {
            let mut i = 0;
            while i < tier.stores.len() {
                if !done(&tier.stores[i]) {
                    i += 1;
                    continue;
                }
                let Job {
                    id,
                    k,
                    row,
                    mut keys,
                    run,
                    mut blocks,
                    ..
                } = tier.stores.remove(i);
                let n = if let Some((hi, lo, n)) = run {
                    tier.cpu.complete_store_run(hi, lo, n);
                    n
                } else {
                    tier.cpu.complete_store(&keys);
                    keys.len() as u64
                };
                tier.unfence(id, &blocks);
                if k != usize::MAX && self.slab[k].row == row {
                    self.slab[k].jobs -= 1;
                }
                self.log_count(event::STORE_DONE, row, -1, n as i64);
                // Its vectors serve a later store (`offer_one`).
                keys.clear();
                blocks.clear();
                tier.spare_keys.push(keys);
                tier.spare_blocks.push(blocks);
            }
            seen = true;
        }
        tier.min_end = tier
            .loads
            .iter()
            .chain(&tier.stores)
            .map(|j| j.end)
            .min()
            .unwrap_or(i64::MAX);
        self.tier = Some(tier);
        seen
    }

    /// When the earliest transfer in flight ends (not before now), None if none is.
    pub(super) fn next_transfer(&self) -> Option<i64> {
        let tier = self.tier_ref();
        tier.loads
            .iter()
            .chain(tier.stores.iter())
            .map(|j| j.end)
            .min()
            .map(|e| e.max(self.t))
    }

    /// A step that scheduled nothing: the finished requests' stores are offered now, then the engine
    /// observes; returns whether anything changed.
    #[inline(never)]
    pub(super) fn tier_empty_step(&mut self) -> bool {
        self.scheduled.clear(); // (an idle engine's last step's batch may still be there)
        let (planned, flush_end) = self.offer_stores(self.t);
        self.t = self.t.max(flush_end);
        self.observe() || planned
    }

    /// A stalled engine jumps to the earliest end of a transfer or `arrival` (the next row's), if before
    /// `limit`, and observes there: `Ok(true)`; `Ok(false)` if it must wait for the caller; an error if
    /// nothing can ever happen.
    #[inline(never)]
    pub(super) fn resolve_stall(
        &mut self,
        arrival: Option<i64>,
        limit: i64,
    ) -> crate::Result<bool> {
        let target = match (self.next_transfer(), arrival) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(x) => x,
                None => {
                    return Err(crate::KvError::Internal(format!(
                        "no progress at time {} ps",
                        self.t
                    )));
                }
            },
        };
        if target >= limit {
            return Ok(false);
        }
        self.t = target;
        self.tier_mut().stalled = false;
        self.observe();
        Ok(true)
    }

    /// Decode steps leave the tier to the scheduled and finished requests: prompt tokens only, every
    /// running request's prompt offered (its decode steps offer nothing), and no store fencing blocks (a
    /// step's allocations must be watched for them: §CPU tier, flush). Lockstep mode may then run
    /// (lockstep.rs): its admissions, loads, stores and transfers are the full step's, as lockstep
    /// steps schedule, offer (`tier_step_stores`) and observe as full ones do.
    #[inline(never)]
    pub(super) fn tier_quiet(&self) -> bool {
        let tier = self.tier_ref();
        if !tier.has_cpu {
            return true;
        }
        if !(tier.cfg.prompt_only && tier.fences.is_empty()) {
            return false;
        }
        self.running.iter().all(|&k| {
            let s = &self.slab[k];
            s.next_store >= s.prompt_len / tier.tpc
        })
    }

    /// A step's tier work after scheduling, its duration `dt` so far: the scheduled requests still
    /// prefilling, the stores offered (from the step's end) and the flush; returns the step's duration.
    #[inline]
    pub(super) fn tier_step_stores(&mut self, dt: u64) -> u64 {
        if self.nothing_to_offer() {
            self.tier_mut().touched.clear();
            return dt;
        }
        self.tier_step_stores_now(dt)
    }

    #[inline(never)]
    fn tier_step_stores_now(&mut self, dt: u64) -> u64 {
        for i in 0..self.scheduled.len() {
            let s = &mut self.slab[self.scheduled[i].0];
            s.prefilling = s.prefilling && s.num_computed < s.num_tokens();
        }
        // A step ending past the clock's range offers nothing: `record` stops the run with its error
        // (the reference raises it before its offers).
        let step_end = match i64::try_from(dt) {
            Ok(dt) if self.t.saturating_add(dt) <= MAX_TIME_PS as i64 => self.t + dt,
            _ => return dt,
        };
        let (_, flush_end) = self.offer_stores(step_end);
        dt.max(flush_end.saturating_sub(self.t).max(0) as u64)
    }

    /// `tier_quiet` after a lockstep step that was: only the step's admissions can have changed it
    /// (the decoding requests offer nothing), so only they are looked at.
    #[inline]
    pub(super) fn tier_stays_quiet(&self) -> bool {
        let tier = self.tier_ref();
        !tier.has_cpu
            || tier.fences.is_empty() && (self.scheduled.is_empty() || self.admissions_quiet())
    }

    /// `tier_stays_quiet`'s look at the step's admissions.
    #[inline(never)]
    fn admissions_quiet(&self) -> bool {
        let tier = self.tier_ref();
        self.scheduled.iter().all(|&(k, _)| {
            let s = &self.slab[k];
            s.next_store >= s.prompt_len / tier.tpc
        })
    }

    /// What a step that schedules nothing may have changed before: loads admitted, rejections,
    /// preemptions (`tier_scheduled_nothing` compares). Their sum: each only grows, so the sum is
    /// unchanged exactly when all three are.
    #[inline]
    pub(super) fn progress_marks(&self) -> u64 {
        let c = &self.out.counters;
        ((c.num_loads + c.pd_transfers + c.num_preemptions) as u64).wrapping_add(self.num_rejected)
    }

    /// A step that scheduled nothing, with a CPU tier (a full step's or a lockstep step's): it offers
    /// the stores of requests finished before and observes; if nothing changed since `before`
    /// (`progress_marks`), the engine stalls until a transfer ends or a request arrives
    /// (`resolve_stall`). Returns true: the step counts as progress (a stall resolves it).
    #[inline(never)]
    pub(super) fn tier_scheduled_nothing(&mut self, before: u64) -> bool {
        let changed = self.tier_empty_step() || self.progress_marks() != before;
        self.tier_mut().stalled = !changed;
        true
    }

    /// The tier's occupancy during a step of `dt` (taken into the counters by `flush_occupancy`).
    #[inline]
    pub(super) fn tier_record(&mut self, dt: u64) {
        let tier = self.tier_mut();
        tier.occ_dt += u128::from(dt);
        tier.occ_recorded = true;
    }

    /// The occupancy's weighted sum and peak take the steps recorded since it last changed; called
    /// before it changes (a store's offer) and when the run pauses.
    pub(super) fn flush_occupancy(&mut self) {
        let Some(tier) = self.tier.as_deref_mut() else {
            return;
        };
        if !tier.occ_recorded {
            return;
        }
        let used = tier.cpu.used();
        let c = &mut self.out.counters;
        c.w_cpu_chunks += (tier.occ_dt * u128::from(used)) as i128;
        c.peak_cpu_chunks = c.peak_cpu_chunks.max(i128::from(used));
        tier.occ_dt = 0;
        tier.occ_recorded = false;
    }
}
