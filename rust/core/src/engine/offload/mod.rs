//! The CPU tier in the engine (DESIGN.md §CPU tier; `kvsim.reference.engine.offload` is the executable
//! spec): the waiting phase with held requests and skips, a waiting request's hits continued into the
//! tier and its load's admission, a landed load's resumption, the stores a step offers, the transfers on
//! the host link and when the engine observes them, vLLM's flush, and the stall of an engine that waits
//! for nothing but transfers.
//!
//! This file holds the tier's state (`Tier`, its transfers `Job`, a finished request's
//! `LastOffer`; what every step reads of it, `TierHot`, kept in the engine), the tier's keys and
//! request ids and the helpers its parts share; `waiting.rs` the waiting phase and the loads (and a
//! decode replica's transfers), `stores.rs` the stores and a finished request's last ones,
//! `observe.rs` the observations, the stall and the quiet, progress and occupancy helpers.

mod async_tier;
mod hybrid;
mod livelock;
mod observe;
mod stores;
mod waiting;

use std::collections::{HashMap, VecDeque};

use super::Engine;
use super::config::TierConfig;
use super::timing::{Transfer, transfer_end, transfer_overflow_message};
use crate::block_table::div_bs;
use crate::cpu_tier::CpuTier;
use crate::hash::BlockKeys;
use crate::{BlockId, BlockKey};

/// A transfer on the host link: a load (CPU to GPU) or a store (GPU to CPU) of a request's chunks.
#[derive(Debug)]
pub(super) struct Job {
    id: u64,
    /// The request's slab slot and row (a finished request's slot may hold another row by the end).
    k: usize,
    row: usize,
    /// When its last byte has moved (ps).
    end: i64,
    /// The first observation (numbered from 1) that may see it complete.
    avail: u64,
    /// The GPU blocks it moves.
    blocks: u64,
    /// Their time on the link, its latency aside (a flushing step times it again: `flush_step`): each
    /// block at `ps_per_block`, a hybrid model's each at its group's (`TierConfig::group_link`).
    link_ps: u64,
    what: What,
}

/// What a transfer moves (`Job`).
#[derive(Debug)]
pub(super) enum What {
    /// A running request's store of a run of its private chunks, one block a chunk: keys
    /// `(hi, lo..lo + n)` (`hi` = `private_hi(row)`), read from blocks `lo..lo + n` of its block table (the usual
    /// store; made `Stored`, its blocks listed, if its request finishes while it is in flight:
    /// `tier_finished`).
    Run { hi: u64, lo: u64, n: u64 },
    /// `Run`'s store kept as the request's own run in the tier, handle `h` (`CpuTier::store_own`).
    Own { h: u32, lo: u64, n: u64 },
    /// Any other store.
    Stored(Box<Stored>),
    /// A load of the tier's chunks `keys` (CPU to GPU).
    Load(Vec<BlockKey>),
    /// A decode replica's transfer from the prefill pool (no tier chunks).
    Remote,
}

/// A store other than a running request's run (`What::Stored`).
#[derive(Debug, Default)]
pub(super) struct Stored {
    keys: Vec<BlockKey>,
    /// A store of one run of a row's private chunks: `(hi, lo, n)`, keys `(hi, lo..lo + n)` (`keys`
    /// then empty).
    run: Option<(u64, u64, u64)>,
    /// The GPU blocks it reads (fenced once its request finished): listed, or (a running request's
    /// store of chunks in a row) `table`, a range of its block table (`blocks` then empty), listed
    /// when its request finishes (`tier_finished`) while it is in flight.
    blocks: Vec<BlockId>,
    table: Option<(usize, usize)>,
    /// A hybrid model's store: how many of `blocks`, from the first, are its window groups' (fenced from
    /// its creation; the rest once its request finished). `blocks` lists them first.
    windowed: usize,
}

/// What the last stores of a request finished in the step before need (it has left the slab), if it
/// has chunks left to offer (`tier_keys_for_finish`; else only its row is kept, `Tier::finished_last`).
#[derive(Debug)]
pub(super) struct LastOffer {
    row: usize,
    prompt_len: u64,
    num_tokens: u64,
    next_store: u64,
    keys: Vec<BlockKey>,
    blocks: Vec<BlockId>,
}

/// The tier's state every step reads (`Engine::tier_hot`, beside the engine's own: a step's tests of
/// it load no pointer).
#[derive(Clone, Copy, Debug)]
#[allow(clippy::struct_excessive_bools)] // independent flags the step loop reads, kept together
pub(super) struct TierHot {
    /// No transfer in flight ends before this (i64::MAX: none in flight): an observation before it
    /// sees nothing (`observe`'s fast path).
    pub(super) min_end: i64,
    /// Observations so far (numbered from 1: a transfer's `avail` names the first that may see it).
    pub(super) observed: u64,
    /// Something for the next offer besides the scheduled requests: a request preempted or finished,
    /// or a block fenced (set as they come; cleared by the offer, kept while fences remain).
    pub(super) pending: bool,
    /// The last step scheduled nothing and changed nothing: the engine waits for a transfer or an
    /// arrival (`resolve_stall`).
    pub(super) stalled: bool,
    /// No request is held for a load (`Tier::held` empty, as the waiting phase left it; true without
    /// a tier): `nothing_waits` reads it.
    pub(super) held_empty: bool,
    /// After the last offer, every request it offered for had offered its whole prompt (prompt-only
    /// tiers: nothing left to store; `tier_stays_quiet` reads it for the step's admissions).
    pub(super) offered_all: bool,
}

impl Default for TierHot {
    fn default() -> Self {
        TierHot {
            min_end: i64::MAX,
            observed: 0,
            pending: false,
            stalled: false,
            held_empty: true,
            offered_all: false,
        }
    }
}

/// The engine's CPU tier and the transfers in flight.
///
/// Laid out by hand (`repr(C)`, 64-byte aligned; the assertions after it check the offsets): what the
/// usual request's store, observation, retirement and finish read sits in lines 0-5, `CpuTier`'s own
/// hot fields in the four lines after them, so that those paths touch a few of the tier's 32 lines,
/// not one here and one there (results/README.md §CPU tier, "The tier's hot fields together").
#[repr(C, align(64))]
pub(super) struct Tier {
    // -- line 0: the store and the observation.
    stores: Vec<Job>,
    loads: Vec<Job>,
    store_free: i64,
    next_job: u64,
    /// Requests finished in the step before, in order: their rows and own runs' handles (0: none), and
    /// the last offers of those with chunks left to offer, in the same order (`LastOffer`).
    // -- line 1: the retirement and the finish; the chunk arithmetic.
    pub(super) finished_last: Vec<(usize, u32)>,
    last_offers: Vec<LastOffer>,
    /// Tokens per chunk, and its base-2 logarithm if it is a power of two (`per_chunk`).
    tpc: u64,
    tpc_log2: Option<u32>,
    // -- line 2: the store's occupancy and touched blocks.
    /// The counters' busy time and steps when the tier's occupancy was last taken into them
    /// (`flush_occupancy`: the weighted sum and peak take the steps since then when it changes or the
    /// run pauses; a step does nothing for it).
    occ_busy: i128,
    occ_steps: i128,
    /// Blocks this step allocated or took as hits.
    pub(super) touched: Vec<BlockId>,
    /// A CPU tier (false: a decode replica's connector only, no chunks, no stores).
    has_cpu: bool,
    // -- line 3: the finish's and the admission's tests (`finishes_only`, `may_fence`: the fences'
    // count is their 24th byte).
    /// Requests preempted in this step (their stores in flight are flushed).
    pub(super) preempted_now: Vec<usize>,
    /// vLLM's flush: blocks read by stores of finished requests, with those stores' ids.
    pub(super) fences: HashMap<BlockId, Vec<u64>>,
    /// A hybrid model's requests finished in the step before, with what their last offers read
    /// (`hybrid/`).
    h_last: Vec<hybrid::HLast>,
    // -- line 5: the knobs the store reads (`TierConfig`'s chunk size, link and prompt-only flag).
    pub(super) cfg: TierConfig,
    /// (ARC's evictions list their keys here; LRU's are only counted: `count_evictions_only`)
    evicted: Vec<BlockKey>,
    // -- lines 6-9: `CpuTier`'s hot fields; cold from here on.
    pub(super) cpu: CpuTier,
    /// vLLM's `kv_holding_waiting`: requests holding blocks for a load, in order.
    pub(super) held: VecDeque<usize>,
    /// `observe_now`'s second vector of stores (empty between calls).
    stores_spare: Vec<Job>,
    /// Chunks loads in flight read (vLLM's `_chunks_being_loaded`), with their counts.
    loading: HashMap<BlockKey, u32>,
    load_free: i64,
    /// The waiting phase's held requests set aside in this pass (held all the same: reserved for).
    skipped_held: Vec<usize>,
    /// Scratch of a store's offer.
    offer: Vec<(BlockKey, u64)>,
    stored: Vec<BlockKey>,
    /// A decode replica's inbound link: (latency ps, ps per block), and when it is free again.
    pd_link: Option<(u64, u64)>,
    pd_free: i64,
    /// A decode replica: (row, transfer end) of each remote request decided since the driver last
    /// took them (admitted with or without a transfer, or rejected): its prefill replica frees then.
    pub(super) sends_decided: Vec<(usize, i64)>,
    /// Vectors of stores seen complete, for later stores' keys and blocks.
    spare_keys: Vec<Vec<BlockKey>>,
    spare_blocks: Vec<Vec<BlockId>>,
    /// Scratch of the step's state hand-offs (`hybrid/`'s `h_offer_states`).
    h_states: Vec<(usize, crate::kv_groups::StateKeyed)>,
    /// A hybrid pool's livelock watch (`livelock.rs`).
    pub(super) watch: livelock::Watch,
    /// `async_scheduling`'s batch queue (`async_tier.rs`).
    pub(super) batches: async_tier::Batches,
}

// The layout the usual paths rely on (`Tier`'s comment).
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(Tier, has_cpu) < 192 && offset_of!(Tier, preempted_now) == 192);
    assert!(offset_of!(Tier, fences) + 32 <= 256);
    assert!(
        offset_of!(Tier, cfg.blocks_per_chunk) / 64 == 5
            && offset_of!(Tier, cfg.prompt_only) / 64 == 5
    );
    assert!(
        offset_of!(Tier, cfg.ps_per_block) / 64 == 5 && offset_of!(Tier, cfg.latency_ps) / 64 == 5
    );
    assert!(offset_of!(Tier, cpu) == 384);
};

impl Tier {
    /// Requests finished in the step before wait for this step's offer (their last stores, their
    /// finish in the tier).
    #[inline]
    pub(in crate::engine) fn has_finished_last(&self) -> bool {
        !self.finished_last.is_empty() || !self.h_last.is_empty()
    }

    /// Nothing pending for the next offer but the requests finished in the step before, none with a
    /// chunk left to offer: no request preempted, no block fenced (`finish_retired`, and after the
    /// scheduled requests' offers `offer_scheduled_then_finish`).
    #[inline]
    pub(in crate::engine) fn finishes_only(&self) -> bool {
        self.preempted_now.is_empty() && self.fences.is_empty() && self.last_offers.is_empty()
    }

    /// Whether this step's offer may make a store that reads blocks the step allocates (vLLM's flush):
    /// a fence stands (a finished request's stores in flight) or a finished request has chunks left to
    /// offer (its last stores read its blocks). The step's new blocks are watched then.
    #[inline]
    pub(in crate::engine) fn may_fence(&self) -> bool {
        !self.fences.is_empty() || !self.last_offers.is_empty()
    }

    /// vLLM 0.34.0's junction from the tier's hits (`kv_offloading_hit_junction`; never on for a decode
    /// replica's connector): a hybrid admission's `admit` row carries the request's junction.
    #[inline]
    pub(in crate::engine) fn hit_junction(&self) -> bool {
        self.cfg.hit_junction
    }

    /// A decode replica's connector (DESIGN.md §Prefill/decode disaggregation): the held queue and the
    /// transfers over its inbound link, no CPU tier.
    pub(super) fn connector(latency_ps: u64, ps_per_block: u64, block_size: u64) -> Self {
        let cfg = TierConfig {
            chunks: 0,
            eviction: crate::cpu_tier::Eviction::Lru,
            prompt_only: true,
            blocks_per_chunk: 1,
            store_threshold: 0,
            store_count_per_request: false,
            hit_junction: false,
            ps_per_block: 0,
            latency_ps: 0,
            group_link: Vec::new(),
        };
        Tier {
            has_cpu: false,
            pd_link: Some((latency_ps, ps_per_block)),
            ..Tier::new(cfg, block_size)
        }
    }

    /// The engine's CPU tier (`EngineConfig::tier`), None without one.
    pub(super) fn of(cfg: &super::EngineConfig) -> Option<Box<Self>> {
        let tier = cfg.tier.clone()?;
        Some(Box::new(Tier::new(tier, cfg.block_size)))
    }

    pub(super) fn new(cfg: TierConfig, block_size: u64) -> Self {
        Tier {
            has_cpu: true,
            pd_link: None,
            pd_free: 0,
            sends_decided: Vec::new(),
            cpu: {
                let mut cpu = CpuTier::new(cfg.chunks, cfg.eviction, cfg.store_threshold);
                cpu.count_evictions_only(); // (only counted: `log_evictions`)
                if cfg.store_count_per_request {
                    cpu.count_per_request();
                }
                cpu
            },
            tpc: block_size * cfg.blocks_per_chunk,
            tpc_log2: (block_size * cfg.blocks_per_chunk)
                .is_power_of_two()
                .then(|| (block_size * cfg.blocks_per_chunk).trailing_zeros()),
            cfg,
            held: VecDeque::new(),
            loads: Vec::new(),
            stores: Vec::new(),
            stores_spare: Vec::new(),
            loading: HashMap::new(),
            load_free: 0,
            store_free: 0,
            next_job: 0,
            finished_last: Vec::new(),
            last_offers: Vec::new(),
            fences: HashMap::new(),
            touched: Vec::new(),
            preempted_now: Vec::new(),
            skipped_held: Vec::new(),
            offer: Vec::new(),
            stored: Vec::new(),
            evicted: Vec::new(),
            spare_keys: Vec::new(),
            spare_blocks: Vec::new(),
            occ_busy: 0,
            occ_steps: 0,
            h_last: Vec::new(),
            watch: livelock::Watch::default(),
            h_states: Vec::new(),
            batches: async_tier::Batches::default(),
        }
    }

    /// The keys just stored (`stored`, which takes a spare vector in their place).
    fn stored_keys(&mut self) -> Vec<BlockKey> {
        let spare = self.spare_keys.pop().unwrap_or_default();
        std::mem::replace(&mut self.stored, spare)
    }

    /// Whole chunks in `tokens` tokens (`tokens / tpc`, a shift when it is a power of two).
    #[inline]
    fn per_chunk(&self, tokens: u64) -> u64 {
        match self.tpc_log2 {
            Some(s) => tokens >> s,
            None => tokens / self.tpc,
        }
    }

    /// What a store moves (`offer_one`'s, from `offer_to_tier`'s `Offered`): a running request's run
    /// read from its table (`offer_running`'s kind), or anything else with its keys and blocks.
    fn store_what(
        &mut self,
        run: Option<(u64, u64, u64)>,
        blocks: Vec<BlockId>,
        table: Option<(usize, usize)>,
    ) -> What {
        if let (Some((hi, lo, n)), Some(_)) = (run, table) {
            debug_assert!(blocks.is_empty());
            if blocks.capacity() > 0 {
                self.spare_blocks.push(blocks);
            }
            return What::Run { hi, lo, n };
        }
        let keys = if run.is_some() {
            Vec::new()
        } else {
            self.stored_keys()
        };
        What::Stored(Box::new(Stored {
            keys,
            run,
            blocks,
            table,
            windowed: 0,
        }))
    }

    /// The requests finished in the step before done with the tier (`CpuTier::finish_own`, else
    /// `finish_unnamed`), in order.
    pub(super) fn finish_last(&mut self) {
        for &(row, own) in &self.finished_last {
            let hi = private_hi(row);
            if own == 0 || !self.cpu.finish_own(own, hi) {
                self.cpu.finish_unnamed(hi);
            }
        }
        self.finished_last.clear();
    }

    /// A store on the link from now (`hot`: the engine's `tier_hot`).
    /// The earliest end of a transfer in flight (`TierHot::min_end`), `i64::MAX` if none is.
    /// A hybrid model's `n` blocks of group `g` on the link (`TierConfig::group_link`): their time on
    /// it and the host bytes they move, added to `charge`.
    #[inline]
    fn charge_group(&self, charge: &mut (u64, u64), g: usize, n: u64) {
        let link = self.cfg.group_link[g];
        charge.0 = charge.0.saturating_add(n.saturating_mul(link.ps_per_block));
        charge.1 = charge
            .1
            .saturating_add(n.saturating_mul(link.bytes_per_block));
    }

    fn min_end(&self) -> i64 {
        self.loads
            .iter()
            .chain(&self.stores)
            .map(|j| j.end)
            .min()
            .unwrap_or(i64::MAX)
    }

    fn push_store(&mut self, hot: &mut TierHot, job: Job) {
        hot.min_end = hot.min_end.min(job.end);
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

/// The upper half of row `row`'s private block keys (`ensure_tier_keys`), and its request's id in the
/// tier (`CpuTier`'s `rid`): the tier's name for the row (`cpu_tier::row_name`: distinct for distinct
/// rows), so that a request's record and its private chunks are found by the row, in the tier's rows'
/// windows (DESIGN.md §CPU tier).
#[inline]
pub(in crate::engine) fn private_hi(row: usize) -> u64 {
    crate::cpu_tier::row_name(row)
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
        let bpc = self.cfg.tier.as_ref().expect("a CPU tier").blocks_per_chunk;
        let s = &self.slab[k];
        tier_key(&s.tier_keys, s.row, (c + 1) * bpc - 1)
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
            self.stop_after_step(transfer_overflow_message(what, blocks, start));
            i64::MAX
        })
    }

    /// When a transfer of `blocks` blocks taking `link_ps` on the link (`Job::link_ps`) after `latency`
    /// ends, as `transfer_end_or_overflow`.
    fn link_end_or_overflow(
        &mut self,
        what: Transfer,
        start: i64,
        latency: u64,
        (blocks, link_ps): (u64, u64),
    ) -> i64 {
        transfer_end(start, latency, 1, link_ps).unwrap_or_else(|| {
            self.stop_after_step(transfer_overflow_message(what, blocks, start));
            i64::MAX
        })
    }

    /// vLLM's flush list as a step's offers begin: the stores in flight of the requests preempted in the
    /// step (`preempted_now`, emptied) and every store fencing a block the step allocated or hit
    /// (`touched`); the offers may add a finished request's own.
    fn flushes_due(&self, tier: &mut Tier) -> Vec<u64> {
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
        flushed
    }

    /// vLLM's flush: each store of `flushed` (ids; a repeat counted once) still in flight is seen complete
    /// at observation `observation`, and counted; if any is, the step's new transfers are timed in vLLM's
    /// order (`flush_step`). `before` is the store link's free time and the last job id as the step's
    /// offers began. Returns the step's end if it flushes, else 0.
    fn apply_flushes(
        &mut self,
        tier: &mut Tier,
        flushed: &[u64],
        observation: u64,
        (step_end, before): (i64, (i64, u64)),
    ) -> i64 {
        let mut any = false;
        for (i, &id) in flushed.iter().enumerate() {
            if flushed[..i].contains(&id) {
                continue;
            }
            if let Some(job) = tier.stores.iter_mut().find(|j| j.id == id) {
                job.avail = job.avail.min(observation);
                self.out.counters.num_flushes += 1;
                any = true;
            }
        }
        if !any {
            return 0;
        }
        if self.step_error.is_some() {
            return step_end; // (the run stops after this step with its error, as the reference raises it)
        }
        self.flush_step(tier, flushed, observation, step_end, before)
    }

    /// vLLM's order of a flushing step (DESIGN.md §CPU tier, "Time"; its worker's `handle_preemptions`
    /// before the forward pass): the step's new stores (ids above `id0`, planned from `step_end` on a
    /// link free from `free0`) timed again, those it waits for (`flushed`) first from the step's start,
    /// then its loads from the end of the wait, its compute after the wait, and its other new stores from
    /// the step's end. Returns the step's end.
    #[cold]
    fn flush_step(
        &mut self,
        tier: &mut Tier,
        flushed: &[u64],
        observation: u64,
        step_end: i64,
        (free0, id0): (i64, u64),
    ) -> i64 {
        let (start, link) = (self.t, tier.cfg.latency_ps);
        let new = |j: &Job| j.id > id0;
        let waited = |j: &Job| flushed.contains(&j.id);
        let stores = tier.stores.iter_mut().filter(|j| new(j) && waited(j));
        let free = self.requeue(stores, (Transfer::Store, link), start, free0);
        let wait = tier
            .stores
            .iter()
            .filter(|j| waited(j))
            .map(|j| j.end)
            .fold(start, i64::max);
        let end = wait.saturating_add(step_end - start);
        let stores = tier.stores.iter_mut().filter(|j| new(j) && !waited(j));
        tier.store_free = self.requeue(stores, (Transfer::Store, link), end, free);
        let mine = |j: &Job| j.avail == observation && matches!(j.what, What::Load(_));
        if tier.loads.iter().any(mine) {
            let free = tier
                .loads
                .iter()
                .filter(|j| matches!(j.what, What::Load(_)) && !mine(j))
                .map(|j| j.end)
                .max()
                .unwrap_or(0);
            let loads = tier.loads.iter_mut().filter(|j| mine(j));
            tier.load_free = self.requeue(loads, (Transfer::Load, link), wait, free);
        }
        self.tier_hot.min_end = tier.min_end();
        end
    }

    /// `jobs` on their link (`what`, its latency; each job's time on it, `Job::link_ps`) again, one after
    /// the other from when it is free (`free`), none before `from`; returns when the link is free again.
    fn requeue<'j>(
        &mut self,
        jobs: impl Iterator<Item = &'j mut Job>,
        (what, latency): (Transfer, u64),
        from: i64,
        mut free: i64,
    ) -> i64 {
        for job in jobs {
            let begin = from.max(free);
            free = self.link_end_or_overflow(what, begin, latency, (job.blocks, job.link_ps));
            job.end = free;
        }
        free
    }

    #[inline]
    fn tier_ref(&self) -> &Tier {
        self.tier.as_deref().expect("a CPU tier")
    }
}
